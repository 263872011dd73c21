SELECT id, task, queue, ckey, priority, payload, attempts, max_attempts, fence, lease_until,
       enqueued_at, run_at, meta
FROM workhorse.claim_v1(%s::text, %s::integer, %s::double precision)
ORDER BY rank, id
