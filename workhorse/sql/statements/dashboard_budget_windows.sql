-- For each budget with a rate in force (the names with their N, period P and burst B, as health
-- gives them): the starts counted in its rate window (span 0 of budget_starts: every bucket that
-- ends after now - P) and the seconds until that window allows one more start (0: now), and the
-- same for its burst window P*B/N (span 1; whole milliseconds, rounded down; B above N counts as
-- N, as the claim reads it), NULL without a burst. A start becomes allowed when enough of the
-- oldest buckets leave the window that fewer than the limit remain (as _rate_next_start_v1
-- computes it for a queue). Bounded: each span's live buckets (~101 rows) through the primary key
-- (budget, span, bucket_end).
WITH now AS (SELECT clock_timestamp() AS t),
wanted AS (
    SELECT w.name, w.n, w.period, w.burst,
           CASE WHEN w.burst IS NULL THEN NULL
                ELSE floor(w.period * 1000 * LEAST(w.burst, w.n) / w.n) / 1000.0 END AS burst_window
    FROM unnest(%(names)s::text[], %(n)s::integer[], %(period)s::double precision[],
                %(burst)s::integer[]) AS w(name, n, period, burst)
)
SELECT w.name, r.used, r.next_start, b.used, b.next_start
FROM wanted w
CROSS JOIN now
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(x.n), 0)::bigint AS used,
           CASE WHEN COALESCE(sum(x.n), 0) < w.n THEN 0.0
                ELSE GREATEST(EXTRACT(epoch FROM (
                         min(x.bucket_end) FILTER (WHERE x.newer <= w.n - 1)
                         + make_interval(secs => w.period) - now.t))::double precision, 0.0)
           END AS next_start
    FROM (SELECT s.bucket_end, s.n,
                 COALESCE(sum(s.n) OVER (ORDER BY s.bucket_end DESC
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                     AS newer
          FROM workhorse.budget_starts s
          WHERE s.budget = w.name AND s.span = 0
            AND s.bucket_end > now.t - make_interval(secs => w.period)) AS x
) AS r
CROSS JOIN LATERAL (
    SELECT CASE WHEN w.burst IS NULL THEN NULL ELSE COALESCE(sum(x.n), 0)::bigint END AS used,
           CASE WHEN w.burst IS NULL THEN NULL
                WHEN COALESCE(sum(x.n), 0) < LEAST(w.burst, w.n) THEN 0.0
                ELSE GREATEST(EXTRACT(epoch FROM (
                         min(x.bucket_end) FILTER (WHERE x.newer <= LEAST(w.burst, w.n) - 1)
                         + make_interval(secs => w.burst_window) - now.t))::double precision,
                         0.0)
           END AS next_start
    FROM (SELECT s.bucket_end, s.n,
                 COALESCE(sum(s.n) OVER (ORDER BY s.bucket_end DESC
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                     AS newer
          FROM workhorse.budget_starts s
          WHERE w.burst IS NOT NULL AND s.budget = w.name AND s.span = 1
            AND s.bucket_end > now.t - make_interval(secs => w.burst_window)) AS x
) AS b
ORDER BY w.name
