-- Where a failed attempt leaves its job: canceled (its cancel was requested while it ran),
-- scheduled (a retry, while attempts remain), held (its task says so) or failed.
CREATE FUNCTION workhorse._failed_status_v1(
    p_cancel_requested_at timestamptz, p_attempts integer, p_max_attempts integer,
    p_on_failure text, p_retry_at timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_cancel_requested_at IS NOT NULL THEN 'canceled'
        WHEN p_retry_at IS NOT NULL AND p_attempts < p_max_attempts THEN 'scheduled'
        WHEN p_on_failure = 'hold' THEN 'held'
        ELSE 'failed' END
$$;
