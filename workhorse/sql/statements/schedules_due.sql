SELECT s.id, s.name, s.cron, s.every_interval, s.tz, s.catch_up, s.next_run_at, now()
FROM workhorse.schedules s
WHERE s.namespace = %(namespace)s AND s.next_run_at <= now()
ORDER BY s.next_run_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
