-- Whether a job may be pruned as far as its parent goes (docs/design.md "Children"): it has no
-- parent, or its parent has finished (or is gone). A parent suspended on its children, or about
-- to resume, reads their outcomes from their rows.
CREATE FUNCTION workhorse._prunable_child_v1(p_parent bigint) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_parent IS NULL OR NOT EXISTS (
        SELECT 1 FROM workhorse.jobs p
        WHERE p.id = p_parent
          AND p.status NOT IN ('succeeded', 'failed', 'held', 'canceled', 'expired'))
$$;
