-- prune_jobs_v1, with workflows pruned whole (docs/design.md "Workflows", "Bounds"): a workflow's
-- members go together, in one transaction, once every member has finished and
--
-- * (retention, `p_older_than` NULL) the last one's expiry has passed: the workflow's latest
--   expires_at, NULLs first, is one probe of jobs_workflow_expires_idx; a NULL there (a member
--   waiting, scheduled, ready, active or held, or one its retention keeps for ever) keeps the
--   whole workflow;
-- * (`workhorse jobs prune --older-than`) every member is of `p_statuses` and finished more
--   than `p_older_than` seconds ago: a member of an unfinished workflow (or of one with a member
--   that does not qualify) is skipped, with all of its workflow.
--
-- History (job_history, docs/design.md "History") is pruned first, by whole days
-- (_prune_history_v1); its count adds to the batch's.
--
-- A child whose parent has not finished stays (docs/design.md "Children"): its parent reads its
-- outcome when it resumes, and would enqueue it again if it were gone.
--
-- Jobs outside workflows go as in prune_jobs_v1, up to `p_limit`; the rest of the batch is
-- filled with whole workflows (their release state, dependencies and workflow row go with
-- them), so a batch may exceed `p_limit` by one workflow's members, and returns fewer than
-- `p_limit` only when nothing is left to prune. Returns how many jobs went, or -1 (another
-- pruner holds the try-lock).
CREATE FUNCTION workhorse.prune_jobs_v2(
    p_limit integer, p_older_than double precision, p_statuses text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_workflows bigint[];
    v_left integer;
    v_members integer := 0;
    v_cutoff timestamptz;
    v_history integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(2003, 7048) THEN
        RETURN -1;
    END IF;
    IF p_older_than IS NOT NULL THEN
        v_cutoff := now() - make_interval(secs => p_older_than);
    END IF;
    v_history := workhorse._prune_history_v1(p_limit, v_cutoff, p_statuses);
    IF p_older_than IS NULL THEN
        v_ids := ARRAY(
            SELECT e.id FROM workhorse.jobs e
            WHERE e.expires_at IS NOT NULL AND e.expires_at <= now() AND e.workflow_id IS NULL
              AND workhorse._prunable_child_v1(e.parent_id)
            ORDER BY e.expires_at
            LIMIT p_limit);
        v_left := p_limit - cardinality(v_ids);
        IF v_left > 0 THEN
            -- Expired members whose workflow's latest expiry (NULL first) has passed too; at
            -- most v_left of them, so that a full batch deletes at least v_left members.
            v_workflows := ARRAY(
                SELECT DISTINCT c.workflow_id FROM (
                    SELECT e.workflow_id FROM workhorse.jobs e
                    WHERE e.expires_at IS NOT NULL AND e.expires_at <= now()
                      AND e.workflow_id IS NOT NULL
                      AND (SELECT x.expires_at FROM workhorse.jobs x
                           WHERE x.workflow_id = e.workflow_id
                           ORDER BY x.expires_at DESC NULLS FIRST
                           LIMIT 1) <= now()
                    ORDER BY e.expires_at
                    LIMIT v_left) AS c);
        END IF;
    ELSE
        v_ids := ARRAY(
            SELECT e.id FROM workhorse.jobs e
            WHERE e.status = ANY(p_statuses)
              AND e.status IN ('succeeded', 'failed', 'held', 'canceled', 'expired')
              AND e.finished_at <= v_cutoff
              AND e.workflow_id IS NULL
              AND workhorse._prunable_child_v1(e.parent_id)
            LIMIT p_limit);
        v_left := p_limit - cardinality(v_ids);
        IF v_left > 0 THEN
            v_workflows := ARRAY(
                SELECT w.id FROM workhorse.workflows w
                WHERE EXISTS (SELECT 1 FROM workhorse.jobs e WHERE e.workflow_id = w.id)
                  AND NOT EXISTS (
                      SELECT 1 FROM workhorse.jobs x
                      WHERE x.workflow_id = w.id
                        AND NOT (x.status = ANY(p_statuses)
                                 AND x.status IN ('succeeded', 'failed', 'held', 'canceled', 'expired')
                                 AND x.finished_at <= v_cutoff))
                ORDER BY w.id
                LIMIT v_left);
        END IF;
    END IF;
    -- A job's tag rows go with it (migrations/0002_0.3.0.sql, "tags"), found by its own tags.
    PERFORM workhorse._prune_durable_v1(v_ids);
    WITH gone AS (
        DELETE FROM workhorse.jobs j WHERE j.id = ANY(v_ids) RETURNING j.id, j.tags
    )
    DELETE FROM workhorse.job_tags t
    USING (SELECT g.id, x.tag FROM gone g CROSS JOIN LATERAL unnest(g.tags) AS x(tag)) AS d
    WHERE t.tag = d.tag AND t.job_id = d.id;
    IF v_workflows IS NOT NULL AND cardinality(v_workflows) > 0 THEN
        PERFORM workhorse._prune_durable_v1(ARRAY(
            SELECT j.id FROM workhorse.jobs j
            WHERE j.workflow_id = ANY(v_workflows) AND j.durable));
        WITH gone AS (
            DELETE FROM workhorse.jobs j WHERE j.workflow_id = ANY(v_workflows)
            RETURNING j.id, j.tags
        ), tags AS (
            DELETE FROM workhorse.job_tags t
            USING (SELECT g.id, x.tag FROM gone g CROSS JOIN LATERAL unnest(g.tags) AS x(tag)) AS d
            WHERE t.tag = d.tag AND t.job_id = d.id
        ), members AS (
            DELETE FROM workhorse.workflow_members m WHERE m.workflow_id = ANY(v_workflows)
        ), deps AS (
            DELETE FROM workhorse.job_deps d WHERE d.job_id IN (SELECT g.id FROM gone g)
        ), rows AS (
            DELETE FROM workhorse.workflows w WHERE w.id = ANY(v_workflows)
        )
        SELECT count(*) INTO v_members FROM gone;
    END IF;
    RETURN v_history + cardinality(v_ids) + v_members;
END
$$;
