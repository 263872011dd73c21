-- Renew the leases of a process's holds (docs/design.md "Holds"): each to `p_leases` seconds
-- from now, only while it has not run out (a hold whose lease ended may have had its units
-- taken by a claim: it is lost, and its row stays for housekeeping). Returns the holds renewed;
-- one missing from the result is lost.
CREATE FUNCTION workhorse.renew_holds_v1(p_ids bigint[], p_leases double precision[])
RETURNS TABLE (hold_id bigint, lease_until timestamptz)
LANGUAGE sql VOLATILE
AS $$
    UPDATE workhorse.budget_holds h
    SET lease_until = clock_timestamp() + make_interval(secs => r.lease)
    FROM unnest(p_ids, p_leases) AS r(id, lease)
    WHERE h.id = r.id AND h.lease_until > clock_timestamp()
      AND r.lease > 0 AND r.lease <= 86400
    RETURNING h.id, h.lease_until
$$;
