SELECT namespace, queue, max_active, max_active_per_key, created_at, updated_at
FROM workhorse.policies
WHERE (%s::text IS NULL OR namespace = %s::text)
ORDER BY namespace, queue
