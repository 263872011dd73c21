-- Tell result waiters that these jobs reached a resting status: one NOTIFY per 1,000 ids (a
-- payload stays far below PostgreSQL's 8,000-byte limit), delivered at commit; none while no
-- waiter has registered (result_listeners, written by listen_results_v2). A NOTIFY is not free
-- to the transaction that sends it: its commit takes PostgreSQL's one notification lock, and
-- every listening session of the database (each supervisor's wake-up listener) is signalled to
-- read it, whatever its channel. With 8 supervisors on one budget, the claims' results NOTIFY
-- was a quarter of the server's CPU for a job nobody awaited (issue #40). And wake the parents
-- whose last child this was (_wake_parents_v1).
CREATE FUNCTION workhorse._ended_v2(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_listened boolean;
    v_parents boolean;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN;
    END IF;
    -- Both probes in one statement (each statement's start-up costs more than its probe):
    -- whether any of these jobs is a child (docs/design.md "Children"), through
    -- jobs_child_idx, which holds children only (empty unless jobs use step.child). Asked of
    -- these jobs, not "is any parent waiting": a parent whose suspension has not committed yet
    -- must still be locked and looked at (_wake_parents_v1), or its wake-up would be lost.
    SELECT EXISTS (SELECT 1 FROM workhorse.result_listeners),
           EXISTS (SELECT 1 FROM workhorse.jobs c
                   WHERE c.id = ANY(p_ids) AND c.parent_id IS NOT NULL)
    INTO v_listened, v_parents;
    IF v_parents THEN
        PERFORM workhorse._wake_parents_v1(p_ids);
    END IF;
    IF NOT v_listened THEN
        RETURN;
    END IF;
    -- A waiter acts on what it is told, so a commit that a claim made asynchronous (claim_v2's
    -- "The commit after the lock") waits for its flush again: no waiter reads a result that a
    -- server crash could take back.
    IF current_setting('synchronous_commit') = 'off' THEN
        SET LOCAL synchronous_commit TO DEFAULT;
    END IF;
    PERFORM pg_notify(workhorse.results_channel_v1(), c.ids)
    FROM (SELECT string_agg(t.id::text, ',') AS ids
          FROM unnest(p_ids) WITH ORDINALITY AS t(id, n)
          GROUP BY (t.n - 1) / 1000) AS c;
END
$$;
