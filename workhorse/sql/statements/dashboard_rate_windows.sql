-- For each of these queues, its rates in force now: the starts within the queue-wide window and
-- the seconds until the queue-wide rate allows the next start (0: now); per key, the soonest a
-- key that is out of its rate may start again (among at most %(sample)s keys that started within
-- the window, as health() counts them). NULLs where the queue has no such rate.
SELECT q.queue, l.rate_limit, l.rate_period,
       CASE WHEN l.rate_limit IS NULL THEN NULL
            ELSE workhorse._rate_used_v1(q.queue, '', l.rate_period, clock_timestamp()) END,
       CASE WHEN l.rate_limit IS NULL THEN NULL
            ELSE workhorse._rate_next_start_v1(q.queue, '', l.rate_limit, l.rate_period,
                                               clock_timestamp()) END,
       k.soonest
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN LATERAL workhorse._limits_v1(q.queue, clock_timestamp()) AS l
CROSS JOIN LATERAL (
    SELECT min(workhorse._rate_next_start_v1(q.queue, u.ckey, l.rate_limit_per_key,
                                             l.rate_period_per_key, clock_timestamp()))
               AS soonest
    FROM (SELECT r.ckey, sum(r.n) AS used
          FROM (SELECT rs.ckey, rs.n FROM workhorse.rate_starts rs
                WHERE l.rate_limit_per_key IS NOT NULL AND rs.queue = q.queue AND rs.ckey <> ''
                  AND rs.bucket_end > clock_timestamp()
                                      - make_interval(secs => l.rate_period_per_key)
                ORDER BY rs.queue, rs.ckey, rs.bucket_end
                LIMIT %(sample)s * 101) AS r
          GROUP BY r.ckey) AS u
    WHERE u.used >= l.rate_limit_per_key
) AS k
