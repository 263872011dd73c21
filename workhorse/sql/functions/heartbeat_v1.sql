-- Extend leases in one statement. An expired lease is not renewed: its capacity may already be
-- in use by another claim. Returns the ids whose lease was extended.
CREATE FUNCTION workhorse.heartbeat_v1(p_ids bigint[], p_fences bigint[], p_leases double precision[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN QUERY
        UPDATE workhorse.jobs j
        SET lease_until = clock_timestamp() + make_interval(secs => b.lease)
        FROM unnest(p_ids, p_fences, p_leases) AS b(id, fence, lease)
        WHERE j.id = b.id AND j.fence = b.fence AND j.status = 'active'
          AND j.lease_until > clock_timestamp()
        RETURNING j.id;
END
$$;
