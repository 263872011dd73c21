-- A job's columns as get_job.sql reads them, with its key and costs (docs/design.md "Fair share
-- and job cost").
-- The dashboard's job list, second part: the newest matches older than the window (id < lo), in
-- every status but succeeded, one branch per status so that each reads its own partial index
-- (the index is named beside each branch). Succeeded history has no index but the primary key,
-- so it is searched only through the window (browse_jobs_recent.sql). A branch whose status the
-- filter excludes is constant-false once the parameters are bound and reads nothing.
--
-- Each branch orders by `id + 0`, which no index provides: sorting the rows of one status (the
-- live backlog, the failed, held and canceled jobs) is bounded by that status, whereas walking
-- the primary key backwards from lo looking for them (the plan a LIMIT tempts the planner into
-- when it overestimates the matches) can read the whole succeeded history and find nothing.
WITH found AS (
    (SELECT id FROM workhorse.jobs  -- jobs_scheduled_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'scheduled') AND status = 'scheduled'
       AND id < %(lo)s
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR task = %(task)s::text)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_ready_idx or jobs_ready_key_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'ready') AND status = 'ready'
       AND id < %(lo)s
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR task = %(task)s::text)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_active_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'active') AND status = 'active'
       AND id < %(lo)s
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR task = %(task)s::text)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'held') AND status = 'held'
       AND id < %(lo)s
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR task = %(task)s::text)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'failed') AND status = 'failed'
       AND id < %(lo)s
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR task = %(task)s::text)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'canceled') AND status = 'canceled'
       AND id < %(lo)s
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR task = %(task)s::text)
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
