-- Every queue name the dashboard knows, for its suggestions and to turn a queue substring into
-- the names it matches: the queues of policies, controls, schedules and registered supervisors,
-- and those with a job of an indexed status, each status's queue names found by a skip scan of
-- its partial index (one probe per queue, however many jobs). `matches`: the name contains
-- %(queue)s, case-insensitively (NULL: no substring given).
WITH RECURSIVE s_ready(queue) AS (  -- jobs_ready_idx
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'ready' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'ready' AND j.queue > s.queue ORDER BY j.queue LIMIT 1)
    FROM s_ready s WHERE s.queue IS NOT NULL
), s_active(queue) AS (  -- jobs_active_idx
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'active' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'active' AND j.queue > s.queue ORDER BY j.queue LIMIT 1)
    FROM s_active s WHERE s.queue IS NOT NULL
), s_scheduled(queue) AS (  -- jobs_scheduled_idx
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'scheduled' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'scheduled' AND j.queue > s.queue ORDER BY j.queue LIMIT 1)
    FROM s_scheduled s WHERE s.queue IS NOT NULL
), s_held(queue) AS (  -- jobs_held_failed_idx
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'held' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'held' AND j.queue > s.queue ORDER BY j.queue LIMIT 1)
    FROM s_held s WHERE s.queue IS NOT NULL
), s_failed(queue) AS (  -- jobs_held_failed_idx
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'failed' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'failed' AND j.queue > s.queue ORDER BY j.queue LIMIT 1)
    FROM s_failed s WHERE s.queue IS NOT NULL
), s_canceled(queue) AS (  -- jobs_held_failed_idx
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'canceled' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'canceled' AND j.queue > s.queue ORDER BY j.queue LIMIT 1)
    FROM s_canceled s WHERE s.queue IS NOT NULL
), names AS (
    SELECT queue FROM s_ready UNION SELECT queue FROM s_active
    UNION SELECT queue FROM s_scheduled UNION SELECT queue FROM s_held
    UNION SELECT queue FROM s_failed UNION SELECT queue FROM s_canceled
    UNION SELECT p.queue FROM workhorse.policies p
    UNION SELECT c.queue FROM workhorse.queue_controls c
    UNION SELECT s.queue FROM workhorse.schedules s
    UNION SELECT unnest(w.queues) FROM workhorse.workers w
)
SELECT n.queue,
       %(queue)s::text IS NOT NULL AND strpos(lower(n.queue), lower(%(queue)s::text)) > 0
           AS matches
FROM names n
WHERE n.queue IS NOT NULL
ORDER BY n.queue
