INSERT INTO workhorse.workers (app, host, pid, slots, queues, stats)
VALUES (%s, %s, %s, %s, %s::text[], %s::jsonb)
RETURNING id
