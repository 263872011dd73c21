-- Delete up to p_limit finished jobs: with p_older_than NULL, those whose expiry has passed
-- (retention); otherwise those of p_statuses that finished more than p_older_than seconds ago
-- (`workhorse jobs prune --older-than`). One pruner at a time fleet-wide, through a
-- transaction-scoped try-lock (it works behind PgBouncer); a second one returns -1 at once.
-- Only finished rows are touched, so claims never wait for a prune. Returns how many went.
CREATE FUNCTION workhorse.prune_jobs_v1(
    p_limit integer, p_older_than double precision, p_statuses text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_deleted integer;
BEGIN
    -- The two-int form: its keys never collide with the one-bigint queue locks.
    IF NOT pg_try_advisory_xact_lock(2003, 7048) THEN
        RETURN -1;
    END IF;
    IF p_older_than IS NULL THEN
        DELETE FROM workhorse.jobs j
        WHERE j.id = ANY(ARRAY(
            SELECT e.id FROM workhorse.jobs e
            WHERE e.expires_at IS NOT NULL AND e.expires_at <= now()
            ORDER BY e.expires_at
            LIMIT p_limit));
    ELSE
        DELETE FROM workhorse.jobs j
        WHERE j.id = ANY(ARRAY(
            SELECT e.id FROM workhorse.jobs e
            WHERE e.status = ANY(p_statuses)
              AND e.status IN ('succeeded', 'failed', 'held', 'canceled')
              AND e.finished_at <= now() - make_interval(secs => p_older_than)
            LIMIT p_limit));
    END IF;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;
