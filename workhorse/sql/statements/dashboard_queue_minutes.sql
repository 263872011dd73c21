-- One queue's starts, completions and failures per minute over the last %(minutes)s minutes,
-- read from the newest %(window)s jobs only (one bounded walk down the primary key, whatever the
-- history; the fleet-wide history, throughput.sql, has no queue). A start is a job's latest
-- claim; a failure is a job that ended failed or held. With the database clock.
SELECT v.minute, sum(v.started)::bigint, sum(v.succeeded)::bigint, sum(v.failed)::bigint,
       clock_timestamp()
FROM (SELECT n.queue, n.status, n.started_at, n.finished_at
      FROM workhorse.jobs n
      ORDER BY n.id DESC
      LIMIT %(window)s) AS j
CROSS JOIN LATERAL (VALUES
    (date_trunc('minute', j.started_at), 1, 0, 0),
    (date_trunc('minute', j.finished_at), 0, (j.status = 'succeeded')::int,
     (j.status IN ('failed', 'held'))::int)
) AS v(minute, started, succeeded, failed)
WHERE j.queue = %(queue)s
  AND v.minute > date_trunc('minute', clock_timestamp()) - make_interval(mins => %(minutes)s)
GROUP BY v.minute
ORDER BY v.minute
