-- The rate units a budget started in the window that ends now: `p_span` 0 is the rate's window
-- (p_window = P), 1 the burst's (p_window = P*B/N). Buckets are stored at their end, so a start
-- counts until its bucket's end is a whole window ago (exact, and at most 1% of the window late),
-- as _rate_used_v1 counts a queue's.
CREATE FUNCTION workhorse._budget_starts_used_v1(
    p_budget text, p_span smallint, p_window double precision, p_now timestamptz)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT COALESCE(sum(s.n), 0)::bigint
    FROM workhorse.budget_starts s
    WHERE s.budget = p_budget AND s.span = p_span
      AND s.bucket_end > p_now - make_interval(secs => p_window)
$$;
