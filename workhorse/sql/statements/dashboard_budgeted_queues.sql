-- For each of these queues (queues that use a budget): the cost units and the number of its
-- unexpired active jobs, and, within a sample of its first %(sample)s + 1 ready jobs in
-- admission order (rank, id), how many there are and how many of the first %(sample)s name one of
-- the budgets in %(blocked)s (those full or out of rate now). Bounded as policy_health counts a
-- queue: its active jobs (at most its capacity) and a capped range of jobs_ready_idx.
SELECT q.queue, a.units, a.jobs, s.sampled, s.blocked
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(j.cost), 0)::integer AS units, count(*)::integer AS jobs
    FROM workhorse.jobs j
    WHERE j.queue = q.queue AND j.status = 'active' AND j.lease_until > clock_timestamp()
) AS a
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS sampled,
           (count(*) FILTER (WHERE r.nth <= %(sample)s
                               AND r.budget = ANY(%(blocked)s::text[])))::integer AS blocked
    FROM (SELECT j.budget, row_number() OVER (ORDER BY j.rank, j.id) AS nth
          FROM (SELECT j.budget, j.rank, j.id FROM workhorse.jobs j
                WHERE j.queue = q.queue AND j.status = 'ready'
                ORDER BY j.queue, j.rank, j.id
                LIMIT %(sample)s + 1) AS j) AS r
) AS s
ORDER BY q.queue
