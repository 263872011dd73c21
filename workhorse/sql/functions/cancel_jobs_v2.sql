-- cancel_jobs_v1, and a waiting workflow member becomes `canceled` at once too (its dependents
-- with it, through the workflow trigger), its expiry fixed from `p_retention` as cancel_jobs_v1
-- fixes the others' (its dependents' from their own tasks' retention, in the trigger). Returns
-- the ids canceled or asked to cancel.
--
-- Locks (docs/design.md "Locks"): the targets a worker may be completing (scheduled, ready, active,
-- held) first, in (queue, id) order, then the waiting ones, in (queue, id) order. A completion
-- holds its own jobs' rows and locks their waiting dependents at commit (_workflow_release_v1),
-- so a cancel that took a waiting dependent first and then waited for its parent's row would
-- deadlock with it (canceling a workflow while its members complete); this way the cancel waits
-- for the completion to commit before it touches any waiting member.
CREATE FUNCTION workhorse.cancel_jobs_v2(p_ids bigint[], p_retention text)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_at timestamptz := clock_timestamp();
BEGIN
    PERFORM 1 FROM workhorse.jobs j
    WHERE j.id = ANY(p_ids) AND j.status IN ('scheduled', 'ready', 'active', 'held')
    ORDER BY j.queue, j.id
    FOR UPDATE;
    WITH locked AS (
        SELECT j.id FROM workhorse.jobs j
        WHERE j.id = ANY(p_ids) AND j.status = 'waiting'
        ORDER BY j.queue, j.id
        FOR UPDATE
    ), canceled AS (
        UPDATE workhorse.jobs j
        SET status = 'canceled', finished_at = v_at,
            expires_at = workhorse._expiry_v1('canceled', p_retention::jsonb, v_at)
        WHERE j.id IN (SELECT id FROM locked) AND j.status = 'waiting'
        RETURNING j.id
    )
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM canceled;
    PERFORM workhorse._ended_v1(v_ids);
    RETURN QUERY SELECT u.id FROM (
        SELECT unnest(COALESCE(v_ids, '{}')) AS id
        UNION
        SELECT c FROM workhorse.cancel_jobs_v1(p_ids, p_retention) AS c) AS u
    ORDER BY u.id;
END
$$;
