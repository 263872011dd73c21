-- Live concurrency per queue and key for the demo's queues (bounded: active rows only).
SELECT queue, NULLIF(ckey, '') AS ckey, count(*)::integer AS active
FROM workhorse.jobs
WHERE status = 'active' AND lease_until > clock_timestamp() AND queue = ANY(%s::text[])
GROUP BY queue, ckey
