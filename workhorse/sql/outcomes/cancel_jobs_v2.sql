-- Cancel jobs that have not finished, and the children of these that have not (docs/design.md
-- "Children"). A scheduled, ready, held, suspended or waiting job becomes `canceled`
-- at once (a waiting workflow member's dependents with it, through the workflow trigger, their
-- expiry from their own tasks' retention). An active one gets a cancel request and stays active,
-- its capacity held, until its handler has really stopped: the worker learns of the request with
-- its next heartbeat (an async handler is cancelled; a sync one sees `cancel_requested`), and the
-- job ends `canceled` when its outcome is recorded. `p_retention` (JSON: status -> seconds kept)
-- fixes the expiry of the jobs canceled here. The keys that may have a new head are hinted and
-- their queues woken (_after_operator_change_v2). Returns the ids canceled or asked to cancel.
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
    v_kids bigint[];
    v_waiting bigint[];
    v_ids bigint[];
    v_requested bigint[];
    v_queues text[];
    v_keys text[];
    v_at timestamptz := clock_timestamp();
BEGIN
    -- A parent's children that have not finished go with it (docs/design.md "Children"), and
    -- theirs: one probe of jobs_parent_idx per id, none found for jobs without children. They
    -- are locked first, the deepest first: a child's completion holds its own row and then
    -- locks its parent's (_wake_parents_v1), so a cancel that took the parent first and then
    -- waited for the child would deadlock with it.
    WITH RECURSIVE kids(id, depth) AS (
        SELECT c.id, 1 FROM workhorse.jobs c WHERE c.parent_id = ANY(p_ids)
        UNION
        SELECT c.id, k.depth + 1 FROM workhorse.jobs c JOIN kids k ON c.parent_id = k.id
    )
    SELECT array_agg(k.id ORDER BY k.depth DESC, k.id) INTO v_kids FROM kids k;
    IF v_kids IS NOT NULL THEN
        PERFORM 1 FROM workhorse.jobs j
        JOIN unnest(v_kids) WITH ORDINALITY AS k(id, n) ON j.id = k.id
        WHERE j.status IN ('scheduled', 'ready', 'active', 'held', 'suspended')
        ORDER BY k.n
        FOR UPDATE OF j;
        p_ids := p_ids || v_kids;
    END IF;
    PERFORM 1 FROM workhorse.jobs j
    WHERE j.id = ANY(p_ids) AND j.status IN ('scheduled', 'ready', 'active', 'held', 'suspended')
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
    SELECT array_agg(id ORDER BY id) INTO v_waiting FROM canceled;
    PERFORM workhorse._ended_v2(v_waiting);

    WITH canceled AS (
        UPDATE workhorse.jobs j
        SET status = 'canceled', finished_at = v_at, lease_until = NULL,
            expires_at = workhorse._expiry_v1('canceled', p_retention::jsonb, v_at)
        WHERE j.id = ANY(p_ids) AND j.status IN ('scheduled', 'ready', 'held', 'suspended')
        RETURNING j.id, j.queue, j.ckey
    )
    SELECT array_agg(id ORDER BY id), array_agg(queue), array_agg(ckey)
    INTO v_ids, v_queues, v_keys
    FROM canceled;
    WITH requested AS (
        UPDATE workhorse.jobs j
        SET cancel_requested_at = COALESCE(j.cancel_requested_at, clock_timestamp())
        WHERE j.id = ANY(p_ids) AND j.status = 'active'
        RETURNING j.id
    )
    SELECT array_agg(id ORDER BY id) INTO v_requested FROM requested;
    PERFORM workhorse._after_operator_change_v2(v_queues, v_keys);
    PERFORM workhorse._ended_v2(v_ids);
    RETURN QUERY SELECT DISTINCT u.id
                 FROM unnest(COALESCE(v_waiting, '{}') || COALESCE(v_ids, '{}')
                             || COALESCE(v_requested, '{}')) AS u(id)
                 ORDER BY u.id;
END
$$;
