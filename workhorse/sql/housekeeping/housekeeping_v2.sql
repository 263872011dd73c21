-- Fleet housekeeping, run by one supervisor at a time: queue overrides that expired are cleared
-- (as an operator's clear, set_queue_control_v2: their queues woken, their heads dropped when
-- nothing keeps heads any more), budget overrides that expired are deleted (under each budget's
-- lock, as an operator's clear), control rows with nothing left to control are deleted, and start
-- buckets older than the longest window in force are pruned, so that rate_starts, burst_starts
-- (by their queue's longest period) and budget_starts (by the budget's rate period; the burst's
-- window is shorter) stay bounded; result waiters' registrations whose sessions are gone are
-- dropped (once the last waiter left, outcomes stop sending results notices), jobs past their
-- start_by end `expired` (_expire_jobs_v1) in every queue, and backoffs and holds that ended are
-- deleted.
-- Returns the totals.
CREATE FUNCTION workhorse.housekeeping_v2(OUT expired_overrides integer, OUT pruned_starts integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
    v_name text;
    v_count integer;
BEGIN
    expired_overrides := 0;
    FOR v_queue IN
        SELECT c.queue FROM workhorse.queue_controls c
        WHERE c.override_expires_at <= now() ORDER BY 1
    LOOP
        PERFORM workhorse.set_queue_control_v2(v_queue, 'clear_override', NULL, NULL, NULL,
                                               NULL, NULL, NULL, NULL);
        expired_overrides := expired_overrides + 1;
    END LOOP;

    -- Jobs past their start_by (docs/design.md "Deadlines") end `expired` here too, in queues
    -- no claim visits (no worker serves them), so that health counts them.
    FOR v_queue IN
        SELECT DISTINCT j.queue FROM workhorse.jobs j
        WHERE j.start_by IS NOT NULL AND j.start_by <= now()
          AND j.status IN ('ready', 'scheduled', 'active')
        ORDER BY 1
    LOOP
        PERFORM workhorse._expire_jobs_v1(v_queue, clock_timestamp());
    END LOOP;

    -- One pass, joined to each queue's longest period in force (none: every bucket goes).
    WITH longest AS (
        SELECT q.queue,
               COALESCE(GREATEST(p.rate_period, p.rate_period_per_key, c.rate_period,
                                 c.rate_period_per_key), 0) AS period
        FROM (SELECT DISTINCT s.queue FROM workhorse.rate_starts s) AS q
        LEFT JOIN workhorse.policies p ON p.queue = q.queue
        LEFT JOIN workhorse.queue_controls c ON c.queue = q.queue
    )
    DELETE FROM workhorse.rate_starts s
    USING longest l
    WHERE s.queue = l.queue AND s.bucket_end <= now() - make_interval(secs => l.period);
    GET DIAGNOSTICS pruned_starts = ROW_COUNT;

    FOR v_name IN
        SELECT c.name FROM workhorse.budget_controls c
        WHERE c.override_expires_at <= now() ORDER BY 1
    LOOP
        PERFORM workhorse.set_budget_control_v1(v_name, 'clear_override', NULL, NULL, NULL,
                                                NULL, NULL);
        expired_overrides := expired_overrides + 1;
    END LOOP;

    WITH longest AS (
        SELECT s.budget,
               COALESCE(GREATEST(b.rate_period, c.rate_period), 0) AS period
        FROM (SELECT DISTINCT bs.budget FROM workhorse.budget_starts bs) AS s
        LEFT JOIN workhorse.budgets b ON b.name = s.budget
        LEFT JOIN workhorse.budget_controls c ON c.name = s.budget
    )
    DELETE FROM workhorse.budget_starts s
    USING longest l
    WHERE s.budget = l.budget AND s.bucket_end <= now() - make_interval(secs => l.period);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    pruned_starts := pruned_starts + v_count;

    WITH longest AS (
        SELECT q.queue,
               COALESCE(GREATEST(p.rate_period, p.rate_period_per_key, c.rate_period,
                                 c.rate_period_per_key), 0) AS period
        FROM (SELECT DISTINCT s.queue FROM workhorse.burst_starts s) AS q
        LEFT JOIN workhorse.policies p ON p.queue = q.queue
        LEFT JOIN workhorse.queue_controls c ON c.queue = q.queue
    )
    DELETE FROM workhorse.burst_starts s
    USING longest l
    WHERE s.queue = l.queue AND s.bucket_end <= now() - make_interval(secs => l.period);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    pruned_starts := pruned_starts + v_count;

    -- Backoffs that ended (docs/design.md "Back-pressure") go, but an adaptive budget's only
    -- once its effective max_active is back at the limit; and their stamps on the queues'
    -- control rows; a control row that held only such a stamp goes too.
    DELETE FROM workhorse.backoffs b
    WHERE b.until <= now()
      AND NOT EXISTS (
          SELECT 1 FROM workhorse.budgets bd
          LEFT JOIN workhorse.budget_controls o
              ON o.name = bd.name
             AND (o.override_expires_at IS NULL OR o.override_expires_at > now())
          WHERE b.scope = 'budget' AND b.adaptive_max IS NOT NULL
            AND bd.name = b.name AND bd.adaptive
            AND workhorse._adaptive_max_v1(COALESCE(o.max_active, bd.max_active),
                                           b.adaptive_max, b.until, b.retry_after, now())
                < COALESCE(o.max_active, bd.max_active));
    DELETE FROM workhorse.queue_controls c
    WHERE c.backed_off_until <= now() AND NOT c.paused AND c.override_set_at IS NULL;
    UPDATE workhorse.queue_controls c SET backed_off_until = NULL
    WHERE c.backed_off_until <= now();

    -- Holds whose lease ended (docs/design.md "Holds": a dead holder's) no longer count; their
    -- rows go.
    DELETE FROM workhorse.budget_holds h WHERE h.lease_until <= now();

    DELETE FROM workhorse.result_listeners r
    WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.backend_pid);
END
$$;
