-- housekeeping_v1, and the same for named budgets (migrations/0009_budgets.sql): budget
-- overrides that expired are deleted (under each budget's lock, as an operator's clear), and
-- budget start buckets older than the budget's longest window in force (its rate's period; the
-- burst's window is shorter) are pruned, so budget_starts stays bounded; so are the queues'
-- burst buckets (burst_starts), by their queue's longest period in force. Returns the totals.
CREATE FUNCTION workhorse.housekeeping_v2(OUT expired_overrides integer, OUT pruned_starts integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_name text;
    v_count integer;
BEGIN
    SELECT h.expired_overrides, h.pruned_starts INTO expired_overrides, pruned_starts
    FROM workhorse.housekeeping_v1() AS h;
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
END
$$;
