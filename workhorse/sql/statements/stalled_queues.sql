-- The queues with work that could start now (ready jobs, or scheduled jobs already due, which a
-- claim makes ready) and what in force could keep it from starting: a pause, limits, a feature
-- level above the claim's. Each
-- queue name is found through the status's partial index by a skip scan (one probe per queue,
-- however deep its backlog), so the cost follows the number of queues, not of jobs. Workers
-- are read apart (list_workers.sql); workhorse/_incident.py turns both into reasons.
WITH RECURSIVE ready(queue) AS (
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'ready' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'ready' AND j.queue > r.queue ORDER BY j.queue LIMIT 1)
    FROM ready r WHERE r.queue IS NOT NULL
), scheduled(queue) AS (
    (SELECT j.queue FROM workhorse.jobs j WHERE j.status = 'scheduled' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM workhorse.jobs j
            WHERE j.status = 'scheduled' AND j.queue > s.queue ORDER BY j.queue LIMIT 1)
    FROM scheduled s WHERE s.queue IS NOT NULL
), waiting AS (
    SELECT r.queue FROM ready r WHERE r.queue IS NOT NULL
    UNION
    SELECT s.queue FROM scheduled s
    WHERE s.queue IS NOT NULL AND EXISTS (
        SELECT 1 FROM workhorse.jobs j
        WHERE j.status = 'scheduled' AND j.queue = s.queue AND j.run_at <= clock_timestamp())
)
SELECT w.queue, l.paused, l.max_active, l.max_active_per_key, l.rate_limit, l.rate_limit_per_key,
       l.feature_level,
       -- Its ready jobs, counted up to %(sample)s through jobs_ready_idx (the reason codes'
       -- numbers: what a missing worker or a pause holds back).
       (SELECT count(*) FROM (SELECT 1 FROM workhorse.jobs j
                              WHERE j.queue = w.queue AND j.status = 'ready'
                              LIMIT %(sample)s) AS r)::integer AS ready
FROM waiting w
CROSS JOIN LATERAL workhorse._limits_v1(w.queue, clock_timestamp()) AS l
ORDER BY w.queue
