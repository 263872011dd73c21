-- Where a claimer stands in its grant on a FIFO queue, read without the admission lock by
-- claim_v2 to choose the lock's mode: `in_grant` when the holder has an unexpired grant stamped
-- with `p_stamp` (the rules in force, whose limit is `p_max`) and need not grow it now, so its claim may run inside it,
-- holding the lock in shared mode; otherwise the claim takes the lock exclusively and calls
-- _rebalance_grants_v1. `target` is the holder's fair share (_grant_targets_v1 over the
-- unexpired grants' wants, its own being its active jobs, less the `p_riding` successes about to
-- be recorded, plus the `p_places` it could still fill), and `waiting` says that another holder
-- wants more than it has
-- (so a holder above its target should give units back). Nothing read here decides admission:
-- the claim checks the grant again under the lock.
--
-- A grant is grown when this claim asks (`p_asking`) for more than the grant's room, the holder
-- is below its target, and units are to be had: some are unassigned (at once), or another holder is above its target
-- (at most once every 50 ms per holder, so that a holder that cannot grow yet, because the
-- others' jobs still run, does not take the lock exclusively at every claim).
CREATE FUNCTION workhorse._grant_standing_v1(
    p_queue text, p_holder text, p_max integer, p_stamp text, p_asking integer,
    p_places integer, p_riding integer, p_now timestamptz,
    OUT grant_id bigint, OUT units integer, OUT target integer, OUT waiting boolean,
    OUT in_grant boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_id bigint;
    v_rebalanced_at timestamptz;
    v_active integer;
    v_ids bigint[];
    v_units integer[];
    v_wanted integer[];
    v_targets integer[];
    v_me integer;
    v_unassigned boolean;
    v_above boolean;
BEGIN
    in_grant := false;
    waiting := false;
    SELECT g.id, g.units, g.rebalanced_at INTO v_id, units, v_rebalanced_at
    FROM workhorse.capacity_grants g
    WHERE g.queue = p_queue AND g.holder = p_holder AND g.stamp = p_stamp
      AND g.expires_at > p_now;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT count(*)::integer INTO v_active
    FROM workhorse.jobs j
    WHERE j.grant_id = v_id AND j.status = 'active' AND j.lease_until > p_now;
    v_active := GREATEST(v_active - GREATEST(p_riding, 0), 0);

    SELECT array_agg(g.id ORDER BY g.id), array_agg(g.units ORDER BY g.id),
           array_agg(CASE WHEN g.holder = p_holder THEN v_active + GREATEST(p_places, 0)
                          ELSE g.wanted END ORDER BY g.id),
           bool_or(g.holder <> p_holder AND g.wanted > g.units)
    INTO v_ids, v_units, v_wanted, waiting
    FROM workhorse.capacity_grants g
    WHERE g.queue = p_queue AND g.stamp = p_stamp AND g.expires_at > p_now;
    v_targets := workhorse._grant_targets_v1(p_max, v_wanted);
    v_me := array_position(v_ids, v_id);
    grant_id := v_id;
    target := v_targets[v_me];
    SELECT (SELECT sum(u) FROM unnest(v_units) AS u) < p_max,
           COALESCE(bool_or(t.units > t.target AND t.id <> v_id), false)
    INTO v_unassigned, v_above
    FROM unnest(v_ids, v_units, v_targets) AS t(id, units, target);
    in_grant := NOT (units - v_active < p_asking AND units < target
                     AND (v_unassigned OR (v_above AND v_rebalanced_at
                                                       <= p_now - interval '50 milliseconds')));
END
$$;
