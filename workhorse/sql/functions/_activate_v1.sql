-- Activate chosen jobs: a new fence from the sequence, one more attempt, a lease from the clock
-- (not now(): that is the transaction start, before any wait for the lock).
CREATE FUNCTION workhorse._activate_v1(p_ids bigint[], p_lease double precision, p_now timestamptz)
RETURNS SETOF workhorse.jobs
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN QUERY
        UPDATE workhorse.jobs j
        SET status = 'active',
            attempts = j.attempts + 1,
            fence = nextval('workhorse.fence_seq'),
            lease_until = clock_timestamp() + make_interval(secs => p_lease),
            started_at = clock_timestamp()
        WHERE j.id = ANY(p_ids)
          AND (j.status = 'ready' OR (j.status = 'active' AND j.lease_until <= p_now))
        RETURNING j.*;
END
$$;
