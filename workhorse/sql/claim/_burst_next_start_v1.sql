-- In how many seconds a queue's (p_ckey '') or key's burst window lets one more unit start, 0
-- when it does now: the moment enough of the newest buckets fall out of the window.
CREATE FUNCTION workhorse._burst_next_start_v1(
    p_queue text, p_ckey text, p_burst integer, p_window double precision, p_now timestamptz)
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
        FROM workhorse.burst_starts s
        WHERE s.queue = p_queue AND s.ckey = p_ckey
          AND s.bucket_end > p_now - make_interval(secs => p_window)
    ) AS b
    WHERE b.newer <= p_burst - 1
      AND workhorse._burst_used_v1(p_queue, p_ckey, p_window, p_now) >= p_burst
$$;
