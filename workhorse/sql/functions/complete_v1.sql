-- Record successes. Accepted while the job is still active under this fence, that is, until it is
-- claimed again (an expired lease that nobody reclaimed yet still completes).
-- Returns the (id, fence) pairs accepted; the others were stale and changed nothing. The fence
-- too, because one batch may carry a job's stale outcome beside its fresh one.
CREATE FUNCTION workhorse.complete_v1(p_ids bigint[], p_fences bigint[], p_results text[])
RETURNS TABLE (id bigint, fence bigint)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN QUERY
        WITH done AS (
            UPDATE workhorse.jobs j
            SET status = 'succeeded', result = b.result::jsonb, finished_at = clock_timestamp(),
                lease_until = NULL
            FROM unnest(p_ids, p_fences, p_results) AS b(id, fence, result)
            WHERE j.id = b.id AND j.fence = b.fence AND j.status = 'active'
            RETURNING j.id, j.fence, j.queue
        ), woken AS (
            -- Capacity freed on a governed queue (a policy, or an operator control): wake the
            -- claimers that were waiting for it.
            SELECT count(workhorse._wake_v1(g.queue)) AS n
            FROM (SELECT DISTINCT d.queue FROM done d) AS g
            WHERE EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = g.queue)
               OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = g.queue)
        )
        SELECT done.id, done.fence FROM done, woken;
END
$$;
