-- A job's columns as get_job.sql reads them, with its key and costs (docs/design.md "Fair share
-- and job cost").
-- The dashboard's job list, first part: the newest matches among the jobs with ids in [lo, hi),
-- one bounded window of the primary key whatever the filters (see _ops.browse_jobs). Filters
-- are optional (NULL means any).
SELECT id, task, queue, NULLIF(ckey, '') AS concurrency_key, priority, payload, status, attempts,
       max_attempts, result, error, run_at, enqueued_at, started_at, finished_at, on_failure, fence,
       lease_until, meta, cancel_requested_at IS NOT NULL AS cancel_requested, idempotency_key,
       expires_at, job_key, cost, rate_cost, weight
FROM workhorse.jobs
WHERE id >= %(lo)s AND id < %(hi)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY id DESC
LIMIT %(limit)s
