-- Housekeeping both claim paths do first, on this queue only:
--  * an expired lease whose job has no attempts left ends the job (failed, or held);
--  * scheduled jobs that are due become ready (and hint their keys, in every queue that keeps
--    heads: a per-key limit, or fair share, _keyed_v2), so that a retry or a snooze that falls
--    due on a fair queue is seen by its claim;
--  * suspended jobs whose timer is due become ready too (docs/design.md "Durable execution").
CREATE FUNCTION workhorse._prepare_queue_v2(p_queue text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_keys text[];
    v_ended bigint[];
BEGIN
    -- No app ran this attempt to its end, so the default retention applies: failed 7 days,
    -- canceled 1 day (its cancel was requested), held until an operator acts.
    WITH ended AS (
        UPDATE workhorse.jobs j
        SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'canceled'
                          WHEN j.on_failure = 'hold' THEN 'held' ELSE 'failed' END,
            finished_at = p_now,
            expires_at = CASE WHEN j.cancel_requested_at IS NOT NULL THEN p_now + interval '1 day'
                              WHEN j.on_failure = 'hold' THEN NULL
                              ELSE p_now + interval '7 days' END,
            lease_until = NULL,
            error = jsonb_build_object(
                'type', 'LeaseExpired',
                'message', format('lease expired on attempt %s of %s', j.attempts, j.max_attempts),
                'traceback', NULL)
        WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= p_now
          AND (j.attempts >= j.max_attempts OR j.cancel_requested_at IS NOT NULL)
        RETURNING j.id
    )
    SELECT array_agg(e.id) INTO v_ended FROM ended e;
    IF v_ended IS NOT NULL THEN
        PERFORM workhorse._ended_v2(v_ended);
    END IF;

    -- Scheduled jobs due, and suspended jobs whose timer is due (a durable sleep's end, a
    -- wait's timeout: their handler runs again and finds the sleep done, or the wait timed out),
    -- in one statement. `id = ANY(ARRAY(...))`, not a join with the due rows: a join estimated
    -- at a few hundred rows makes the planner hash the whole jobs table, on every claim.
    WITH promoted AS (
        UPDATE workhorse.jobs j SET status = 'ready', suspended_on = NULL, wake_at = NULL
        WHERE j.id = ANY(ARRAY(
                SELECT d.id FROM workhorse.jobs d
                WHERE d.queue = p_queue AND d.status = 'scheduled' AND d.run_at <= p_now
                ORDER BY d.queue, d.run_at
                LIMIT 1000
                FOR UPDATE SKIP LOCKED) || ARRAY(
                SELECT d.id FROM workhorse.jobs d
                WHERE d.queue = p_queue AND d.status = 'suspended' AND d.wake_at <= p_now
                ORDER BY d.queue, d.wake_at
                LIMIT 1000
                FOR UPDATE SKIP LOCKED))
          AND j.status IN ('scheduled', 'suspended')
        RETURNING j.ckey
    )
    SELECT array_agg(DISTINCT ckey) INTO v_keys FROM promoted WHERE ckey <> '';
    PERFORM workhorse._hint_keys_v2(p_queue, v_keys);
END
$$;
