-- The dead letters a redrive or a purge acts on (docs/design.md "Dead letters"): the jobs that
-- ended `failed` or `held`, filtered (NULL: any) by queue, task, tag, error type, finished at or
-- after `p_since`, and ids; in each queue's admission order (priority, then id), queues by name.
-- One function for both and their dry runs, so that a dry run reports exactly the jobs the real
-- run would touch at that moment. Custom plans: the filters a call leaves NULL fold away.
CREATE FUNCTION workhorse._dead_jobs_v1(
    p_queue text, p_task text, p_tag text, p_error_type text, p_since timestamptz,
    p_ids bigint[])
RETURNS TABLE (id bigint, queue text, ckey text, status text, workflow_id bigint, rank integer)
LANGUAGE sql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
    SELECT j.id, j.queue, j.ckey, j.status, j.workflow_id, j.rank
    FROM workhorse.jobs j
    WHERE j.status IN ('failed', 'held')
      AND (p_queue IS NULL OR j.queue = p_queue)
      AND (p_task IS NULL OR j.task = p_task)
      AND (p_error_type IS NULL OR j.error ->> 'type' = p_error_type)
      AND (p_since IS NULL OR j.finished_at >= p_since)
      AND (p_ids IS NULL OR j.id = ANY(p_ids))
      AND (p_tag IS NULL OR EXISTS (SELECT 1 FROM workhorse.job_tags t
                                    WHERE t.tag = p_tag AND t.job_id = j.id))
    ORDER BY j.queue, j.rank, j.id
$$;
