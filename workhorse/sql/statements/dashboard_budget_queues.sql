-- Every queue that has used a budget (a budget_queues row: such a queue is governed, DESIGN.md
-- "Named budgets"), with each budget it used, that budget's ready jobs in it (counted up to
-- %(sample)s + 1, through jobs_budget_ready_idx) and whether a policy or an operator control
-- lists the queue in health() already. Bounded: at most %(pairs)s pairs, in the order of
-- budget_queues_queue_idx, and one capped index range per pair.
SELECT bq.queue, bq.budget, r.ready,
       EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = bq.queue)
       OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = bq.queue) AS listed
FROM (SELECT q.budget, q.queue FROM workhorse.budget_queues q
      ORDER BY q.queue, q.budget
      LIMIT %(pairs)s) AS bq
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS ready
    FROM (SELECT 1 FROM workhorse.jobs j
          WHERE j.budget = bq.budget AND j.queue = bq.queue AND j.status = 'ready'
            AND j.budget IS NOT NULL
          ORDER BY j.budget, j.queue, j.rank, j.id
          LIMIT %(sample)s + 1) AS s
) AS r
ORDER BY bq.queue, bq.budget
