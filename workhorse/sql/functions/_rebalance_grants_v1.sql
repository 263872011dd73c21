-- Share a FIFO queue's `max_active` out again among the claimers that hold capacity grants on
-- it, and give `p_holder` its share (a grant row is created for it when it has none). Called by
-- claim_v2 only, under the queue's admission lock held exclusively, after the successes that
-- ride on the claim were recorded.
--
-- A grant is `units` of the queue's max_active that only its holder admits into, under the
-- admission lock held in shared mode, so that claimers of one queue do not wait for each other.
-- What keeps the queue-wide limit exact (invariant 1): every unexpired grant's unused units
-- (units less its unexpired active jobs, when positive) count as active for every claim that
-- holds the lock exclusively, so that
--     active jobs + unused units of unexpired grants <= max_active
-- holds after every statement: a claim inside its grant only turns unused units into active
-- jobs; a holder only lowers its own units without the exclusive lock; and this function, which
-- alone raises them, sets every grant of the queue so that the sum fits, restamping each with
-- the version of the rules it was computed under (_grant_stamp_v1). A grant whose stamp is not
-- the one in force admits nothing (a sync, pause or override changed the rules, under the
-- exclusive lock, or an override ran out) until it is rebalanced.
--
-- Targets: max_active water-filled over the holders' `wanted` (their active jobs plus the
-- places they asked to fill), so that a holder that wants less leaves the rest to the others.
-- Other holders are lowered toward their target, never raised (they raise themselves when they
-- claim), and their active jobs count whatever their units (running jobs are never preempted,
-- only no more are admitted into a grant its jobs exceed); the caller
-- gets its target as far as the units left allow. Expired grants are deleted: their jobs that
-- still hold unexpired leases count as outside every grant.
CREATE FUNCTION workhorse._rebalance_grants_v1(
    p_queue text, p_holder text, p_max integer, p_stamp text, p_asking integer,
    p_lease double precision, p_now timestamptz, OUT grant_id bigint, OUT units integer, OUT active integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_active integer[];
    v_units integer[];
    v_wanted integer[];
    v_mine boolean[];
    v_targets integer[];
    v_total integer;
    v_outside integer;
    v_others integer := 0;
    v_me integer;
    v_new integer[];
BEGIN
    DELETE FROM workhorse.capacity_grants g
    WHERE g.queue = p_queue AND g.expires_at <= p_now AND g.holder <> p_holder;
    INSERT INTO workhorse.capacity_grants AS g (queue, holder, units, wanted, stamp,
                                                 expires_at, rebalanced_at)
    VALUES (p_queue, p_holder, 0, 0, p_stamp, p_now, p_now)
    ON CONFLICT (queue, holder) DO NOTHING;

    SELECT COALESCE(sum(c.n), 0)::integer INTO v_total
    FROM (SELECT count(*) AS n FROM workhorse.jobs j
          WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until > p_now) AS c;
    SELECT array_agg(g.id ORDER BY g.id),
           array_agg(COALESCE(c.n, 0) ORDER BY g.id),
           -- The caller's own grant may have expired: it has no units left to keep.
           array_agg(CASE WHEN g.expires_at <= p_now THEN 0 ELSE g.units END ORDER BY g.id),
           array_agg(CASE WHEN g.holder = p_holder THEN COALESCE(c.n, 0) + GREATEST(p_asking, 0)
                          ELSE g.wanted END ORDER BY g.id),
           array_agg(g.holder = p_holder ORDER BY g.id)
    INTO v_ids, v_active, v_units, v_wanted, v_mine
    FROM workhorse.capacity_grants g
    LEFT JOIN LATERAL (
        SELECT count(*)::integer AS n FROM workhorse.jobs j
        WHERE j.grant_id = g.id AND j.status = 'active' AND j.lease_until > p_now
    ) AS c ON true
    WHERE g.queue = p_queue;

    v_targets := workhorse._grant_targets_v1(p_max, v_wanted);
    v_new := v_units;
    v_outside := v_total;
    FOR i IN 1..cardinality(v_ids) LOOP
        v_outside := v_outside - v_active[i];
        IF v_mine[i] THEN
            v_me := i;
        ELSE
            -- Lowered toward its target, never raised; it occupies at least its active jobs.
            v_new[i] := LEAST(v_units[i], v_targets[i]);
            v_others := v_others + GREATEST(v_active[i], v_new[i]);
        END IF;
    END LOOP;
    -- Ours: our target, as far as what the jobs outside any grant and the others leave allows.
    -- It may be below our own active jobs (a lowered limit): they run on, and we admit nothing
    -- until they are below it.
    v_new[v_me] := GREATEST(0, LEAST(v_targets[v_me], p_max - v_outside - v_others));

    UPDATE workhorse.capacity_grants g
    SET units = n.units,
        stamp = p_stamp,
        wanted = CASE WHEN g.holder = p_holder THEN v_wanted[v_me] ELSE g.wanted END,
        expires_at = CASE WHEN g.holder = p_holder THEN p_now + make_interval(secs => p_lease)
                          ELSE g.expires_at END,
        rebalanced_at = CASE WHEN g.holder = p_holder THEN p_now ELSE g.rebalanced_at END
    FROM unnest(v_ids, v_new) AS n(id, units)
    WHERE g.id = n.id AND (g.units, g.stamp, g.holder = p_holder)
                          IS DISTINCT FROM (n.units, p_stamp, false);
    grant_id := v_ids[v_me];
    units := v_new[v_me];
    active := v_active[v_me];
END
$$;
