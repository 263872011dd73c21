-- A parent's children (docs/design.md "Children"), by step, in the order they were enqueued.
SELECT parent_step, id, status, result, error
FROM workhorse.jobs
WHERE parent_id = %s
ORDER BY parent_step, id
