-- Record a failed attempt. With p_retry_at and attempts left, the job waits as `scheduled`;
-- otherwise it ends `failed`, or `held` when its task says so. Returns the new status, or NULL
-- when the fence is stale (nothing changed).
CREATE FUNCTION workhorse.fail_v1(p_id bigint, p_fence bigint, p_error text, p_retry_at timestamptz)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_status text;
    v_queue text;
BEGIN
    UPDATE workhorse.jobs j
    SET status = CASE
            WHEN p_retry_at IS NOT NULL AND j.attempts < j.max_attempts THEN 'scheduled'
            WHEN j.on_failure = 'hold' THEN 'held'
            ELSE 'failed' END,
        run_at = CASE WHEN p_retry_at IS NOT NULL AND j.attempts < j.max_attempts
                      THEN p_retry_at ELSE j.run_at END,
        finished_at = CASE WHEN p_retry_at IS NOT NULL AND j.attempts < j.max_attempts
                           THEN NULL ELSE clock_timestamp() END,
        error = p_error::jsonb,
        lease_until = NULL
    WHERE j.id = p_id AND j.fence = p_fence AND j.status = 'active'
    RETURNING j.status, j.queue INTO v_status, v_queue;
    IF v_status IS NOT NULL
       AND (EXISTS (SELECT 1 FROM workhorse.policies WHERE queue = v_queue)
            OR EXISTS (SELECT 1 FROM workhorse.queue_controls WHERE queue = v_queue)) THEN
        PERFORM workhorse._wake_v1(v_queue);
    END IF;
    RETURN v_status;
END
$$;
