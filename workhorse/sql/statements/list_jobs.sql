-- A job's columns as get_job.sql reads them, with its key and costs (docs/design.md "Fair share
-- and job cost").
-- Newest first, bounded by the caller's limit. Filters are optional (NULL means any). Live and
-- history alike (docs/design.md "History"): each side's newest, merged by id. History holds
-- only succeeded and expired jobs, so a filter on another status never reads it.
SELECT * FROM (
    (SELECT id, task, queue, NULLIF(ckey, '') AS concurrency_key, priority, payload, status,
            attempts, max_attempts, result, error, run_at, enqueued_at, started_at, finished_at,
            on_failure, fence, lease_until, meta,
            cancel_requested_at IS NOT NULL AS cancel_requested, idempotency_key, expires_at,
            job_key, cost, rate_cost, weight,
            CASE WHEN (progress ->> 'fence')::bigint = fence THEN progress END AS progress,
            progress_at, workflow_id,
            CASE WHEN workflow_id IS NULL THEN '{}'::bigint[]
                 ELSE ARRAY(SELECT d.parent_id FROM workhorse.job_deps d WHERE d.job_id = j.id
                            ORDER BY d.position, d.parent_id) END AS depends_on,
            budget, tags, redriven_at, redrive_count, deadline, start_by, suspended_on, wake_at, parent_id
     FROM workhorse.jobs j
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(status)s::text IS NULL OR status = %(status)s::text)
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR task = %(task)s::text)
     ORDER BY id DESC
     LIMIT %(limit)s)
    UNION ALL
    -- Moved jobs are never workflow members: no dependencies to read.
    (SELECT id, task, queue, NULLIF(ckey, ''), priority, payload, status, attempts,
            max_attempts, result, error, run_at, enqueued_at, started_at, finished_at,
            on_failure, fence, lease_until, meta, cancel_requested_at IS NOT NULL,
            idempotency_key, expires_at, job_key, cost, rate_cost, weight,
            CASE WHEN (progress ->> 'fence')::bigint = fence THEN progress END, progress_at,
            workflow_id, '{}'::bigint[], budget, tags, redriven_at, redrive_count, deadline,
            start_by, suspended_on, wake_at, parent_id
     FROM workhorse.job_history h
     WHERE (%(status)s::text IS NULL OR %(status)s::text IN ('succeeded', 'expired'))
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(status)s::text IS NULL OR status = %(status)s::text)
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR task = %(task)s::text)
     ORDER BY id DESC
     LIMIT %(limit)s)
) AS listed
ORDER BY id DESC
LIMIT %(limit)s
