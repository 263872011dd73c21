-- Fleet housekeeping, run by one supervisor at a time: overrides that expired are cleared (their
-- queues woken, their heads dropped when no per-key limit is left), control rows with nothing
-- left to control are deleted, and start buckets older than the longest period in force on
-- their queue are pruned, so rate_starts stays bounded. Returns what it did.
CREATE FUNCTION workhorse.housekeeping_v1(OUT expired_overrides integer, OUT pruned_starts integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
BEGIN
    expired_overrides := 0;
    FOR v_queue IN
        SELECT c.queue FROM workhorse.queue_controls c
        WHERE c.override_expires_at <= now() ORDER BY 1
    LOOP
        PERFORM workhorse.set_queue_control_v1(v_queue, 'clear_override', NULL, NULL, NULL,
                                               NULL, NULL, NULL, NULL);
        expired_overrides := expired_overrides + 1;
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
END
$$;
