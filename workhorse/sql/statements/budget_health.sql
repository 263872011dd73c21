-- One row per budget that is declared, overridden, or named by a ready or active job (a name
-- nobody declared: namespace and limits NULL, it limits nothing): the limits in force (a live
-- override's fields over the declared ones), the cost units of its unexpired active jobs, its
-- ready jobs (counted up to %(sample)s, `capped` beyond), the queues with ready or active
-- jobs naming it, and every queue whose jobs have named it (`used_by`: its budget_queues rows,
-- which the enqueue writes, so scheduled, waiting and finished jobs' queues too; at most
-- %(sample)s, through the table's primary key). Bounded: the names of undeclared budgets and
-- each budget's queues are found by skip-scans of the partial budget indexes (one probe per
-- distinct value, at most %(sample)s), the active jobs through jobs_budget_active_idx; no read
-- grows with a backlog. A budget backed off now (docs/design.md "Back-pressure") has a row too,
-- declared or not, with its backoff's end and job; while it lasts, every ready job of it is
-- held back, as while it is full. Its active units include its unexpired holds' (docs/design.md
-- "Holds", invariant 13; `held_units` says how many), and a budget held now has a row too;
-- `effective_max_active` is the max_active the claim admits within now (an adaptive budget's,
-- halved by its last backoff).
WITH RECURSIVE ready_names AS (
    (SELECT j.budget, 1 AS n FROM workhorse.jobs j
     WHERE j.status = 'ready' AND j.budget IS NOT NULL
     ORDER BY j.budget LIMIT 1)
    UNION ALL
    SELECT (SELECT j.budget FROM workhorse.jobs j
            WHERE j.status = 'ready' AND j.budget IS NOT NULL AND j.budget > r.budget
            ORDER BY j.budget LIMIT 1), r.n + 1
    FROM ready_names r
    WHERE r.budget IS NOT NULL AND r.n < %(sample)s
), names AS (
    -- An array unnested, which the planner counts as a few rows: as a UNION of small tables it
    -- estimated a thousand names (tables never analyzed), the plan's cost passed jit_above_cost,
    -- and every read paid 60-100 ms of JIT compilation for a result of a few rows.
    SELECT u.name FROM unnest(ARRAY(
        SELECT b.name FROM workhorse.budgets b
        UNION SELECT c.name FROM workhorse.budget_controls c
        UNION SELECT r.budget FROM ready_names r WHERE r.budget IS NOT NULL
        UNION SELECT DISTINCT j.budget FROM workhorse.jobs j
              WHERE j.status = 'active' AND j.budget IS NOT NULL
        UNION SELECT bo.name FROM workhorse.backoffs bo
              WHERE bo.scope = 'budget' AND bo.until > clock_timestamp()
        UNION SELECT DISTINCT h.budget FROM workhorse.budget_holds h
              WHERE h.lease_until > clock_timestamp())) AS u(name)
)
SELECT n.name, b.namespace,
       CASE WHEN o.live AND c.max_active IS NOT NULL THEN c.max_active ELSE b.max_active END
           AS max_active,
       CASE WHEN o.live AND c.rate_limit IS NOT NULL THEN c.rate_limit ELSE b.rate_limit END
           AS rate_limit,
       CASE WHEN o.live AND c.rate_limit IS NOT NULL THEN c.rate_period ELSE b.rate_period END
           AS rate_period,
       CASE WHEN o.live AND c.rate_burst IS NOT NULL THEN c.rate_burst ELSE b.rate_burst END
           AS rate_burst,
       o.live AS overridden,
       c.max_active, c.rate_limit, c.rate_period, c.rate_burst, c.override_set_at,
       c.override_expires_at,
       a.units + hd.units AS active_units,
       rd.ready,
       rd.ready > %(sample)s AS capped,
       ARRAY(SELECT DISTINCT u.q
             FROM unnest(COALESCE(a.queues, '{}') || COALESCE(rw.queues, '{}')) AS u(q)
             WHERE u.q IS NOT NULL ORDER BY u.q) AS queues,
       -- Held back now: every ready job of a budget that is full, out of starts in its
       -- rate's window or its burst's, or backed off (what the claim passes over).
       CASE WHEN (eff.max_active IS NOT NULL AND a.units + hd.units >= eff.max_active)
                 OR nx.next_in > 0 OR bo.until IS NOT NULL
            THEN LEAST(rd.ready, %(sample)s) ELSE 0 END AS blocked_ready,
       clock_timestamp() + make_interval(secs => nx.next_in) AS next_start_at,
       ARRAY(SELECT bq.queue FROM workhorse.budget_queues bq
             WHERE bq.budget = n.name ORDER BY bq.budget, bq.queue
             LIMIT %(sample)s) AS used_by,
       bo.until AS backed_off_until, bo.by_job AS backed_off_by,
       hd.units AS held_units, eff.max_active AS effective_max_active
FROM names n
LEFT JOIN workhorse.budgets b ON b.name = n.name
LEFT JOIN workhorse.budget_controls c ON c.name = n.name
LEFT JOIN workhorse.backoffs bo
    ON bo.scope = 'budget' AND bo.name = n.name AND bo.ckey = ''
   AND bo.until > clock_timestamp()
-- The same row, ended or not: an adaptive budget's halving outlives its backoff.
LEFT JOIN workhorse.backoffs ba
    ON ba.scope = 'budget' AND ba.name = n.name AND ba.ckey = ''
CROSS JOIN LATERAL (
    SELECT c.name IS NOT NULL
           AND (c.override_expires_at IS NULL OR c.override_expires_at > clock_timestamp())
           AS live
) AS o
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(j.cost), 0)::bigint AS units,
           array_agg(DISTINCT j.queue) AS queues
    FROM workhorse.jobs j
    WHERE j.budget = n.name AND j.status = 'active' AND j.budget IS NOT NULL
      AND j.lease_until > clock_timestamp()
) AS a
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(h.units), 0)::bigint AS units
    FROM workhorse.budget_holds h
    WHERE h.budget = n.name AND h.lease_until > clock_timestamp()
) AS hd
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS ready
    FROM (SELECT 1 FROM workhorse.jobs j
          WHERE j.budget = n.name AND j.status = 'ready' AND j.budget IS NOT NULL
          -- The index's order, so that the planner walks it (a LIMIT alone made it pick a
          -- sequential scan it expected to stop early: it reads everything for a rare name).
          ORDER BY j.budget, j.queue, j.rank, j.id
          LIMIT %(sample)s + 1) AS s
) AS rd
CROSS JOIN LATERAL (
    WITH RECURSIVE walk AS (
        (SELECT j.queue, 1 AS k FROM workhorse.jobs j
         WHERE j.budget = n.name AND j.status = 'ready' AND j.budget IS NOT NULL
         ORDER BY j.budget, j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM workhorse.jobs j
                WHERE j.budget = n.name AND j.status = 'ready' AND j.budget IS NOT NULL
                  AND j.queue > w.queue
                ORDER BY j.budget, j.queue LIMIT 1), w.k + 1
        FROM walk w
        WHERE w.queue IS NOT NULL AND w.k < %(sample)s
    )
    SELECT array_agg(w.queue) AS queues FROM walk w
) AS rw
CROSS JOIN LATERAL (
    SELECT CASE WHEN o.live AND c.max_active IS NOT NULL THEN c.max_active
                ELSE b.max_active END AS max_active,
           CASE WHEN o.live AND c.rate_limit IS NOT NULL THEN c.rate_limit
                ELSE b.rate_limit END AS rate,
           CASE WHEN o.live AND c.rate_limit IS NOT NULL THEN c.rate_period
                ELSE b.rate_period END AS period,
           CASE WHEN o.live AND c.rate_burst IS NOT NULL THEN c.rate_burst
                ELSE b.rate_burst END AS burst
) AS lim
CROSS JOIN LATERAL (
    SELECT workhorse._adaptive_max_v1(lim.max_active,
                                      CASE WHEN b.adaptive THEN ba.adaptive_max END, ba.until,
                                      ba.retry_after, clock_timestamp()) AS max_active
) AS eff
CROSS JOIN LATERAL (
    -- In how many seconds the budget's rate lets one more unit start (0: now; NULL: no rate),
    -- both windows counted as the claim counts them.
    SELECT CASE WHEN lim.rate IS NULL THEN NULL ELSE GREATEST(
               workhorse._budget_next_start_v1(n.name, 0::smallint, lim.period, lim.rate, 1,
                                               clock_timestamp()),
               CASE WHEN lim.burst IS NULL THEN 0 ELSE workhorse._budget_next_start_v1(
                   n.name, 1::smallint,
                   floor(lim.period * LEAST(lim.burst, lim.rate) / lim.rate * 1000) / 1000,
                   LEAST(lim.burst, lim.rate), 1, clock_timestamp()) END) END AS next_in
) AS nx
ORDER BY b.namespace NULLS LAST, n.name
