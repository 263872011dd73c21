-- Per governed, paused or overridden queue: the limits in force, capacity in use (unexpired
-- leases only), starts left, and the ready work the limits hold back, counted within a bounded
-- sample of ready jobs in admission order, so the cost stays bounded however deep the queue is.
-- Rate-limited keys are counted among at most %(sample)s keys that started in the window.
-- Capacity is counted in units (docs/design.md "Fair share and job cost"): `active` and
-- `active_units` are the sum of the active jobs' cost (the number of active jobs when every cost
-- is 1), `active_jobs` their number, and a key is saturated when its units reach its limit in
-- force (docs/design.md "Per-key limits"), as the claim has it: its own key_limits row's
-- max_active, else its set's default, else max_active_per_key. Each key with active jobs probes
-- key_limits' primary key once; `key_limits` counts a set's rows up to %(sample)s + 1, by the
-- same index, so no read grows with the number of rows.
-- A queue whose jobs have named a budget (a budget_queues row) is governed by it, with or
-- without a policy (docs/design.md "Named budgets"): it has a row, and `budgets` names them
-- (through budget_queues_queue_idx); what a budget holds back is the budget's own row.
-- Back-pressure (docs/design.md "Back-pressure"): the queue's own backoff in force and its keys'
-- (at most %(sample)s, by key), read only while the control row's stamp is ahead, as the claim
-- reads them (a backoff stamps that row, so a backed-off queue has a row here). What they hold
-- back is in `blocked_ready`, as a pause's and a saturated key's are, and `backed_off_ready`
-- counts it alone (the reason code `backed_off`).
WITH queues AS (
    -- (Through an array, which the planner counts as a few rows: every part below runs once
    -- per queue, and on tables never analyzed it would otherwise assume a thousand queues and
    -- plan above jit_above_cost, so that every read paid for JIT compilation.)
    SELECT u.queue FROM unnest(ARRAY(
        SELECT p.queue FROM workhorse.policies p
        UNION
        SELECT c.queue FROM workhorse.queue_controls c
        UNION
        SELECT bq.queue FROM workhorse.budget_queues bq)) AS u(queue)
)
SELECT p.namespace, q.queue, l.max_active, l.max_active_per_key,
       a.active,
       CASE WHEN l.max_active IS NULL THEN NULL
            ELSE GREATEST(l.max_active - a.active, 0) END AS available,
       b.blocked_ready,
       a.saturated_keys,
       b.sampled > %(sample)s AS capped,
       l.rate_limit, l.rate_period, l.rate_limit_per_key, l.rate_period_per_key,
       r.limited_keys AS rate_limited_keys,
       l.paused,
       c.override_set_at IS NOT NULL
           AND (c.override_expires_at IS NULL OR c.override_expires_at > clock_timestamp())
           AS overridden,
       c.max_active AS override_max_active, c.max_active_per_key AS override_max_active_per_key,
       c.rate_limit AS override_rate_limit, c.rate_period AS override_rate_period,
       c.rate_limit_per_key AS override_rate_limit_per_key,
       c.rate_period_per_key AS override_rate_period_per_key,
       c.override_set_at, c.override_expires_at,
       s.queue_used AS rate_used,
       COALESCE(p.fairness, 'fifo') AS fairness,
       a.active AS active_units,
       COALESCE(p.on_key_full, 'queue') AS on_key_full,
       -- The bursts in force: a live override's, else the policy's (docs/design.md "rate bursts").
       CASE WHEN c.override_set_at IS NOT NULL AND c.rate_burst IS NOT NULL
                 AND (c.override_expires_at IS NULL OR c.override_expires_at > clock_timestamp())
            THEN c.rate_burst ELSE p.rate_burst END AS rate_burst,
       CASE WHEN c.override_set_at IS NOT NULL AND c.rate_burst_per_key IS NOT NULL
                 AND (c.override_expires_at IS NULL OR c.override_expires_at > clock_timestamp())
            THEN c.rate_burst_per_key ELSE p.rate_burst_per_key END AS rate_burst_per_key,
       c.rate_burst AS override_rate_burst, c.rate_burst_per_key AS override_rate_burst_per_key,
       a.jobs AS active_jobs,
       -- When the queue's rate and burst let the next start happen (now, or later while out of
       -- starts; NULL without a rate), and the soonest next start among the keys out of starts.
       CASE WHEN l.rate_limit IS NOT NULL THEN clock_timestamp() + make_interval(secs => GREATEST(
           workhorse._rate_next_start_v1(q.queue, '', l.rate_limit, l.rate_period,
                                         clock_timestamp()),
           CASE WHEN bw.burst IS NULL THEN 0 ELSE workhorse._burst_next_start_v1(
               q.queue, '', bw.burst, bw.len, clock_timestamp()) END)) END AS next_start_at,
       (SELECT clock_timestamp() + make_interval(secs => min(workhorse._rate_next_start_v1(
                   q.queue, k.ckey, l.rate_limit_per_key, l.rate_period_per_key,
                   clock_timestamp())))
        FROM unnest(r.limited) AS k(ckey)) AS next_key_start_at,
       ARRAY(SELECT bq.budget FROM workhorse.budget_queues bq
             WHERE bq.queue = q.queue ORDER BY bq.queue, bq.budget) AS budgets,
       qo.until AS backed_off_until, qo.by_job AS backed_off_by,
       ko.keys AS backed_off_keys, ko.untils AS backed_off_key_untils,
       ko.by_jobs AS backed_off_key_by_jobs,
       b.backed_off_ready,
       kc.n AS key_limits, ks.queue IS NOT NULL AS key_limited, ks.default_max_active,
       ks.default_weight, ks.default_rate_limit, ks.default_rate_period
FROM queues q
LEFT JOIN workhorse.policies p ON p.queue = q.queue
LEFT JOIN workhorse.queue_controls c ON c.queue = q.queue
LEFT JOIN workhorse.key_limit_sets ks ON ks.queue = q.queue
CROSS JOIN LATERAL workhorse._limits_v1(q.queue, clock_timestamp()) AS l
CROSS JOIN LATERAL (
    SELECT CASE WHEN l.rate_limit IS NULL THEN NULL
                ELSE workhorse._rate_used_v1(q.queue, '', l.rate_period, clock_timestamp())
           END AS queue_used
) AS s
LEFT JOIN LATERAL (
    -- The queue's burst in force (at most the N in force) and its window P*B/N.
    SELECT x.burst, floor(l.rate_period * x.burst / l.rate_limit * 1000) / 1000 AS len
    FROM (SELECT LEAST(l.rate_limit, y.burst) AS burst   -- NULL without a burst or a rate
          FROM (SELECT CASE WHEN l.rate_limit IS NULL THEN NULL
                            WHEN c.override_set_at IS NOT NULL AND c.rate_burst IS NOT NULL
                                 AND (c.override_expires_at IS NULL
                                      OR c.override_expires_at > clock_timestamp())
                            THEN c.rate_burst ELSE p.rate_burst END AS burst) AS y
          WHERE y.burst IS NOT NULL) AS x
) AS bw ON true
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(k.n), 0)::integer AS active,
           COALESCE(sum(k.jobs), 0)::integer AS jobs,
           (count(*) FILTER (WHERE k.ckey <> '' AND k.n >= k.key_max))::integer
               AS saturated_keys,
           COALESCE(array_agg(k.ckey) FILTER (WHERE k.ckey <> '' AND k.n >= k.key_max), '{}')
               AS saturated
    FROM (SELECT g.ckey, g.n, g.jobs,
                 -- The key's limit in force, as the claim has it: its own row's (one probe of
                 -- key_limits' primary key per key with active jobs: a scalar subquery, never a
                 -- join that could be planned as a scan of every row), else the set's default,
                 -- else max_active_per_key in force.
                 COALESCE(CASE WHEN ks.queue IS NOT NULL AND g.ckey <> '' THEN
                              (SELECT kl.max_active FROM workhorse.key_limits kl
                               WHERE kl.queue = q.queue AND kl.ckey = g.ckey) END,
                          ks.default_max_active, l.max_active_per_key) AS key_max
          FROM (SELECT j.ckey, sum(j.cost) AS n, count(*) AS jobs
                FROM workhorse.jobs j
                WHERE j.queue = q.queue AND j.status = 'active'
                  AND j.lease_until > clock_timestamp()
                GROUP BY j.ckey) AS g
          OFFSET 0) AS k   -- (not flattened: each key's row is probed once, not per use)
) AS a
CROSS JOIN LATERAL (
    SELECT (count(*) FILTER (WHERE u.used >= l.rate_limit_per_key))::integer AS limited_keys,
           COALESCE(array_agg(u.ckey) FILTER (WHERE u.used >= l.rate_limit_per_key), '{}')
               AS limited
    FROM (SELECT r.ckey, sum(r.n) AS used
          FROM (SELECT rs.ckey, rs.n FROM workhorse.rate_starts rs
                WHERE l.rate_limit_per_key IS NOT NULL AND rs.queue = q.queue AND rs.ckey <> ''
                  AND rs.bucket_end > clock_timestamp() - make_interval(secs => l.rate_period_per_key)
                ORDER BY rs.queue, rs.ckey, rs.bucket_end
                LIMIT %(sample)s * 101) AS r
          GROUP BY r.ckey) AS u
) AS r
LEFT JOIN LATERAL (
    SELECT bo.until, bo.by_job FROM workhorse.backoffs bo
    WHERE c.backed_off_until > clock_timestamp()
      AND bo.scope = 'queue' AND bo.name = q.queue AND bo.ckey = ''
      AND bo.until > clock_timestamp()
) AS qo ON true
CROSS JOIN LATERAL (
    -- Soonest end first; which keys are read (when more than the sample are backed off) goes
    -- by the primary key's order, so that the read stays bounded.
    SELECT COALESCE(array_agg(k.ckey ORDER BY k.until, k.ckey), '{}') AS keys,
           COALESCE(array_agg(k.until ORDER BY k.until, k.ckey), '{}') AS untils,
           COALESCE(array_agg(k.by_job ORDER BY k.until, k.ckey), '{}') AS by_jobs
    FROM (SELECT bo.ckey, bo.until, bo.by_job FROM workhorse.backoffs bo
          WHERE c.backed_off_until > clock_timestamp()
            AND bo.scope = 'key' AND bo.name = q.queue AND bo.until > clock_timestamp()
          ORDER BY bo.scope, bo.name, bo.ckey
          LIMIT %(sample)s) AS k
) AS ko
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS sampled,
           (count(*) FILTER (WHERE s2.nth <= %(sample)s AND (
                l.paused
                OR (l.max_active IS NOT NULL AND a.active >= l.max_active)
                OR (l.rate_limit IS NOT NULL AND s.queue_used >= l.rate_limit)
                OR s2.ckey = ANY(a.saturated)
                OR s2.ckey = ANY(r.limited)
                OR qo.until IS NOT NULL
                OR s2.ckey = ANY(ko.keys))))::integer AS blocked_ready,
           (count(*) FILTER (WHERE s2.nth <= %(sample)s AND (
                qo.until IS NOT NULL OR s2.ckey = ANY(ko.keys))))::integer AS backed_off_ready
    FROM (SELECT j.ckey, row_number() OVER (ORDER BY j.rank, j.id) AS nth
          FROM (SELECT j.ckey, j.rank, j.id FROM workhorse.jobs j
                WHERE j.queue = q.queue AND j.status = 'ready'
                ORDER BY j.queue, j.rank, j.id
                LIMIT %(sample)s + 1) AS j) AS s2
) AS b
CROSS JOIN LATERAL (
    -- The keys with limits of their own: an index-only count, in the key order, of at most
    -- %(sample)s + 1 of them (a queue may have a hundred thousand).
    SELECT count(*)::integer AS n
    FROM (SELECT 1 FROM workhorse.key_limits kl
          WHERE ks.queue IS NOT NULL AND kl.queue = q.queue
          ORDER BY kl.queue, kl.ckey
          LIMIT %(sample)s + 1) AS x
) AS kc
ORDER BY p.namespace NULLS LAST, q.queue
