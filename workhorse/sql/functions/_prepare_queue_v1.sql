-- Housekeeping both claim paths do first, on this queue only:
--  * an expired lease whose job has no attempts left ends the job (failed, or held);
--  * scheduled jobs that are due become ready (and hint their keys).
CREATE FUNCTION workhorse._prepare_queue_v1(p_queue text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_keys text[];
BEGIN
    UPDATE workhorse.jobs j
    SET status = CASE j.on_failure WHEN 'hold' THEN 'held' ELSE 'failed' END,
        finished_at = p_now,
        lease_until = NULL,
        error = jsonb_build_object(
            'type', 'LeaseExpired',
            'message', format('lease expired on attempt %s of %s', j.attempts, j.max_attempts),
            'traceback', NULL)
    WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= p_now
      AND j.attempts >= j.max_attempts;

    -- `id = ANY(ARRAY(...))`, not a join with the due rows: a join estimated at a few hundred
    -- rows makes the planner hash the whole jobs table, on every claim.
    WITH promoted AS (
        UPDATE workhorse.jobs j SET status = 'ready'
        WHERE j.id = ANY(ARRAY(
                SELECT d.id FROM workhorse.jobs d
                WHERE d.queue = p_queue AND d.status = 'scheduled' AND d.run_at <= p_now
                ORDER BY d.queue, d.run_at
                LIMIT 1000
                FOR UPDATE SKIP LOCKED))
          AND j.status = 'scheduled'
        RETURNING j.ckey
    )
    SELECT array_agg(DISTINCT ckey) INTO v_keys FROM promoted WHERE ckey <> '';
    PERFORM workhorse._hint_keys_v1(p_queue, v_keys);
END
$$;
