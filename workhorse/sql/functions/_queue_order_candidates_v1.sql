-- Ready jobs in queue order plus expired leases, best `p_limit` by (rank, id).
-- Used by the fast path and by queues with only a queue-wide limit, where nothing is ever skipped.
-- Expired leases are taken in (rank, id) order too, not in expiry order: with more of them than
-- p_limit, expiry order would reclaim a low-priority job ahead of a high-priority one. They are
-- few (they were active), so sorting them is cheap.
CREATE FUNCTION workhorse._queue_order_candidates_v1(p_queue text, p_limit integer, p_now timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    WITH ready AS (
        SELECT j.id, j.rank FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.status = 'ready'
        ORDER BY j.queue, j.rank, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), expired AS (
        SELECT j.id, j.rank FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= p_now
        ORDER BY j.rank, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), best AS (
        SELECT * FROM ready UNION ALL SELECT * FROM expired
        ORDER BY rank, id
        LIMIT p_limit
    )
    SELECT COALESCE(array_agg(best.id ORDER BY best.rank, best.id), '{}') INTO v_ids FROM best;
    RETURN v_ids;
END
$$;
