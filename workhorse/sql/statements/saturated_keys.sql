-- The keys of one queue at their per-key limit (in force: an override's where it has one), with
-- their ready backlog, the biggest first. Bounded like health(): at most %(sample)s saturated keys
-- are looked at, and each key's backlog is counted up to %(cap)s + 1 jobs through the ready-key
-- index (a capped count is shown as "more than").
WITH l AS (
    SELECT * FROM workhorse._limits_v1(%(queue)s, clock_timestamp())
), active AS (
    SELECT j.ckey, count(*)::integer AS active
    FROM workhorse.jobs j
    WHERE j.queue = %(queue)s AND j.status = 'active' AND j.lease_until > clock_timestamp()
      AND j.ckey <> ''
    GROUP BY j.ckey
), saturated AS (
    SELECT a.ckey, a.active
    FROM active a, l
    WHERE l.max_active_per_key IS NOT NULL AND a.active >= l.max_active_per_key
    ORDER BY a.ckey
    LIMIT %(sample)s
)
SELECT s.ckey, s.active, b.backlog, b.backlog > %(cap)s AS capped
FROM saturated s
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS backlog
    FROM (SELECT 1 FROM workhorse.jobs j
          WHERE j.queue = %(queue)s AND j.status = 'ready' AND j.ckey = s.ckey
          LIMIT %(cap)s + 1) AS r
) AS b
ORDER BY b.backlog DESC, s.ckey
LIMIT %(limit)s
