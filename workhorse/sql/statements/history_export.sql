-- One page of `workhorse history export` (docs/design.md "History"): the jobs that finished in
-- [since, until), live or moved to history, in finish order, after the page before's last
-- (finished_at, id). A job moves with its key unchanged, so paging by that key neither repeats
-- nor misses one that moves between two pages. History's side is a walk of each day's
-- (finished_at, id) index, only of the days in range; the live table's side is its last hour
-- and the jobs an operator may still act on.
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
FROM workhorse.all_jobs j
WHERE j.finished_at >= %(since)s AND j.finished_at < %(until)s
  AND (j.finished_at, j.id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
  AND j.status IN ('succeeded', 'failed', 'held', 'canceled', 'expired')
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
ORDER BY j.finished_at, j.id
LIMIT %(limit)s
