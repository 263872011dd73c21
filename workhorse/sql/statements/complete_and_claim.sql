-- Successes first (rows with a status and an id), then the claimed jobs (claim_v2: the claim of
-- feature level 2); a row with no id is a marker (claim_v2's header says which).
-- The last parameter says whether the claim may commit asynchronously (when it queued for the
-- lock, its 'unflushed' marker says so, and the caller then sends commit_barrier.sql).
SELECT id, task, queue, ckey, priority, payload, attempts, max_attempts, fence, lease_until,
       enqueued_at, run_at, meta, started_at, next_start_in, status, scheduled_for
FROM workhorse.claim_v2(%s::text, %s::integer, %s::double precision,
                        %b::bigint[], %b::bigint[], %b::text[], %b::integer[], %b::text[],
                        %s::text[], false, %s::boolean)
