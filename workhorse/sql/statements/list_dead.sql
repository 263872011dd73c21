-- The dead letters (failed or held jobs), newest first, filtered as _dead_jobs_v1 filters a
-- redrive's or a purge's (NULL: any): through jobs_held_failed_idx, at most the caller's limit.
SELECT j.id, j.task, j.queue, NULLIF(j.ckey, '') AS concurrency_key, j.priority, j.payload,
       j.status, j.attempts, j.max_attempts, j.result, j.error, j.run_at, j.enqueued_at,
       j.started_at, j.finished_at, j.on_failure, j.fence, j.lease_until, j.meta,
       j.cancel_requested_at IS NOT NULL AS cancel_requested, j.idempotency_key, j.expires_at,
       j.job_key, j.cost, j.rate_cost, j.weight
FROM workhorse.jobs j
WHERE j.status IN ('failed', 'held')
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
  AND (%(error_type)s::text IS NULL OR j.error ->> 'type' = %(error_type)s::text)
  AND (%(since)s::timestamptz IS NULL OR j.finished_at >= %(since)s::timestamptz)
  AND (%(tag)s::text IS NULL OR EXISTS (SELECT 1 FROM workhorse.job_tags t
                                        WHERE t.tag = %(tag)s::text AND t.job_id = j.id))
ORDER BY j.id DESC
LIMIT %(limit)s
