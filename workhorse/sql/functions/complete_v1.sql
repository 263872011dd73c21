-- Record successes. Accepted while the job is still active under this fence, that is, until it is
-- claimed again (an expired lease that nobody reclaimed yet still completes). A job whose cancel
-- was requested while it ran ends `canceled`, its result discarded. The expiry is fixed now, from
-- the retention of the app that ran the job: `p_retentions` holds the distinct retention
-- documents of the batch (JSON: status -> seconds kept) and `p_retention_ix` each job's one
-- (1-based; NULL when the batch has one document), because that is far cheaper to send than
-- one document a job.
-- Returns the (id, fence) pairs accepted, with the status each ended in; the others were stale
-- and changed nothing. The fence too, because one batch may carry a job's stale outcome beside
-- its fresh one.
CREATE FUNCTION workhorse.complete_v1(
    p_ids bigint[], p_fences bigint[], p_results text[], p_retention_ix integer[],
    p_retentions text[])
RETURNS TABLE (id bigint, fence bigint, status text)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_at timestamptz := clock_timestamp();  -- one clock reading: the expiry is exact
BEGIN
    RETURN QUERY
        WITH done AS (
            UPDATE workhorse.jobs j
            SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'succeeded'
                              ELSE 'canceled' END,
                result = CASE WHEN j.cancel_requested_at IS NULL THEN b.result::jsonb END,
                finished_at = v_at,
                expires_at = workhorse._expiry_v1(
                    CASE WHEN j.cancel_requested_at IS NULL THEN 'succeeded' ELSE 'canceled' END,
                    p_retentions[COALESCE(b.ix, 1)]::jsonb, v_at),
                lease_until = NULL
            FROM unnest(p_ids, p_fences, p_results, p_retention_ix) AS b(id, fence, result, ix)
            WHERE j.id = b.id AND j.fence = b.fence AND j.status = 'active'
            RETURNING j.id, j.fence, j.queue, j.status
        ), woken AS (
            -- Capacity freed on a governed queue (a policy, or an operator control): wake the
            -- claimers that were waiting for it.
            SELECT count(workhorse._wake_v1(g.queue)) AS n
            FROM (SELECT DISTINCT d.queue FROM done d) AS g
            WHERE EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = g.queue)
               OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = g.queue)
        ), ended AS (
            -- Result waiters (JobHandle.get) learn that these jobs are done.
            SELECT workhorse._ended_v1(array_agg(d.id)) AS n FROM done d
        )
        SELECT done.id, done.fence, done.status FROM done, woken, ended;
END
$$;
