-- Claim up to p_limit jobs from one queue under its policy, if it has one.
-- One queue per call: a governed claim holds its queue's lock until commit, and taking several
-- queues' locks in caller-chosen orders could deadlock. Call it in autocommit: each claim commits
-- alone, which is what releases the lock.
-- Plans are pinned to the indexes instead of re-planned on every call: a cached generic plan
-- made while the tables were empty is still an index plan, and the hint drain is an index
-- scan, which marks the hints earlier claims deleted as dead in the index.
CREATE FUNCTION workhorse.claim_v1(p_queue text, p_limit integer, p_lease double precision)
RETURNS SETOF workhorse.jobs
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_policy workhorse.policies;
    v_governed boolean;
    v_now timestamptz;
    v_active integer;
    v_room integer;
    v_key_names text[];
    v_key_counts integer[];
    v_saturated text[];
    v_examined text[];
    v_ids bigint[];
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RETURN;
    END IF;

    -- Unlocked peek, to choose the lock mode. A governed claim must never first hold the lock
    -- shared and then upgrade: two claimers doing that would deadlock.
    v_governed := EXISTS (SELECT 1 FROM workhorse.policies WHERE queue = p_queue);
    IF v_governed THEN
        PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
    ELSE
        PERFORM pg_advisory_xact_lock_shared(workhorse._admission_lock_id_v1(p_queue));
    END IF;

    -- Each statement of a VOLATILE function takes a fresh snapshot: this read, and every count
    -- below, sees every claim that committed before we got the lock.
    SELECT * INTO v_policy FROM workhorse.policies WHERE queue = p_queue;
    IF FOUND AND NOT v_governed THEN
        -- A policy was installed while we waited in shared mode; our caller retries on the hint.
        RETURN;
    END IF;
    IF workhorse._unknown_to_v1_v1(p_queue) THEN
        -- Rate-limited, paused or overridden: limits this version cannot enforce (invariant 5).
        RAISE WARNING 'workhorse: claim_v1 admits nothing from queue % (it uses a rate limit, a pause or an override); upgrade this worker', p_queue;
        RETURN;
    END IF;

    v_now := clock_timestamp();
    PERFORM workhorse._prepare_queue_v1(p_queue, v_now);

    IF v_policy.queue IS NULL THEN
        v_ids := workhorse._queue_order_candidates_v1(p_queue, p_limit, v_now);
        RETURN QUERY SELECT * FROM workhorse._activate_v1(v_ids, p_lease, v_now);
        RETURN;
    END IF;

    -- Capacity in use: unexpired leases only, so a dead worker's share is back once its lease ends.
    -- At most max_active rows (or active/per-key keys) are read here.
    SELECT COALESCE(sum(a.n), 0)::integer,
           array_agg(a.ckey) FILTER (WHERE a.ckey <> ''),
           array_agg(a.n) FILTER (WHERE a.ckey <> ''),
           array_agg(a.ckey) FILTER (WHERE a.ckey <> '' AND a.n >= v_policy.max_active_per_key)
    INTO v_active, v_key_names, v_key_counts, v_saturated
    FROM (
        SELECT j.ckey, count(*)::integer AS n
        FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until > v_now
        GROUP BY j.ckey
    ) AS a;

    v_room := CASE WHEN v_policy.max_active IS NULL THEN p_limit
                   ELSE LEAST(p_limit, v_policy.max_active - v_active) END;
    IF v_room <= 0 THEN
        RETURN;
    END IF;

    IF v_policy.max_active_per_key IS NULL THEN
        v_ids := workhorse._queue_order_candidates_v1(p_queue, v_room, v_now);
        RETURN QUERY SELECT * FROM workhorse._activate_v1(v_ids, p_lease, v_now);
        RETURN;
    END IF;

    -- Per-key limits: bring the heads up to date with what was enqueued since the last claim.
    WITH drained AS (
        DELETE FROM workhorse.key_hints WHERE queue = p_queue RETURNING ckey
    )
    SELECT array_agg(DISTINCT ckey) INTO v_examined FROM drained;
    PERFORM workhorse._refresh_heads_v1(p_queue, v_examined);

    -- A job among the best v_room admissible ones has at most v_room - 1 other unsaturated keys'
    -- heads ahead of its own key's head, so the first v_room unsaturated heads are enough; walking
    -- them skips at most the saturated keys, whatever their backlog.
    --
    -- One statement chooses, activates, and moves the heads on: each examined key's lateral reads
    -- one row more than the key may take, so its next head is already in hand (or the key is
    -- known to be empty) without a second probe per key.
    RETURN QUERY
    WITH active_keys AS (
        SELECT * FROM unnest(v_key_names, v_key_counts) AS a(ckey, n)
    ), heads AS (
        SELECT h.ckey, h.head_rank, h.head_id,
               LEAST(v_room, v_policy.max_active_per_key
                     - COALESCE((SELECT a.n FROM active_keys a WHERE a.ckey = h.ckey), 0))
                   AS allowance
        FROM workhorse.key_heads h
        WHERE h.queue = p_queue
          AND NOT (h.ckey = ANY(COALESCE(v_saturated, '{}')))
        ORDER BY h.queue, h.head_rank, h.head_id
        LIMIT v_room
    ), keyed AS (
        SELECT c.id, c.rank, c.ckey
        FROM heads
        CROSS JOIN LATERAL (
            SELECT j.id, j.rank, j.ckey FROM workhorse.jobs j
            WHERE j.queue = p_queue AND j.ckey = heads.ckey AND j.status = 'ready'
            ORDER BY j.queue, j.ckey, j.rank, j.id
            LIMIT heads.allowance + 1
        ) AS c
    ), keyless AS (
        SELECT j.id, j.rank, j.ckey FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.ckey = '' AND j.status = 'ready'
        ORDER BY j.queue, j.ckey, j.rank, j.id
        LIMIT v_room
    ), expired AS (
        -- Expired leases are claimable again. Only those their key still has room for may take
        -- one of the v_room places, or a saturated key's expired job would hide every other
        -- expired job behind it. (They were active, so there are few to number.)
        SELECT e.id, e.rank, e.ckey
        FROM (
            SELECT j.id, j.rank, j.ckey,
                   row_number() OVER (PARTITION BY j.ckey ORDER BY j.rank, j.id) AS nth
            FROM workhorse.jobs j
            WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= v_now
        ) AS e
        LEFT JOIN active_keys a ON a.ckey = e.ckey
        WHERE e.ckey = '' OR e.nth <= v_policy.max_active_per_key - COALESCE(a.n, 0)
        ORDER BY e.rank, e.id
        LIMIT v_room
    ), candidates AS (
        SELECT u.*, row_number() OVER (PARTITION BY u.ckey ORDER BY u.rank, u.id) AS nth
        FROM (SELECT * FROM keyed UNION ALL SELECT * FROM keyless UNION ALL SELECT * FROM expired) u
    ), admitted AS (
        SELECT c.id FROM candidates c
        LEFT JOIN active_keys a ON a.ckey = c.ckey
        WHERE c.ckey = '' OR c.nth <= v_policy.max_active_per_key - COALESCE(a.n, 0)
        ORDER BY c.rank, c.id
        LIMIT v_room
    ), activated AS (
        SELECT * FROM workhorse._activate_v1(ARRAY(SELECT a.id FROM admitted a), p_lease, v_now)
    ), next_heads AS (
        -- A key's first row not admitted now is its new head; none means the key ran dry
        -- (it had fewer ready jobs than allowance + 1).
        SELECT heads.ckey, heads.head_rank, heads.head_id, nxt.rank, nxt.id
        FROM heads
        LEFT JOIN (
            SELECT DISTINCT ON (k.ckey) k.ckey, k.rank, k.id
            FROM keyed k
            LEFT JOIN admitted a ON a.id = k.id
            WHERE a.id IS NULL
            ORDER BY k.ckey, k.rank, k.id
        ) AS nxt ON nxt.ckey = heads.ckey
    ), moved AS (
        UPDATE workhorse.key_heads kh
        SET head_rank = nh.rank, head_id = nh.id
        FROM next_heads nh
        WHERE kh.queue = p_queue AND kh.ckey = nh.ckey AND nh.id IS NOT NULL
          AND (nh.head_rank, nh.head_id) IS DISTINCT FROM (nh.rank, nh.id)
    ), emptied AS (
        DELETE FROM workhorse.key_heads kh
        USING next_heads nh
        WHERE kh.queue = p_queue AND kh.ckey = nh.ckey AND nh.id IS NULL
    )
    SELECT activated.* FROM activated;
END
$$;
