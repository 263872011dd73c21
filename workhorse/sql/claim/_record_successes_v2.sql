-- _record_successes_v1 of 0.2.0, whose results NOTIFY goes only to registered waiters
-- (_ended_v2).
-- Record successes without waking anyone: the caller decides whether the capacity freed is
-- worth a wake-up (a claim reuses it). Accepted while the job is still active under this fence;
-- a job whose cancel was requested while it ran ends `canceled`, its result discarded; the expiry
-- is fixed now from the batch's retention documents (`p_retentions`, each job pointing at its
-- own through `p_retention_ix`, NULL when there is one). Result waiters are told. Returns the
-- (id, fence) pairs accepted, with their queue and the status each ended in. A success already
-- recorded under its fence (a resend: the connection broke after the commit, before the reply)
-- is accepted again with the status it ended in, and changes nothing: the fence changes at every
-- claim, so that row can only have been ended by this very outcome. Jobs are looked up by id
-- with `status IN ('active', '')`, however few active jobs the statistics show.
-- Feature level 1: a job of a higher level is left alone, as if its fence were stale.
CREATE FUNCTION workhorse._record_successes_v2(
    p_ids bigint[], p_fences bigint[], p_results text[], p_retention_ix integer[],
    p_retentions text[])
RETURNS TABLE (id bigint, fence bigint, queue text, status text)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_at timestamptz := clock_timestamp();  -- one clock reading: the expiry is exact
    v_succeeded timestamptz[];  -- each retention document's expiry for a success, and for a
    v_canceled timestamptz[];   -- cancel: worked out once a batch, not once a job
    v_done integer;
BEGIN
    SELECT array_agg(workhorse._expiry_v1('succeeded', r.doc::jsonb, v_at) ORDER BY r.n),
           array_agg(workhorse._expiry_v1('canceled', r.doc::jsonb, v_at) ORDER BY r.n)
    INTO v_succeeded, v_canceled
    FROM unnest(p_retentions) WITH ORDINALITY AS r(doc, n);

    RETURN QUERY
        WITH done AS (
            UPDATE workhorse.jobs j
            SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'succeeded'
                              ELSE 'canceled' END,
                result = CASE WHEN j.cancel_requested_at IS NULL THEN b.result::jsonb END,
                finished_at = v_at,
                expires_at = CASE WHEN j.cancel_requested_at IS NULL
                                  THEN v_succeeded[COALESCE(b.ix, 1)]
                                  ELSE v_canceled[COALESCE(b.ix, 1)] END,
                lease_until = NULL
            FROM unnest(p_ids, p_fences, p_results, p_retention_ix) AS b(id, fence, result, ix)
            -- `IN ('active', '')`, not `= 'active'` (no job's status is ''): a clause that implies
            -- jobs_active_idx's predicate lets the planner read that whole index (every active
            -- job of every queue) whenever its statistics say few jobs are active, as they do
            -- after an ANALYZE of a backlog; this way the batch's ids are looked up.
            WHERE j.id = b.id AND j.fence = b.fence AND j.status IN ('active', '')
              AND j.feature_level <= 1  -- this function's feature level
            RETURNING j.id, j.fence, j.queue, j.status
        ), ended AS (
            SELECT workhorse._ended_v2(array_agg(d.id)) AS n FROM done d
        )
        SELECT done.id, done.fence, done.queue, done.status FROM done, ended;
    GET DIAGNOSTICS v_done = ROW_COUNT;

    IF v_done < cardinality(p_ids) THEN
        -- Some were not active under their fence: stale, or resent. A resend ended earlier
        -- (another finished_at); those ended just now are not reported twice.
        RETURN QUERY
            SELECT j.id, j.fence, j.queue, j.status
            FROM unnest(p_ids, p_fences) AS b(id, fence)
            JOIN workhorse.jobs j ON j.id = b.id AND j.fence = b.fence
            WHERE j.status IN ('succeeded', 'canceled')
              AND j.finished_at IS DISTINCT FROM v_at;
    END IF;
END
$$;
