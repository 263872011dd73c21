-- Record successes (each an (id, fence) pair with its result and retention, as
-- _record_successes_v1 takes them; a resent success already recorded under its fence is accepted
-- again), and wake the claimers of the governed queues whose capacity was freed.
CREATE FUNCTION workhorse.complete_v1(
    p_ids bigint[], p_fences bigint[], p_results text[], p_retention_ix integer[],
    p_retentions text[])
RETURNS TABLE (id bigint, fence bigint, status text)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN QUERY
        WITH done AS (
            SELECT r.id, r.fence, r.queue, r.status
            FROM workhorse._record_successes_v1(
                p_ids, p_fences, p_results, p_retention_ix, p_retentions) AS r
        ), woken AS (
            SELECT count(workhorse._wake_v1(g.queue)) AS n
            FROM (SELECT DISTINCT d.queue FROM done d) AS g
            WHERE EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = g.queue)
               OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = g.queue)
        )
        SELECT done.id, done.fence, done.status FROM done, woken;
END
$$;
