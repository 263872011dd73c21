-- A running job's `step.child` / `step.children` (docs/design.md "Children"): the jobs
-- `p_children`, just enqueued in this transaction, become the children of step `p_name` (in
-- that order), at feature level 2 in their queues (a 0.2.0 outcome would not wake their
-- parent). Under the parent's fence: false, and nothing changed, when it is stale (the caller
-- then rolls its enqueue back). The parent suspends afterwards (suspend_v1), which finds them.
CREATE FUNCTION workhorse.adopt_children_v1(
    p_id bigint, p_fence bigint, p_name text, p_children bigint[])
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
BEGIN
    PERFORM 1 FROM workhorse.jobs j
    WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('active', '')
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE workhorse.jobs c SET parent_id = p_id, parent_step = p_name, durable = true
    WHERE c.id = ANY(p_children);
    FOR v_queue IN SELECT DISTINCT c.queue FROM workhorse.jobs c WHERE c.id = ANY(p_children)
    LOOP
        PERFORM workhorse._durable_level_v1(v_queue);
    END LOOP;
    RETURN true;
END
$$;
