-- Record a step of a running job (docs/design.md "Durable execution"): its JSON result, or its
-- error (a wait that timed out, a child that failed), under the job's fence. A step already
-- recorded stays as it was (a resend after a lost reply, or a lost lease's late record); a
-- pending one (a sleep or a wait the job suspended on) becomes recorded. Returns false, and
-- writes nothing, when the fence is stale: another claim may own the job.
CREATE FUNCTION workhorse.record_step_v1(
    p_id bigint, p_fence bigint, p_name text, p_kind text, p_result jsonb, p_error jsonb)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
    v_durable boolean;
BEGIN
    -- The row lock keeps a reclaim (a new fence) from committing between the check and the
    -- record; `IN ('active', '')` as in fail_v2 (a lookup by id, never the active index).
    SELECT j.queue, j.durable INTO v_queue, v_durable FROM workhorse.jobs j
    WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('active', '')
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT v_durable THEN
        UPDATE workhorse.jobs j SET durable = true WHERE j.id = p_id;
        PERFORM workhorse._durable_level_v1(v_queue);
    END IF;
    INSERT INTO workhorse.job_steps AS s (job_id, name, kind, recorded_at, result, error, fence)
    VALUES (p_id, p_name, p_kind, clock_timestamp(), p_result, p_error, p_fence)
    ON CONFLICT (job_id, name) DO UPDATE
        SET recorded_at = excluded.recorded_at, result = excluded.result,
            error = excluded.error, fence = excluded.fence
        WHERE s.recorded_at IS NULL;
    RETURN true;
END
$$;
