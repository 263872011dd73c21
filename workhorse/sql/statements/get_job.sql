SELECT id, task, queue, NULLIF(ckey, '') AS concurrency_key, priority, payload, status, attempts,
       max_attempts, result, error, run_at, enqueued_at, started_at, finished_at, on_failure, fence,
       lease_until, meta, cancel_requested_at IS NOT NULL AS cancel_requested, idempotency_key,
       expires_at, job_key, cost, rate_cost, weight,
       CASE WHEN (progress ->> 'fence')::bigint = fence THEN progress END AS progress, progress_at,
       workflow_id,
       CASE WHEN workflow_id IS NULL THEN '{}'::bigint[]
            ELSE ARRAY(SELECT d.parent_id FROM workhorse.job_deps d WHERE d.job_id = j.id
                       ORDER BY d.position, d.parent_id) END AS depends_on,
       budget, tags, redriven_at, redrive_count, deadline, start_by, suspended_on, wake_at, parent_id
FROM workhorse.jobs j
WHERE id = %s
