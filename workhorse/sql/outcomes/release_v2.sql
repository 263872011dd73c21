-- Give back jobs a slot claimed ahead and never started (a drain, a pause, a policy installed):
-- each goes back to `ready` with its attempt not used, as if it had never been claimed, and
-- claimers are told. A job whose cancel was requested meanwhile ends `canceled` instead (it never
-- ran; `p_retention` as for fail_v2). Stale (id, fence) pairs change nothing. Returns the
-- (id, status) of every job released. Jobs are looked up by id (see fail_v2.sql).
-- Feature level 1: a job of a higher level is left alone, as if its fence were stale.
CREATE FUNCTION workhorse.release_v2(p_ids bigint[], p_fences bigint[], p_retention text)
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_at timestamptz := clock_timestamp();
    v_released bigint[];
    v_statuses text[];
BEGIN
    WITH released AS (
        UPDATE workhorse.jobs j
        SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'ready' ELSE 'canceled' END,
            attempts = CASE WHEN j.cancel_requested_at IS NULL THEN j.attempts - 1
                            ELSE j.attempts END,
            finished_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE v_at END,
            expires_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL
                              ELSE workhorse._expiry_v1('canceled', p_retention::jsonb, v_at) END,
            lease_until = NULL
        FROM unnest(p_ids, p_fences) AS b(id, fence)
        WHERE j.id = b.id AND j.fence = b.fence AND j.status IN ('active', '')
          AND j.feature_level <= 1  -- this function's feature level
        RETURNING j.id, j.queue, j.ckey, j.status
    ), hinted AS (
        -- A queue that keeps heads (a per-key limit, or fair share): these keys may have a new one.
        SELECT count(workhorse._hint_keys_v2(k.queue, k.keys)) AS n
        FROM (SELECT r.queue, array_agg(DISTINCT r.ckey) AS keys
              FROM released r WHERE r.status = 'ready' GROUP BY r.queue) AS k
    ), woken AS (
        SELECT count(workhorse._wake_v1(q.queue)) AS n
        FROM (SELECT DISTINCT r.queue FROM released r WHERE r.status = 'ready') AS q
    )
    SELECT array_agg(r.id), array_agg(r.status) INTO v_released, v_statuses
    FROM released r, hinted, woken;
    PERFORM workhorse._ended_v2(ARRAY(
        SELECT u.id FROM unnest(v_released, v_statuses) AS u(id, status)
        WHERE u.status = 'canceled'));
    RETURN QUERY SELECT u.id, u.status FROM unnest(v_released, v_statuses) AS u(id, status);
END
$$;
