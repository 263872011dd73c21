-- For a set of job ids: each of their queues, the namespace that owns it (NULL: ungoverned), and
-- how many of the jobs are in it.
SELECT j.queue, p.namespace, count(*)::bigint
FROM workhorse.all_jobs j
LEFT JOIN workhorse.policies p ON p.queue = j.queue
WHERE j.id = ANY(%s::bigint[])
GROUP BY j.queue, p.namespace
ORDER BY j.queue
