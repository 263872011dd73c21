-- Purge dead letters (docs/design.md "Dead letters"): delete the jobs _dead_jobs_v1 selects,
-- with their tags' lookup rows, and write one audit_log row (who, the filters, the ids, why).
-- A workflow's members are left out (a workflow goes whole, when it has ended: `prune_jobs`),
-- in the dry run too. With `p_dry_run`, nothing is written: the ids are those the real run
-- would delete now. Returns (job id, audit id).
CREATE FUNCTION workhorse.purge_dead_v1(
    p_queue text, p_task text, p_tag text, p_error_type text, p_since timestamptz,
    p_ids bigint[], p_dry_run boolean, p_os_user text, p_reason text, p_filters jsonb)
RETURNS TABLE (job_id bigint, audit_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_audit bigint;
BEGIN
    IF p_dry_run THEN
        RETURN QUERY
        SELECT d.id, NULL::bigint
        FROM workhorse._dead_jobs_v1(p_queue, p_task, p_tag, p_error_type, p_since, p_ids) AS d
        WHERE d.workflow_id IS NULL
        ORDER BY d.id;
        RETURN;
    END IF;
    -- Locked in (queue, id) order; a job that stopped being dead meanwhile is left alone.
    v_ids := ARRAY(
        SELECT j.id FROM workhorse.jobs j
        WHERE j.id IN (SELECT d.id FROM workhorse._dead_jobs_v1(
                           p_queue, p_task, p_tag, p_error_type, p_since, p_ids) AS d
                       WHERE d.workflow_id IS NULL)
        ORDER BY j.queue, j.id
        FOR UPDATE);
    v_ids := ARRAY(SELECT j.id FROM workhorse.jobs j
                   WHERE j.id = ANY(v_ids) AND j.status IN ('failed', 'held')
                   ORDER BY j.id);
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO workhorse.audit_log (action, os_user, application_name, filters, job_count,
                                     job_ids, reason)
    VALUES ('purge', p_os_user, current_setting('application_name'), p_filters,
            cardinality(v_ids), v_ids, p_reason)
    RETURNING id INTO v_audit;
    WITH gone AS (
        DELETE FROM workhorse.jobs j WHERE j.id = ANY(v_ids) RETURNING j.id, j.tags
    )
    DELETE FROM workhorse.job_tags t
    USING (SELECT g.id, x.tag FROM gone g CROSS JOIN LATERAL unnest(g.tags) AS x(tag)) AS d
    WHERE t.tag = d.tag AND t.job_id = d.id;
    RETURN QUERY SELECT u.id, v_audit FROM unnest(v_ids) AS u(id);
END
$$;
