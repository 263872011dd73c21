-- Of these jobs, the ones that reached a resting status (what result waiters poll for).
SELECT id FROM workhorse.jobs
WHERE id = ANY(%s::bigint[]) AND status IN ('succeeded', 'failed', 'held', 'canceled', 'expired')
