-- Every queue that has used a budget (a budget_queues row: such a queue is governed, docs/design.md
-- "Named budgets"), with each budget it used, that budget's ready jobs in it (counted up to
-- %(sample)s + 1, through jobs_budget_ready_idx), whether a policy or an operator control lists
-- the queue in health() already, and the queue it leaves the budget's places to now, as the
-- claim's turns decide (_choose_units_v1): while this queue has had a turn, the other queue of
-- the budget that wanted it within the last 10 s, still has ready jobs of it and has the oldest
-- turn, when that turn is older than this queue's (NULL: none). Bounded: at most %(pairs)s pairs,
-- in the order of budget_queues_queue_idx, one capped index range per pair, and the budget's
-- waiting queues through budget_queues_wanting_idx.
SELECT bq.queue, bq.budget, r.ready,
       EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = bq.queue)
       OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = bq.queue) AS listed,
       CASE WHEN bq.last_turn IS NOT NULL
                 AND (w.last_turn IS NULL OR w.last_turn < bq.last_turn)
            THEN w.queue END AS defers_to
FROM (SELECT q.budget, q.queue, q.last_turn FROM workhorse.budget_queues q
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
LEFT JOIN LATERAL (
    SELECT o.queue, o.last_turn
    FROM workhorse.budget_queues o
    WHERE r.ready > 0 AND bq.last_turn IS NOT NULL
      AND o.budget = bq.budget AND o.wanted_at IS NOT NULL AND o.queue <> bq.queue
      AND o.wanted_at > clock_timestamp() - interval '10 seconds'
      -- One probe of jobs_budget_ready_idx (an EXISTS was planned as a scan of jobs).
      AND (SELECT 1 FROM workhorse.jobs j
           WHERE j.budget = o.budget AND j.queue = o.queue AND j.status = 'ready'
             AND j.budget IS NOT NULL
           ORDER BY j.budget, j.queue, j.rank, j.id
           LIMIT 1) IS NOT NULL
    ORDER BY o.budget, o.last_turn NULLS FIRST
    LIMIT 1
) AS w ON true
ORDER BY bq.queue, bq.budget
