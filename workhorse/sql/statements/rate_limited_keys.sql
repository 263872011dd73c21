-- The keys of one queue that used up their per-key rate limit in the current window, as
-- health() counts them: among at most %(sample)s keys that started in the window.
WITH l AS (
    SELECT * FROM workhorse._limits_v1(%(queue)s, clock_timestamp())
)
SELECT u.ckey, u.used::integer, l.rate_limit_per_key
FROM l
CROSS JOIN LATERAL (
    SELECT r.ckey, sum(r.n) AS used
    FROM (SELECT rs.ckey, rs.n FROM workhorse.rate_starts rs
          WHERE l.rate_limit_per_key IS NOT NULL AND rs.queue = %(queue)s AND rs.ckey <> ''
            AND rs.bucket_end > clock_timestamp() - make_interval(secs => l.rate_period_per_key)
          ORDER BY rs.queue, rs.ckey, rs.bucket_end
          LIMIT %(sample)s * 101) AS r
    GROUP BY r.ckey
) AS u
WHERE u.used >= l.rate_limit_per_key
ORDER BY u.used DESC, u.ckey
LIMIT %(limit)s
