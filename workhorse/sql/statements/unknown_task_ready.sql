-- Per queue with ready jobs that some live supervisor serves (its --queues include it; alive:
-- seen in the last 30 seconds, as list_workers.sql says): how many of its first %(sample)s ready
-- jobs in admission order have a task that no live supervisor serving the queue declares, and
-- which tasks those are. A supervisor that registered no task list (an older release) is taken
-- to declare every task. Queue names come from the ready partial index by a skip scan, as in
-- stalled_queues.sql; each queue's sample is bounded, so the cost follows the number of queues.
WITH RECURSIVE ready(queue) AS (
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'ready' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'ready' AND j.queue > r.queue ORDER BY j.queue LIMIT 1)
    FROM ready r WHERE r.queue IS NOT NULL
), live AS (
    SELECT w.queues, w.tasks FROM workhorse.workers w
    WHERE w.last_seen > now() - interval '30 seconds'
), served AS (
    SELECT r.queue,
           bool_or(w.tasks IS NULL) AS declares_all,
           COALESCE(array_agg(DISTINCT t.task) FILTER (WHERE t.task IS NOT NULL), '{}')
               AS tasks
    FROM ready r
    JOIN live w ON r.queue = ANY(w.queues)
    LEFT JOIN LATERAL unnest(w.tasks) AS t(task) ON true
    WHERE r.queue IS NOT NULL
    GROUP BY r.queue
)
SELECT s.queue, u.n, u.tasks
FROM served s
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS n, array_agg(DISTINCT x.task ORDER BY x.task) AS tasks
    FROM (SELECT j.task FROM workhorse.jobs j
          WHERE j.queue = s.queue AND j.status = 'ready'
          ORDER BY j.queue, j.rank, j.id
          LIMIT %(sample)s) AS x
    WHERE NOT (x.task = ANY(s.tasks))
) AS u
WHERE NOT s.declares_all AND u.n > 0
ORDER BY s.queue
