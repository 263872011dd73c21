-- The rate units a queue (p_ckey '') or one of its keys started in its burst's window that ends
-- now (p_window = P*B/N): burst_starts' buckets, counted as _rate_used_v1 counts rate_starts'.
CREATE FUNCTION workhorse._burst_used_v1(
    p_queue text, p_ckey text, p_window double precision, p_now timestamptz)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT COALESCE(sum(s.n), 0)::bigint
    FROM workhorse.burst_starts s
    WHERE s.queue = p_queue AND s.ckey = p_ckey
      AND s.bucket_end > p_now - make_interval(secs => p_window)
$$;
