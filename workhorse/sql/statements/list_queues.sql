-- Every queue with live jobs, a policy, a control, a schedule or a named budget its jobs have
-- named: live depth by status (each status counted through its partial index; finished history
-- is not counted per queue), the limits in force, and the budgets its jobs have named (its
-- budget_queues rows, one small row per pair ever used, read through budget_queues_queue_idx):
-- a queue with no policy and a budget is governed by the budget (docs/design.md "Named budgets").
-- One branch per live status: `status IN (...)` matches none of the partial indexes, and with a
-- million finished jobs it was a sequential scan of the whole table.
WITH depth AS (
    SELECT j.queue, 'scheduled'::text AS status, count(*)::bigint AS n
    FROM workhorse.jobs j WHERE j.status = 'scheduled' GROUP BY j.queue
    UNION ALL
    SELECT j.queue, 'ready', count(*)::bigint
    FROM workhorse.jobs j WHERE j.status = 'ready' GROUP BY j.queue
    UNION ALL
    SELECT j.queue, 'active', count(*)::bigint
    FROM workhorse.jobs j WHERE j.status = 'active' GROUP BY j.queue
    UNION ALL
    -- Suspended jobs (docs/design.md "Durable execution"), through jobs_suspended_idx.
    SELECT j.queue, 'suspended', count(*)::bigint
    FROM workhorse.jobs j WHERE j.status = 'suspended' GROUP BY j.queue
    UNION ALL
    SELECT j.queue, j.status, count(*)::bigint
    FROM workhorse.jobs j
    WHERE j.status IN ('held', 'failed', 'canceled', 'expired')
    GROUP BY j.queue, j.status
), queues AS (
    SELECT d.queue FROM depth d
    UNION SELECT p.queue FROM workhorse.policies p
    UNION SELECT c.queue FROM workhorse.queue_controls c
    UNION SELECT s.queue FROM workhorse.schedules s
    UNION SELECT bq.queue FROM workhorse.budget_queues bq
)
SELECT q.queue,
       COALESCE((SELECT jsonb_object_agg(d.status, d.n) FROM depth d WHERE d.queue = q.queue),
                '{}'::jsonb) AS depth,
       p.namespace, l.max_active, l.max_active_per_key, l.rate_limit, l.rate_period,
       l.rate_limit_per_key, l.rate_period_per_key, l.paused,
       c.override_set_at IS NOT NULL
           AND (c.override_expires_at IS NULL OR c.override_expires_at > clock_timestamp())
           AS overridden,
       c.max_active, c.max_active_per_key, c.rate_limit, c.rate_period,
       c.rate_limit_per_key, c.rate_period_per_key, c.override_set_at, c.override_expires_at,
       ARRAY(SELECT bq.budget FROM workhorse.budget_queues bq
             WHERE bq.queue = q.queue ORDER BY bq.queue, bq.budget) AS budgets
FROM queues q
LEFT JOIN workhorse.policies p ON p.queue = q.queue
LEFT JOIN workhorse.queue_controls c ON c.queue = q.queue
CROSS JOIN LATERAL workhorse._limits_v1(q.queue, clock_timestamp()) AS l
ORDER BY q.queue
