-- Per queue, its active jobs whose lease has expired: their worker stopped renewing it (it died,
-- was killed or froze), and the queue's next claim takes them again, with a new attempt (the
-- reason code `stalled`, docs/design.md "Reason codes"). Read through jobs_active_idx, so the
-- cost follows the jobs active fleet-wide, never a backlog. Then, per queue, its jobs that
-- ended `expired` in the last hour (the code `expired`), read through jobs_held_failed_idx: the
-- cost follows the expired jobs kept (a day). One row, with the server's clock: health compares
-- the next starts it read before against it, not against the client's clock.
SELECT clock_timestamp(), l.queues, l.counts, x.queues, x.counts
FROM (SELECT COALESCE(array_agg(e.queue ORDER BY e.queue), '{}') AS queues,
             COALESCE(array_agg(e.n ORDER BY e.queue), '{}') AS counts
      FROM (SELECT j.queue, count(*)::integer AS n
            FROM workhorse.jobs j
            WHERE j.status = 'active' AND j.lease_until <= clock_timestamp()
            GROUP BY j.queue) AS e) AS l,
     (SELECT COALESCE(array_agg(e.queue ORDER BY e.queue), '{}') AS queues,
             COALESCE(array_agg(e.n ORDER BY e.queue), '{}') AS counts
      FROM (SELECT j.queue, count(*)::integer AS n
            FROM workhorse.jobs j
            WHERE j.status = 'expired'
              AND j.finished_at > clock_timestamp() - interval '1 hour'
            GROUP BY j.queue) AS e) AS x
