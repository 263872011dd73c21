-- For each budget with a rate in force (the names with their N, period P and burst B, as health
-- gives them): the starts counted in its rate window (span 0 of budget_starts) and the seconds
-- until that window lets one more unit start (0: now), and the same for its burst window P*B/N
-- (span 1; whole milliseconds, rounded down; B above N counts as N, as the claim reads it), NULL
-- without a burst. The claim's own functions count them (_budget_starts_used_v1,
-- _budget_next_start_v1), so the page says what the claim sees. Bounded: each span's live
-- buckets (~101 rows) through the primary key (budget, span, bucket_end).
WITH now AS (SELECT clock_timestamp() AS t),
wanted AS (
    SELECT w.name, w.n, w.period, LEAST(w.burst, w.n) AS burst,
           CASE WHEN w.burst IS NULL THEN NULL
                ELSE floor(w.period * LEAST(w.burst, w.n) / w.n * 1000) / 1000 END AS burst_window
    FROM unnest(%(names)s::text[], %(n)s::integer[], %(period)s::double precision[],
                %(burst)s::integer[]) AS w(name, n, period, burst)
)
SELECT w.name,
       workhorse._budget_starts_used_v1(w.name, 0::smallint, w.period, now.t),
       workhorse._budget_next_start_v1(w.name, 0::smallint, w.period, w.n, 1, now.t),
       CASE WHEN w.burst IS NOT NULL
            THEN workhorse._budget_starts_used_v1(w.name, 1::smallint, w.burst_window, now.t) END,
       CASE WHEN w.burst IS NOT NULL
            THEN workhorse._budget_next_start_v1(w.name, 1::smallint, w.burst_window, w.burst,
                                                 1, now.t) END
FROM wanted w
CROSS JOIN now
ORDER BY w.name
