-- The claim with no successes to record. A row with a NULL id is no job: it says in next_start_in
-- when a rate limit allows the next start.
SELECT id, task, queue, ckey, priority, payload, attempts, max_attempts, fence, lease_until,
       enqueued_at, run_at, meta, started_at, next_start_in, status, scheduled_for
FROM workhorse.claim_v1(%s::text, %s::integer, %s::double precision,
                        NULL, NULL, NULL, NULL, NULL)
