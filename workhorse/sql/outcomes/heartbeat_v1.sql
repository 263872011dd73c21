-- Extend leases in one statement. An expired lease is not renewed: its capacity may already be
-- in use by another claim. Returns the ids whose lease was extended, and whether an operator
-- asked to cancel each (the worker then stops the handler if it can). Jobs are looked up by id
-- with `status IN ('active', '')` (see fail_v1.sql).
--
-- The queues' admission locks are taken (shared, in sorted order) before the lease is checked:
-- otherwise a governed claim could count the lease as expired and admit a replacement while this
-- renewal is uncommitted, and the renewal's commit would bring the old lease back to life (two
-- live jobs at a limit of one). With the lock, a claim either sees the renewal committed, or ran
-- first, and then the lease has expired by the time it is checked here and is refused.
-- Feature level 1: a job of a higher level is left alone, as if its fence were stale.
CREATE FUNCTION workhorse.heartbeat_v1(p_ids bigint[], p_fences bigint[], p_leases double precision[])
RETURNS TABLE (id bigint, cancel_requested boolean)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN
        SELECT DISTINCT j.queue FROM workhorse.jobs j WHERE j.id = ANY(p_ids) ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock_shared(workhorse._admission_lock_id_v1(v_queue));
    END LOOP;
    RETURN QUERY
        UPDATE workhorse.jobs j
        SET lease_until = clock_timestamp() + make_interval(secs => b.lease)
        FROM unnest(p_ids, p_fences, p_leases) AS b(id, fence, lease)
        WHERE j.id = b.id AND j.fence = b.fence AND j.status IN ('active', '')
          AND j.feature_level <= 1  -- this function's feature level
          AND j.lease_until > clock_timestamp()
        RETURNING j.id, j.cancel_requested_at IS NOT NULL;
END
$$;
