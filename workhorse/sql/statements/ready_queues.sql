-- Polled wake-ups (where LISTEN cannot work): which of these queues have a ready job. One probe
-- of the ready index per queue.
SELECT q.queue
FROM unnest(%s::text[]) AS q(queue)
WHERE EXISTS (SELECT 1 FROM workhorse.jobs j WHERE j.queue = q.queue AND j.status = 'ready')
