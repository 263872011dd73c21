-- The claim with no successes to record (claim_v2: the claim of feature level 2). A row with a
-- NULL id is no job but a marker: next_start_in says when a rate limit allows the next start; a
-- status says that the queue needs a newer claim, or that it is full (claim_v2's header). The
-- last two parameters say whether the caller expects it full (its last claim found it so), and
-- whether the claim may commit asynchronously (when it queued for the lock, its 'unflushed'
-- marker says so, and the caller then sends commit_barrier.sql).
SELECT id, task, queue, ckey, priority, payload, attempts, max_attempts, fence, lease_until,
       enqueued_at, run_at, meta, started_at, next_start_in, status, scheduled_for
FROM workhorse.claim_v2(%s::text, %s::integer, %s::double precision,
                        NULL, NULL, NULL, NULL, NULL, %s::text[], %s::boolean,
                        %s::boolean)
