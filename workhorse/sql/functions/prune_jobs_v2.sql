-- prune_jobs_v1, but a member of a workflow that has an unfinished member (waiting, scheduled,
-- ready, active or held) is skipped, so a workflow is pruned only once all of its members have
-- finished; the pruned members' workflow rows (release state, dependencies, and the workflow
-- once it has no member left) go with them. Returns how many jobs went, or -1 (another pruner).
CREATE FUNCTION workhorse.prune_jobs_v2(
    p_limit integer, p_older_than double precision, p_statuses text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_workflows bigint[];
BEGIN
    IF NOT pg_try_advisory_xact_lock(2003, 7048) THEN
        RETURN -1;
    END IF;
    IF p_older_than IS NULL THEN
        v_ids := ARRAY(
            SELECT e.id FROM workhorse.jobs e
            WHERE e.expires_at IS NOT NULL AND e.expires_at <= now()
              AND (e.workflow_id IS NULL OR NOT EXISTS (
                    SELECT 1 FROM workhorse.jobs x
                    WHERE x.workflow_id = e.workflow_id
                      AND x.status IN ('waiting', 'scheduled', 'ready', 'active', 'held')))
            ORDER BY e.expires_at
            LIMIT p_limit);
    ELSE
        v_ids := ARRAY(
            SELECT e.id FROM workhorse.jobs e
            WHERE e.status = ANY(p_statuses)
              AND e.status IN ('succeeded', 'failed', 'held', 'canceled')
              AND e.finished_at <= now() - make_interval(secs => p_older_than)
              AND (e.workflow_id IS NULL OR NOT EXISTS (
                    SELECT 1 FROM workhorse.jobs x
                    WHERE x.workflow_id = e.workflow_id
                      AND x.status IN ('waiting', 'scheduled', 'ready', 'active', 'held')))
            LIMIT p_limit);
    END IF;
    WITH gone AS (
        DELETE FROM workhorse.jobs j WHERE j.id = ANY(v_ids)
        RETURNING j.id, j.workflow_id
    )
    SELECT array_agg(DISTINCT g.workflow_id) FILTER (WHERE g.workflow_id IS NOT NULL)
    INTO v_workflows FROM gone g;
    IF v_workflows IS NOT NULL THEN
        DELETE FROM workhorse.workflow_members m WHERE m.job_id = ANY(v_ids);
        DELETE FROM workhorse.job_deps d WHERE d.job_id = ANY(v_ids);
        DELETE FROM workhorse.workflows w
        WHERE w.id = ANY(v_workflows)
          AND NOT EXISTS (SELECT 1 FROM workhorse.workflow_members m WHERE m.workflow_id = w.id);
    END IF;
    RETURN cardinality(v_ids);
END
$$;
