-- The claim with no successes to record, as `p_holder` (NULL: no capacity grant) that could run
-- `p_places` more jobs of the queue (NULL: the limit asked for). A row with a
-- NULL id is no job but a marker: next_start_in says when a rate limit allows the next start;
-- a status says what else the claim has to tell (claim_v2's header).
SELECT id, task, queue, ckey, priority, payload, attempts, max_attempts, fence, lease_until,
       enqueued_at, run_at, meta, started_at, next_start_in, status, scheduled_for
FROM workhorse.claim_v2(%s::text, %s::integer, %s::double precision,
                        NULL, NULL, NULL, NULL, NULL, %s::text, %s::integer)
