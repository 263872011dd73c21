-- The dashboard's job search, second part: the newest matches older than the window (id < lo),
-- in every status but succeeded, one branch per status so that each reads its own partial index
-- (named beside each branch), as browse_jobs_older.sql does. The queue filter is here the list
-- of the known queue names that contain the operator's substring (each status's queues are known
-- exactly: dashboard_known_queues.sql), so that the indexes that lead with the queue serve it;
-- the task matches a case-insensitive substring (no index has it); NULL means any.
WITH found AS (
    (SELECT id FROM workhorse.jobs  -- jobs_scheduled_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'scheduled') AND status = 'scheduled'
       AND id < %(lo)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_ready_idx or jobs_ready_key_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'ready') AND status = 'ready'
       AND id < %(lo)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_active_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'active') AND status = 'active'
       AND id < %(lo)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'held') AND status = 'held'
       AND id < %(lo)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'failed') AND status = 'failed'
       AND id < %(lo)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'canceled') AND status = 'canceled'
       AND id < %(lo)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
)
SELECT id, task, queue, NULLIF(ckey, '') AS concurrency_key, priority, payload, status, attempts,
       max_attempts, result, error, run_at, enqueued_at, started_at, finished_at, on_failure, fence,
       lease_until, meta, cancel_requested_at IS NOT NULL AS cancel_requested, idempotency_key,
       expires_at, job_key, cost, rate_cost, weight
FROM workhorse.jobs
WHERE id IN (SELECT id FROM found ORDER BY id DESC LIMIT %(limit)s)
ORDER BY id DESC
