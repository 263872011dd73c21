-- Suspend a running job at a suspension point (docs/design.md "Durable execution"): the step
-- `p_name` of `p_kind` (sleep, wait, child, children) is kept pending, with the sleep's end or
-- the wait's timeout (`p_wake_at`) and the signal a wait expects; the job leaves `active` for
-- `suspended` (`p_reason`: sleep, signal or children), its lease ends, its place and units are
-- free at once, and the claim that ran it is given back (no attempt used). A governed queue's
-- claimers are told that room was freed.
--
-- What would wake it may already be there: a signal committed before this row lock, children
-- that all ended, a timer already due. Then the job goes back to `ready` at once (hinted and
-- its claimers woken) instead of waiting for a cause that has come. The row lock orders this
-- with signal_v1 and _wake_parents_v1, which lock the job's row before they look at its status:
-- whichever commits second sees the other. A job whose cancel was requested ends `canceled`,
-- and its children that have not finished with it (cancel_jobs_v2).
--
-- Returns the job's new status, or NULL when the fence is stale (nothing written). A resend of
-- a suspension already recorded (the reply was lost) returns the status it left.
CREATE FUNCTION workhorse.suspend_v1(
    p_id bigint, p_fence bigint, p_name text, p_kind text, p_reason text,
    p_wake_at timestamptz, p_signal text, p_retention text)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_job workhorse.jobs%ROWTYPE;
    v_at timestamptz := clock_timestamp();
    v_met boolean;
    v_status text;
BEGIN
    SELECT * INTO v_job FROM workhorse.jobs j
    WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('active', '')
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        SELECT j.status INTO v_status FROM workhorse.jobs j
        WHERE j.id = p_id AND j.fence = p_fence
          AND j.status IN ('suspended', 'ready', 'canceled')
          AND EXISTS (SELECT 1 FROM workhorse.job_steps s
                      WHERE s.job_id = p_id AND s.name = p_name AND s.fence = p_fence);
        RETURN v_status;
    END IF;
    IF v_job.cancel_requested_at IS NOT NULL THEN
        UPDATE workhorse.jobs j
        SET status = 'canceled', finished_at = v_at, lease_until = NULL,
            expires_at = workhorse._expiry_v1('canceled', p_retention::jsonb, v_at)
        WHERE j.id = p_id;
        PERFORM workhorse._wake_v1(v_job.queue);
        PERFORM workhorse._ended_v2(ARRAY[p_id]);
        -- Its children that have not finished go with it (docs/design.md "Children"): the
        -- cancel that was requested while it ran could not see those it enqueued afterwards
        -- (adopt_children_v1 checks the fence alone), and they would run with no parent.
        PERFORM workhorse.cancel_jobs_v2(ARRAY(
            SELECT c.id FROM workhorse.jobs c
            WHERE c.parent_id = p_id
              AND c.status NOT IN ('succeeded', 'failed', 'held', 'canceled', 'expired')),
            p_retention);
        RETURN 'canceled';
    END IF;
    PERFORM workhorse._durable_level_v1(v_job.queue);
    INSERT INTO workhorse.job_steps AS s (job_id, name, kind, wake_at, signal, fence)
    VALUES (p_id, p_name, p_kind, p_wake_at, p_signal, p_fence)
    ON CONFLICT (job_id, name) DO UPDATE
        SET fence = excluded.fence,
            -- A suspension point keeps the end it was first given (a sleep of "2h" reached
            -- again by a rerun does not start over); a wait's timeout likewise.
            wake_at = COALESCE(s.wake_at, excluded.wake_at), signal = excluded.signal
        WHERE s.recorded_at IS NULL;
    v_met := CASE p_reason
        WHEN 'sleep' THEN p_wake_at IS NOT NULL AND p_wake_at <= v_at
        WHEN 'signal' THEN
            EXISTS (SELECT 1 FROM workhorse.job_signals g
                    WHERE g.job_id = p_id AND g.name = p_signal AND g.consumed_at IS NULL)
            OR (p_wake_at IS NOT NULL AND p_wake_at <= v_at)
        WHEN 'children' THEN
            NOT EXISTS (SELECT 1 FROM workhorse.jobs c
                        WHERE c.parent_id = p_id
                          AND c.status NOT IN ('succeeded', 'failed', 'held', 'canceled',
                                               'expired'))
        ELSE false END;
    UPDATE workhorse.jobs j
    SET status = CASE WHEN v_met THEN 'ready' ELSE 'suspended' END,
        suspended_on = CASE WHEN v_met THEN NULL ELSE p_reason END,
        wake_at = CASE WHEN v_met THEN NULL ELSE p_wake_at END,
        attempts = j.attempts - 1,
        lease_until = NULL,
        durable = true
    WHERE j.id = p_id
    RETURNING j.status INTO v_status;
    IF v_met THEN
        PERFORM workhorse._hint_keys_v2(v_job.queue, ARRAY[v_job.ckey]);
        PERFORM workhorse._wake_v1(v_job.queue);
    ELSIF EXISTS (SELECT 1 FROM workhorse.policies WHERE queue = v_job.queue)
          OR EXISTS (SELECT 1 FROM workhorse.queue_controls WHERE queue = v_job.queue)
          OR v_job.budget IS NOT NULL THEN
        PERFORM workhorse._wake_v1(v_job.queue);  -- room was freed
    END IF;
    RETURN v_status;
END
$$;
