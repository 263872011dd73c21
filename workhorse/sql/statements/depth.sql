-- Each live status is counted through its own partial index. Succeeded history has no index on
-- purpose: it is counted exactly while the table is small, and estimated (live tuples less the
-- rest) once it is not, so the cost stays bounded with millions of finished jobs.
WITH counted AS (
    SELECT 'scheduled' AS status, (SELECT count(*) FROM workhorse.jobs WHERE status = 'scheduled') AS n
    UNION ALL SELECT 'ready', (SELECT count(*) FROM workhorse.jobs WHERE status = 'ready')
    UNION ALL SELECT 'active', (SELECT count(*) FROM workhorse.jobs WHERE status = 'active')
    UNION ALL SELECT 'held', (SELECT count(*) FROM workhorse.jobs WHERE status = 'held')
    UNION ALL SELECT 'failed', (SELECT count(*) FROM workhorse.jobs WHERE status = 'failed')
    UNION ALL SELECT 'canceled', (SELECT count(*) FROM workhorse.jobs WHERE status = 'canceled')
    UNION ALL SELECT 'expired', (SELECT count(*) FROM workhorse.jobs WHERE status = 'expired')
    UNION ALL SELECT 'suspended', (SELECT count(*) FROM workhorse.jobs WHERE status = 'suspended')
), live AS (
    SELECT GREATEST(COALESCE(s.n_live_tup, 0), COALESCE(c.reltuples, 0)::bigint) AS n
    FROM pg_class c
    LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE c.oid = 'workhorse.jobs'::regclass
)
SELECT status, n::bigint FROM counted
UNION ALL
SELECT 'succeeded',
       CASE WHEN (SELECT n FROM live) < 100000
            THEN (SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded')
            ELSE GREATEST((SELECT n FROM live) - (SELECT sum(n) FROM counted), 0) END::bigint
