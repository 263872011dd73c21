-- In how many seconds a budget's window (`p_span`, `p_window` as for _budget_starts_used_v1)
-- lets `p_need` more units start, 0 when it does now: the moment enough of the newest buckets
-- fall out of the window. Read under the budget's lock, so it is exact for the claim that asks.
CREATE FUNCTION workhorse._budget_next_start_v1(
    p_budget text, p_span smallint, p_window double precision, p_limit integer,
    p_need integer, p_now timestamptz)
RETURNS double precision
LANGUAGE sql VOLATILE
AS $$
    SELECT COALESCE(GREATEST(EXTRACT(epoch FROM (
               min(b.bucket_end) + make_interval(secs => p_window) - p_now))::double precision,
               0.0), 0.0)
    FROM (
        SELECT s.bucket_end,
               COALESCE(sum(s.n) OVER (ORDER BY s.bucket_end DESC
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                   AS newer
        FROM workhorse.budget_starts s
        WHERE s.budget = p_budget AND s.span = p_span
          AND s.bucket_end > p_now - make_interval(secs => p_window)
    ) AS b
    WHERE b.newer <= p_limit - p_need
      AND workhorse._budget_starts_used_v1(p_budget, p_span, p_window, p_now) > p_limit - p_need
$$;
