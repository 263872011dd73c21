-- fail_v1 of 0.2.0, whose results NOTIFY goes only to registered waiters (_ended_v2).
-- Record a failed attempt. With p_retry_at and attempts left, the job waits as `scheduled`;
-- otherwise it ends `failed`, or `held` when its task says so; a job whose cancel was requested
-- while it ran ends `canceled` (no retry). `p_retention` (JSON: status -> seconds kept, from the
-- app that ran the job) fixes the expiry of a job that ends here. Returns the new status, or
-- NULL when the fence is stale (nothing changed). The job is looked up by id with
-- `status IN ('active', '')`: a bare `status = 'active'` lets the planner read every active job
-- of every queue through jobs_active_idx whenever its statistics show few.
-- Feature level 1: a job of a higher level is left alone, as if its fence were stale.
CREATE FUNCTION workhorse.fail_v2(
    p_id bigint, p_fence bigint, p_error text, p_retry_at timestamptz, p_retention text)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_status text;
    v_queue text;
    v_at timestamptz := clock_timestamp();  -- one clock reading: the expiry is exact
BEGIN
    -- The next status is computed from the row being updated (not a snapshot read before it),
    -- so that a cancel request that commits meanwhile is seen.
    UPDATE workhorse.jobs j
    SET status = workhorse._failed_status_v1(
            j.cancel_requested_at, j.attempts, j.max_attempts, j.on_failure, p_retry_at),
        run_at = CASE WHEN workhorse._failed_status_v1(j.cancel_requested_at, j.attempts,
                               j.max_attempts, j.on_failure, p_retry_at) = 'scheduled'
                      THEN p_retry_at ELSE j.run_at END,
        finished_at = CASE WHEN workhorse._failed_status_v1(j.cancel_requested_at, j.attempts,
                                    j.max_attempts, j.on_failure, p_retry_at) = 'scheduled'
                           THEN NULL ELSE v_at END,
        expires_at = workhorse._expiry_v1(
            workhorse._failed_status_v1(j.cancel_requested_at, j.attempts, j.max_attempts,
                                        j.on_failure, p_retry_at),
            p_retention::jsonb, v_at),
        error = p_error::jsonb,
        lease_until = NULL
    WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('active', '')
      AND j.feature_level <= 1  -- this function's feature level
    RETURNING j.status, j.queue INTO v_status, v_queue;
    IF v_status IS NOT NULL
       AND (EXISTS (SELECT 1 FROM workhorse.policies WHERE queue = v_queue)
            OR EXISTS (SELECT 1 FROM workhorse.queue_controls WHERE queue = v_queue)) THEN
        PERFORM workhorse._wake_v1(v_queue);
    END IF;
    IF v_status IN ('failed', 'held', 'canceled') THEN
        PERFORM workhorse._ended_v2(ARRAY[p_id]);
    END IF;
    IF v_status IS NULL THEN
        -- A resend of a failure already recorded under its fence (the connection broke after
        -- the commit, before the reply): the status it ended in, not stale.
        SELECT j.status INTO v_status FROM workhorse.jobs j
        WHERE j.id = p_id AND j.fence = p_fence AND j.status <> 'active'
          AND j.error = p_error::jsonb;
    END IF;
    RETURN v_status;
END
$$;
