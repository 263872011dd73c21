-- A job's columns as get_job.sql reads them, with its key and costs (docs/design.md "Fair share
-- and job cost").
-- Newest first, bounded by the caller's limit. Filters are optional (NULL means any).
SELECT id, task, queue, NULLIF(ckey, '') AS concurrency_key, priority, payload, status, attempts,
       max_attempts, result, error, run_at, enqueued_at, started_at, finished_at, on_failure, fence,
       lease_until, meta, cancel_requested_at IS NOT NULL AS cancel_requested, idempotency_key,
       expires_at, job_key, cost, rate_cost, weight
FROM workhorse.all_jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY id DESC
LIMIT %(limit)s
