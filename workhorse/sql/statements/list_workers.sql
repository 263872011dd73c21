SELECT id, app, host, pid, slots, queues, started_at, last_seen, stats,
       last_seen > now() - interval '30 seconds' AS alive
FROM workhorse.workers
ORDER BY started_at
