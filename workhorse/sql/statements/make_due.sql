-- workhorse.testing.drain(with_scheduled=True): the scheduled jobs of these queues (future run_at,
-- or a retry's backoff) fall due now; the next claim of each queue makes them ready. Returns the
-- ids moved.
UPDATE workhorse.jobs
SET run_at = now()
WHERE queue = ANY(%s::text[]) AND status = 'scheduled' AND run_at > now()
RETURNING id
