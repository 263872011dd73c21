-- A running job's `step.wait_for(p_name, signal=p_signal)` (docs/design.md "Signals"): consume
-- the oldest signal of that name not consumed yet and record the step with its payload, under
-- the job's fence, in one statement's transaction. Returns one row (found, payload): found is
-- false when no signal is there (the job will suspend), NULL when the fence is stale.
CREATE FUNCTION workhorse.wait_signal_v1(p_id bigint, p_fence bigint, p_name text, p_signal text)
RETURNS TABLE (found boolean, payload jsonb)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_signal bigint;
    v_payload jsonb;
BEGIN
    -- The job's row first, as signal_v1 locks it: a signal committing meanwhile is either seen
    -- here or finds the job suspended.
    PERFORM 1 FROM workhorse.jobs j
    WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('active', '')
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::boolean, NULL::jsonb;
        RETURN;
    END IF;
    SELECT g.id, g.payload INTO v_signal, v_payload FROM workhorse.job_signals g
    WHERE g.job_id = p_id AND g.name = p_signal AND g.consumed_at IS NULL
    ORDER BY g.id
    LIMIT 1
    FOR UPDATE;
    IF v_signal IS NULL THEN
        RETURN QUERY SELECT false, NULL::jsonb;
        RETURN;
    END IF;
    UPDATE workhorse.job_signals g SET consumed_at = clock_timestamp(), consumed_by = p_name
    WHERE g.id = v_signal;
    PERFORM workhorse.record_step_v1(p_id, p_fence, p_name, 'wait', v_payload, NULL);
    RETURN QUERY SELECT true, v_payload;
END
$$;
