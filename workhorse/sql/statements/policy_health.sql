-- Per policy: capacity in use (unexpired leases only) and the ready work the limits hold back,
-- counted within a bounded sample of ready jobs in admission order, so the cost stays
-- bounded however deep the queue is.
SELECT p.namespace, p.queue, p.max_active, p.max_active_per_key,
       a.active,
       CASE WHEN p.max_active IS NULL THEN NULL
            ELSE GREATEST(p.max_active - a.active, 0) END AS available,
       b.blocked_ready,
       a.saturated_keys,
       b.sampled > %(sample)s AS capped
FROM workhorse.policies p
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(k.n), 0)::integer AS active,
           (count(*) FILTER (WHERE k.ckey <> '' AND k.n >= p.max_active_per_key))::integer
               AS saturated_keys,
           COALESCE(array_agg(k.ckey) FILTER (WHERE k.ckey <> '' AND k.n >= p.max_active_per_key),
                    '{}') AS saturated
    FROM (SELECT j.ckey, count(*) AS n
          FROM workhorse.jobs j
          WHERE j.queue = p.queue AND j.status = 'active' AND j.lease_until > clock_timestamp()
          GROUP BY j.ckey) AS k
) AS a
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS sampled,
           (count(*) FILTER (WHERE s.nth <= %(sample)s AND (
                (p.max_active IS NOT NULL AND a.active >= p.max_active)
                OR s.ckey = ANY(a.saturated))))::integer AS blocked_ready
    FROM (SELECT j.ckey, row_number() OVER (ORDER BY j.rank, j.id) AS nth
          FROM (SELECT j.ckey, j.rank, j.id FROM workhorse.jobs j
                WHERE j.queue = p.queue AND j.status = 'ready'
                ORDER BY j.queue, j.rank, j.id
                LIMIT %(sample)s + 1) AS j) AS s
) AS b
ORDER BY p.namespace, p.queue
