-- A handler raised Snooze(delay): the job waits `p_delay` seconds as `scheduled` and comes back
-- without using an attempt (the claim that ran it is given back); its capacity is free at once,
-- and a governed queue's claimers are told. A job whose cancel was requested ends `canceled`
-- instead (`p_retention` as for fail_v1). Returns the new status, or NULL when the fence is
-- stale. The job is looked up by id (see fail_v1.sql).
-- Feature level 1: a job of a higher level is left alone, as if its fence were stale.
CREATE FUNCTION workhorse.snooze_v1(
    p_id bigint, p_fence bigint, p_delay double precision, p_retention text)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;  -- the job's queue, whose claimers are told
    v_status text;
    v_at timestamptz := clock_timestamp();
BEGIN
    UPDATE workhorse.jobs j
    SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'scheduled' ELSE 'canceled' END,
        attempts = CASE WHEN j.cancel_requested_at IS NULL THEN j.attempts - 1 ELSE j.attempts END,
        run_at = CASE WHEN j.cancel_requested_at IS NULL
                      THEN v_at + make_interval(secs => p_delay) ELSE j.run_at END,
        finished_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE v_at END,
        expires_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL
                          ELSE workhorse._expiry_v1('canceled', p_retention::jsonb, v_at) END,
        lease_until = NULL
    WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('active', '')
      AND j.feature_level <= 1  -- this function's feature level
    RETURNING j.status, j.queue INTO v_status, v_queue;
    IF v_status IS NULL THEN
        -- A resend of a snooze already recorded (the connection broke before the reply): the
        -- job waits under the same fence (only a claim changes it).
        SELECT j.status INTO v_status FROM workhorse.jobs j
        WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('scheduled', 'canceled');
        RETURN v_status;
    END IF;
    IF v_status IS NOT NULL
       AND (EXISTS (SELECT 1 FROM workhorse.policies WHERE queue = v_queue)
            OR EXISTS (SELECT 1 FROM workhorse.queue_controls WHERE queue = v_queue)) THEN
        PERFORM workhorse._wake_v1(v_queue);
    END IF;
    IF v_status = 'canceled' THEN
        PERFORM workhorse._ended_v1(ARRAY[p_id]);
    END IF;
    RETURN v_status;
END
$$;
