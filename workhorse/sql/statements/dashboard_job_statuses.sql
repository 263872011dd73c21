-- The status of each of these jobs (and whether a cancel was requested): what an action that
-- changed fewer jobs than it was given tells the operator about the others.
SELECT id, status, cancel_requested_at IS NOT NULL AS cancel_requested
FROM workhorse.jobs
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id
