-- A running job's `step.child` / `step.children` (docs/design.md "Children"): the jobs
-- `p_children`, just enqueued in this transaction, become the children of step `p_name` (in
-- that order), with their parent's tags after their own, at feature level 2 in their queues (a 0.2.0 outcome would not wake their
-- parent). Under the parent's fence: false, and nothing changed, when it is stale (the caller
-- then rolls its enqueue back). The parent suspends afterwards (suspend_v1), which finds them.
CREATE FUNCTION workhorse.adopt_children_v1(
    p_id bigint, p_fence bigint, p_name text, p_children bigint[])
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
    v_tags text[];
BEGIN
    PERFORM 1 FROM workhorse.jobs j
    WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('active', '')
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Children inherit their parent's tags after their own (docs/design.md "Tags"), at most 16,
    -- each once, with their job_tags rows.
    SELECT j.tags INTO v_tags FROM workhorse.jobs j WHERE j.id = p_id;
    UPDATE workhorse.jobs c
    SET parent_id = p_id, parent_step = p_name, durable = true,
        tags = CASE WHEN v_tags IS NULL THEN c.tags ELSE ARRAY(
            SELECT u.tag FROM unnest(COALESCE(c.tags, '{}') || v_tags) WITH ORDINALITY AS u(tag, n)
            GROUP BY u.tag ORDER BY min(u.n) LIMIT 16) END
    WHERE c.id = ANY(p_children);
    IF v_tags IS NOT NULL THEN
        INSERT INTO workhorse.job_tags (tag, job_id)
        SELECT t.tag, c.id FROM workhorse.jobs c CROSS JOIN LATERAL unnest(c.tags) AS t(tag)
        WHERE c.id = ANY(p_children)
        ON CONFLICT DO NOTHING;
    END IF;
    FOR v_queue IN SELECT DISTINCT c.queue FROM workhorse.jobs c WHERE c.id = ANY(p_children)
    LOOP
        PERFORM workhorse._durable_level_v1(v_queue);
    END LOOP;
    RETURN true;
END
$$;
