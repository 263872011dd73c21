SELECT id FROM workhorse.jobs
WHERE status = 'held' AND (%s::text IS NULL OR queue = %s::text)
ORDER BY status, queue, id
LIMIT %s
