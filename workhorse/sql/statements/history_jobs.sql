-- Jobs moved to history (docs/design.md "History"), by id, as get_job.sql reads a live job, with
-- their attempt history last. Read only for an id the live table lacks: every day of history is
-- planned and probed here, which get_job.sql, on `jobs` alone, does not pay for a live job.
SELECT id, task, queue, NULLIF(ckey, '') AS concurrency_key, priority, payload, status, attempts,
       max_attempts, result, error, run_at, enqueued_at, started_at, finished_at, on_failure, fence,
       lease_until, meta, cancel_requested_at IS NOT NULL AS cancel_requested, idempotency_key,
       expires_at, job_key, cost, rate_cost, weight,
       CASE WHEN (progress ->> 'fence')::bigint = fence THEN progress END AS progress, progress_at,
       workflow_id, '{}'::bigint[] AS depends_on,
       budget, tags, redriven_at, redrive_count, deadline, start_by, suspended_on, wake_at, parent_id, attempt_history
FROM workhorse.job_history
WHERE id = ANY(%s::bigint[])
