-- The dashboard's job search, first part: the newest matches among the jobs with ids in
-- [lo, hi), one bounded window of the primary key whatever the filters (as
-- browse_jobs_recent.sql). Queue and task match a case-insensitive substring (the caller trims
-- it); key and status match exactly; NULL means any.
SELECT id, task, queue, NULLIF(ckey, '') AS concurrency_key, priority, payload, status, attempts,
       max_attempts, result, error, run_at, enqueued_at, started_at, finished_at, on_failure, fence,
       lease_until, meta, cancel_requested_at IS NOT NULL AS cancel_requested, idempotency_key,
       expires_at
FROM workhorse.jobs
WHERE id >= %(lo)s AND id < %(hi)s
  AND (%(queue)s::text IS NULL OR strpos(lower(queue), lower(%(queue)s::text)) > 0)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
  AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
ORDER BY id DESC
LIMIT %(limit)s
