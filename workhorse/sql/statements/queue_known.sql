-- Whether a queue exists for an operator's action: it has a policy, a control or a schedule, a
-- live supervisor serves it, its jobs have named a budget (a budget_queues row: the budget
-- governs it, and `workhorse queues` lists it, also once its jobs moved to history), or it has
-- a job. Jobs are looked for through each status's partial index, and among the newest
-- %(window)s ids for the rest (finished history has no index by queue: a queue whose only jobs
-- are older succeeded ones reads as unknown). Bounded whatever the history, so that a typo
-- costs no scan of it.
SELECT EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.schedules s WHERE s.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.budget_queues bq WHERE bq.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.workers w
               WHERE %(queue)s = ANY(w.queues) AND w.last_seen > now() - interval '30 seconds')
    OR EXISTS (SELECT 1 FROM workhorse.jobs j WHERE j.status = 'ready' AND j.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.jobs j WHERE j.status = 'active' AND j.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.jobs j
               WHERE j.status = 'scheduled' AND j.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.jobs j WHERE j.status = 'held' AND j.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.jobs j WHERE j.status = 'failed' AND j.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.jobs j
               WHERE j.status = 'canceled' AND j.queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM workhorse.jobs j
               WHERE j.id > (SELECT max(m.id) FROM workhorse.jobs m) - %(window)s
                 AND j.queue = %(queue)s)
