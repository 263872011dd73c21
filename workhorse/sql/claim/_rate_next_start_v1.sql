-- Seconds from p_now until this scope may start one more job under "p_limit per p_period": the
-- moment enough of its oldest buckets leave the window that fewer than p_limit remain. 0 when a
-- start is allowed now.
CREATE FUNCTION workhorse._rate_next_start_v1(
    p_queue text, p_ckey text, p_limit integer, p_period double precision, p_now timestamptz)
RETURNS double precision
LANGUAGE sql VOLATILE
AS $$
    SELECT COALESCE(GREATEST(EXTRACT(epoch FROM (
               min(b.bucket_end) + make_interval(secs => p_period) - p_now))::double precision,
               0.0), 0.0)
    FROM (
        SELECT s.bucket_end,
               COALESCE(sum(s.n) OVER (ORDER BY s.bucket_end DESC
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                   AS newer
        FROM workhorse.rate_starts s
        WHERE s.queue = p_queue AND s.ckey = p_ckey
          AND s.bucket_end > p_now - make_interval(secs => p_period)
    ) AS b
    WHERE b.newer <= p_limit - 1
      AND (SELECT COALESCE(sum(s.n), 0) FROM workhorse.rate_starts s
           WHERE s.queue = p_queue AND s.ckey = p_ckey
             AND s.bucket_end > p_now - make_interval(secs => p_period)) >= p_limit
$$;
