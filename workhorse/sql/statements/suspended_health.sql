-- Per queue, its suspended jobs (docs/design.md "Durable execution") by what they wait for
-- (`suspended_on`: a sleep's end, a signal, their children), each with the soonest timer among
-- them (a sleep's end or a wait's timeout; NULL when none has one). Read through
-- jobs_suspended_idx, the partial index on (queue, wake_at) of suspended jobs, so the cost
-- follows the suspended jobs, never the table (each one's row is read for what it waits on).
SELECT j.queue, j.suspended_on, count(*)::integer AS n, min(j.wake_at) AS next_wake_at
FROM workhorse.jobs j
WHERE j.status = 'suspended'
GROUP BY j.queue, j.suspended_on
ORDER BY j.queue, j.suspended_on
