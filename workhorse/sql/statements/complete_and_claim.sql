-- Successes first (rows with a status), then the claimed jobs; a row with neither an id nor a
-- status says in next_start_in when a rate limit allows the next start.
SELECT id, task, queue, ckey, priority, payload, attempts, max_attempts, fence, lease_until,
       enqueued_at, run_at, meta, started_at, next_start_in, status, scheduled_for
FROM workhorse.claim_v1(%s::text, %s::integer, %s::double precision,
                        %b::bigint[], %b::bigint[], %b::text[], %b::integer[], %b::text[])
