-- fail_v1, and a resend of a failure already recorded under its fence (the connection broke after
-- the commit, before the reply) returns the status it ended in instead of NULL (stale): the row
-- still has that fence (only a claim changes it) and the very error document sent.
CREATE FUNCTION workhorse.fail_v2(
    p_id bigint, p_fence bigint, p_error text, p_retry_at timestamptz, p_retention text)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_status text;
BEGIN
    v_status := workhorse.fail_v1(p_id, p_fence, p_error, p_retry_at, p_retention);
    IF v_status IS NULL THEN
        SELECT j.status INTO v_status FROM workhorse.jobs j
        WHERE j.id = p_id AND j.fence = p_fence AND j.status <> 'active'
          AND j.error = p_error::jsonb;
    END IF;
    RETURN v_status;
END
$$;
