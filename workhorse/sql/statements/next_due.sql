-- For the worker's wake-up timer: per served queue, whether it is governed (a policy, a pause,
-- an override, or jobs that named a budget: docs/design.md "Named budgets"), and the earliest moment a job may become claimable without a NOTIFY (a
-- scheduled job falling due, a suspended job's timer, a lease running out, an override expiring). A few index probes per
-- queue; never a scan of the backlog.
-- `share`: a governed queue's max_active in force over the slots of the live supervisors that
-- serve it, unrounded (NULL without a queue-wide max_active, or where jobs name a budget). A
-- slot holding no more places than that never gives them back to the fleet (claimer.py's
-- fair-share lap): it has no more than its part. Unrounded, so that with fewer places than
-- slots (2 over 3: 0.67) a slot holding one still laps, and the places go round. Read from the
-- registry (`workers`), so a supervisor that died within 30 s still counts: the share comes
-- out smaller, never larger.
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
       (SELECT l.max_active::float8 / GREATEST(1, (
                   SELECT sum(w.slots) FROM workhorse.workers w
                   WHERE q.queue = ANY(w.queues)
                     AND w.last_seen > now() - interval '30 seconds'))
        FROM workhorse._limits_v1(q.queue, clock_timestamp()) AS l
        WHERE l.max_active IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM workhorse.budget_queues bq WHERE bq.queue = q.queue))
           AS share,
       clock_timestamp() AS now
FROM unnest(%s::text[]) AS q(queue)
