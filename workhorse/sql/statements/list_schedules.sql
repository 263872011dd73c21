-- Every schedule, with its cost, rate_cost and weight (docs/design.md "Fair share and job cost")
-- and its jobs' tags after its columns.
SELECT namespace, name, task, cron, every_interval, args, kwargs, queue, tz, catch_up, priority,
       max_attempts, ckey, on_failure, next_run_at, last_run_at, created_at, updated_at, cost,
       rate_cost, weight, tags
FROM workhorse.schedules
WHERE (%s::text IS NULL OR namespace = %s::text)
ORDER BY namespace, name
