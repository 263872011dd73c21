-- End the jobs of one queue that passed their start_by (docs/design.md "Deadlines"): ready or
-- scheduled ones, and active ones whose lease expired (their attempt is over, and no new one may
-- start). Each ends `expired` with an error saying which bound it passed, its finish time now,
-- kept a day (as a cancel's default). Rows another claim holds are skipped (SKIP LOCKED): that
-- claim's activation will not start them either. The keys of the jobs that left `ready` are
-- hinted, so that the claim's key heads move past them, and their ends told (_ended_v2).
-- Returns how many ended.
CREATE FUNCTION workhorse._expire_jobs_v1(p_queue text, p_now timestamptz) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_keys text[];
    v_ended integer;
    v_ids bigint[];
BEGIN
    WITH ended AS (
        UPDATE workhorse.jobs j
        SET status = 'expired', finished_at = p_now, lease_until = NULL,
            expires_at = p_now + interval '1 day',
            error = jsonb_build_object(
                'type', 'Expired',
                'message', format('not started by its %s (%s)',
                                  CASE WHEN j.deadline IS NOT NULL AND j.start_by >= j.deadline
                                       THEN 'deadline' ELSE 'expiry' END,
                                  j.start_by),
                'traceback', NULL)
        WHERE j.id = ANY(ARRAY(
                SELECT x.id FROM workhorse.jobs x
                WHERE x.queue = p_queue AND x.start_by IS NOT NULL AND x.start_by <= p_now
                  AND x.status IN ('ready', 'scheduled', 'active')
                  AND (x.status <> 'active' OR x.lease_until <= p_now)
                ORDER BY x.queue, x.start_by
                FOR UPDATE SKIP LOCKED))
          AND j.start_by <= p_now
          AND (j.status IN ('ready', 'scheduled')
               OR (j.status = 'active' AND j.lease_until <= p_now))
        RETURNING j.id, j.ckey
    )
    SELECT array_agg(DISTINCT e.ckey) FILTER (WHERE e.ckey <> ''), count(*)::integer,
           array_agg(e.id)
    INTO v_keys, v_ended, v_ids
    FROM ended e;
    IF v_keys IS NOT NULL THEN
        PERFORM workhorse._hint_keys_v2(p_queue, v_keys);
    END IF;
    -- Like every end: result waiters are told, and a child's parent woken (_ended_v2).
    PERFORM workhorse._ended_v2(v_ids);
    RETURN v_ended;
END
$$;
