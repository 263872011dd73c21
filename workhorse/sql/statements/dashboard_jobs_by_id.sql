-- The jobs with these ids, newest first (a page of the dashboard's job search).
SELECT id, task, queue, NULLIF(ckey, '') AS concurrency_key, priority, payload, status, attempts,
       max_attempts, result, error, run_at, enqueued_at, started_at, finished_at, on_failure, fence,
       lease_until, meta, cancel_requested_at IS NOT NULL AS cancel_requested, idempotency_key,
       expires_at, job_key, cost, rate_cost, weight
FROM workhorse.jobs
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id DESC
