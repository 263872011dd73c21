-- For the worker's wake-up timer: per served queue, whether it is governed (a policy, a pause,
-- an override, or jobs that named a budget: docs/design.md "Named budgets"), and the earliest moment a job may become claimable without a NOTIFY (a
-- scheduled job falling due, a suspended job's timer, a lease running out, an override expiring). A few index probes per
-- queue; never a scan of the backlog.
SELECT q.queue,
       EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = q.queue)
           OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = q.queue)
           OR EXISTS (SELECT 1 FROM workhorse.budget_queues bq WHERE bq.queue = q.queue)
           AS governed,
       LEAST((SELECT min(j.run_at) FROM workhorse.jobs j
              WHERE j.queue = q.queue AND j.status = 'scheduled'),
             (SELECT min(j.wake_at) FROM workhorse.jobs j
              WHERE j.queue = q.queue AND j.status = 'suspended'),
             (SELECT min(j.lease_until) FROM workhorse.jobs j
              WHERE j.queue = q.queue AND j.status = 'active'),
             (SELECT c.override_expires_at FROM workhorse.queue_controls c
              WHERE c.queue = q.queue)) AS due,
       clock_timestamp() AS now
FROM unnest(%s::text[]) AS q(queue)
