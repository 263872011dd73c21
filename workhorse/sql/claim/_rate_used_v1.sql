-- Starts of one scope (ckey '' = the whole queue) that may lie within the period ending at p_now:
-- every bucket that ends after p_now - period (see rate_starts). At most ~101 rows.
CREATE FUNCTION workhorse._rate_used_v1(
    p_queue text, p_ckey text, p_period double precision, p_now timestamptz)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT COALESCE(sum(s.n), 0)::bigint
    FROM workhorse.rate_starts s
    WHERE s.queue = p_queue AND s.ckey = p_ckey
      AND s.bucket_end > p_now - make_interval(secs => p_period)
$$;
