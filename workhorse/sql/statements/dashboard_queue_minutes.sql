-- One queue's starts, completions and failures per minute over the last %(minutes)s minutes,
-- read from the newest %(window)s jobs only (one bounded walk down the primary key, whatever the
-- history; the fleet-wide history, throughput.sql, has no queue). A start is a job's latest
-- claim; a failure is a job that ended failed or held. With the database clock.
WITH since AS (
    SELECT date_trunc('minute', now()) - make_interval(mins => %(minutes)s - 1) AS minute
), recent AS (
    SELECT n.status, n.started_at, n.finished_at
    FROM (SELECT m.queue, m.status, m.started_at, m.finished_at
          FROM workhorse.jobs m
          ORDER BY m.id DESC
          LIMIT %(window)s) AS n, since
    WHERE n.queue = %(queue)s
      AND (n.started_at >= since.minute OR n.finished_at >= since.minute)
)
SELECT v.minute, sum(v.started)::bigint, sum(v.succeeded)::bigint, sum(v.failed)::bigint, now()
FROM recent r
CROSS JOIN LATERAL (VALUES
    (date_trunc('minute', r.started_at), 1, 0, 0),
    (date_trunc('minute', r.finished_at), 0, (r.status = 'succeeded')::int,
     (r.status IN ('failed', 'held'))::int)
) AS v(minute, started, succeeded, failed)
CROSS JOIN since
WHERE v.minute >= since.minute
GROUP BY v.minute
ORDER BY v.minute
