-- Waiting workflow members by queue, through their own partial index (depth.sql and
-- list_queues.sql are 0.2.0's and know no `waiting`).
SELECT j.queue, count(*)::bigint FROM workhorse.jobs j WHERE j.status = 'waiting' GROUP BY j.queue
