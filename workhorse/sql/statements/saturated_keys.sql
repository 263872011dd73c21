-- The keys of one queue at their limit in force, with their ready backlog, the biggest first. A
-- key's limit is the claim's (docs/design.md "Per-key limits"): its own key_limits row's
-- max_active, else its set's default, else max_active_per_key in force (an override's where it
-- has one); active counts units (the jobs' cost), as health() does. Bounded like health(): each
-- key with active jobs probes key_limits' primary key once, at most %(sample)s saturated keys are
-- looked at, and each key's backlog is counted up to %(cap)s + 1 jobs through the ready-key index
-- (a capped count is shown as "more than").
WITH l AS (
    SELECT * FROM workhorse._limits_v1(%(queue)s, clock_timestamp())
), ks AS (
    SELECT s.default_max_active FROM workhorse.key_limit_sets s WHERE s.queue = %(queue)s
), active AS (
    SELECT j.ckey, sum(j.cost)::integer AS active
    FROM workhorse.jobs j
    WHERE j.queue = %(queue)s AND j.status = 'active' AND j.lease_until > clock_timestamp()
      AND j.ckey <> ''
    GROUP BY j.ckey
), limited AS MATERIALIZED (
    -- (Materialized, so each key is probed once; a scalar probe: a join may be planned as a
    -- hash over every row of key_limits.)
    SELECT a.ckey, a.active,
           COALESCE(CASE WHEN EXISTS (SELECT 1 FROM ks) THEN
                        (SELECT kl.max_active FROM workhorse.key_limits kl
                         WHERE kl.queue = %(queue)s AND kl.ckey = a.ckey) END,
                    (SELECT ks.default_max_active FROM ks), l.max_active_per_key) AS key_max
    FROM active a, l
), saturated AS (
    SELECT m.ckey, m.active, m.key_max
    FROM limited m
    WHERE m.active >= m.key_max
    ORDER BY m.ckey
    LIMIT %(sample)s
)
SELECT s.ckey, s.active, b.backlog, b.backlog > %(cap)s AS capped, s.key_max
FROM saturated s
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS backlog
    FROM (SELECT 1 FROM workhorse.jobs j
          WHERE j.queue = %(queue)s AND j.status = 'ready' AND j.ckey = s.ckey
          LIMIT %(cap)s + 1) AS r
) AS b
ORDER BY b.backlog DESC, s.ckey
LIMIT %(limit)s
