-- workhorse.testing.drain(with_scheduled=True): the scheduled jobs of these queues (future run_at,
-- or a retry's backoff) and their durable sleeps (docs/design.md "Durable execution") fall due
-- now; the next claim of each queue makes them ready. A wait's timeout is left alone (it would
-- time the wait out). Returns the ids moved.
WITH served AS (
    SELECT array_agg(q) AS queues FROM unnest(%s::text[]) AS q
), scheduled AS (
    UPDATE workhorse.jobs j
    SET run_at = now()
    FROM served
    WHERE j.queue = ANY(served.queues) AND j.status = 'scheduled' AND j.run_at > now()
    RETURNING j.id
), sleeping AS (
    UPDATE workhorse.jobs j
    SET wake_at = now()
    FROM served
    WHERE j.queue = ANY(served.queues) AND j.status = 'suspended' AND j.suspended_on = 'sleep'
      AND j.wake_at > now()
    RETURNING j.id
), steps AS (
    UPDATE workhorse.job_steps s
    SET wake_at = now()
    WHERE s.job_id IN (SELECT id FROM sleeping) AND s.recorded_at IS NULL AND s.kind = 'sleep'
)
SELECT id FROM scheduled
UNION ALL
SELECT id FROM sleeping
