-- The admission functions. Versioned (_v1) so that old workers keep calling the statement they know
-- across an upgrade; a new behaviour gets a new version beside the old one.

-- Two 64-bit advisory locks per queue, so unrelated queues practically never collide:
--   admission lock: fast-path claims share it; governed claims and policy changes hold it exclusively,
--     so an install waits for in-flight fast-path claims and then counts them.
--   enqueue gate:   enqueues share it; an install that turns per-key limits on holds it exclusively,
--     so no enqueue that read "no policy" (and wrote no key hint) is still in flight when the heads
--     are rebuilt.
CREATE FUNCTION workhorse.admission_lock_id(p_queue text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT hashtextextended(p_queue, 7046) $$;

CREATE FUNCTION workhorse.enqueue_gate_id(p_queue text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT hashtextextended(p_queue, 7047) $$;

-- "These keys may have a new head." Only per-key-governed queues keep heads.
CREATE FUNCTION workhorse._hint_keys(p_queue text, p_keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_keys IS NULL OR cardinality(p_keys) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO workhorse.key_hints (queue, ckey)
    SELECT p_queue, k
    FROM (SELECT DISTINCT k FROM unnest(p_keys) AS k WHERE k <> '') AS keys
    WHERE EXISTS (SELECT 1 FROM workhorse.policies p
                  WHERE p.queue = p_queue AND p.max_active_per_key IS NOT NULL);
END
$$;

-- Set each key's head to its best ready job, or drop the head when the key has none.
CREATE FUNCTION workhorse._refresh_heads(p_queue text, p_keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_keys IS NULL OR cardinality(p_keys) = 0 THEN
        RETURN;
    END IF;
    WITH keys AS (
        SELECT DISTINCT k AS ckey FROM unnest(p_keys) AS k WHERE k <> ''
    ), heads AS (
        SELECT keys.ckey, best.rank, best.id
        FROM keys
        LEFT JOIN LATERAL (
            SELECT j.rank, j.id FROM workhorse.jobs j
            WHERE j.queue = p_queue AND j.ckey = keys.ckey AND j.status = 'ready'
            ORDER BY j.queue, j.ckey, j.rank, j.id
            LIMIT 1
        ) AS best ON true
    ), dropped AS (
        DELETE FROM workhorse.key_heads kh
        USING heads
        WHERE kh.queue = p_queue AND kh.ckey = heads.ckey AND heads.id IS NULL
    )
    INSERT INTO workhorse.key_heads AS kh (queue, ckey, head_rank, head_id)
    SELECT p_queue, heads.ckey, heads.rank, heads.id FROM heads WHERE heads.id IS NOT NULL
    ON CONFLICT (queue, ckey) DO UPDATE
        SET head_rank = excluded.head_rank, head_id = excluded.head_id
        WHERE (kh.head_rank, kh.head_id) IS DISTINCT FROM (excluded.head_rank, excluded.head_id);
END
$$;

-- Rebuild a queue's heads from its ready jobs: O(backlog), run only when per-key limits turn on.
CREATE FUNCTION workhorse._rebuild_heads(p_queue text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    DELETE FROM workhorse.key_hints WHERE queue = p_queue;
    DELETE FROM workhorse.key_heads WHERE queue = p_queue;
    INSERT INTO workhorse.key_heads (queue, ckey, head_rank, head_id)
    SELECT DISTINCT ON (j.ckey) j.queue, j.ckey, j.rank, j.id
    FROM workhorse.jobs j
    WHERE j.queue = p_queue AND j.status = 'ready' AND j.ckey <> ''
    ORDER BY j.ckey, j.rank, j.id;
END
$$;

CREATE FUNCTION workhorse._drop_heads(p_queue text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM workhorse.key_hints WHERE queue = p_queue;
    DELETE FROM workhorse.key_heads WHERE queue = p_queue;
$$;

-- Enqueue a batch in one statement. Arrays are parallel; ids come back in input order.
CREATE FUNCTION workhorse.enqueue_v1(
    p_tasks text[],
    p_queues text[],
    p_ckeys text[],
    p_priorities smallint[],
    p_payloads text[],
    p_run_ats timestamptz[],
    p_delays double precision[],
    p_max_attempts integer[],
    p_on_failures text[],
    p_metas text[]
) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Sorted, so that two multi-queue enqueues and an install take the gates in one order.
    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock_shared(workhorse.enqueue_gate_id(v_queue));
    END LOOP;

    -- A new statement, so the policy read behind the hints sees any install that finished while we
    -- waited at the gate.
    RETURN QUERY
    WITH input AS (
        SELECT t.*,
               COALESCE(t.run_at, now() + make_interval(secs => COALESCE(t.delay, 0))) AS due
        FROM unnest(p_tasks, p_queues, p_ckeys, p_priorities, p_payloads, p_run_ats, p_delays,
                    p_max_attempts, p_on_failures, p_metas)
             WITH ORDINALITY
             AS t(task, queue, ckey, priority, payload, run_at, delay, max_attempts, on_failure,
                  meta, ord)
    ), inserted AS (
        INSERT INTO workhorse.jobs
            (task, queue, ckey, priority, payload, status, max_attempts, on_failure, run_at, meta)
        SELECT task, queue, COALESCE(ckey, ''), priority, payload::jsonb,
               CASE WHEN due > now() THEN 'scheduled' ELSE 'ready' END,
               max_attempts, on_failure, due, COALESCE(meta, '{}')::jsonb
        FROM input
        ORDER BY ord
        RETURNING id, queue, ckey, status
    ), hinted AS (
        INSERT INTO workhorse.key_hints (queue, ckey)
        SELECT DISTINCT i.queue, i.ckey
        FROM inserted i
        JOIN workhorse.policies p ON p.queue = i.queue AND p.max_active_per_key IS NOT NULL
        WHERE i.ckey <> '' AND i.status = 'ready'
    )
    SELECT id FROM inserted ORDER BY id;

    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q LOOP
        PERFORM pg_notify('workhorse_jobs', v_queue);
    END LOOP;
END
$$;

-- Housekeeping both claim paths do first, on this queue only:
--  * an expired lease whose job has no attempts left ends the job (failed, or held);
--  * scheduled jobs that are due become ready (and hint their keys).
CREATE FUNCTION workhorse._prepare_queue(p_queue text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_keys text[];
BEGIN
    UPDATE workhorse.jobs j
    SET status = CASE j.on_failure WHEN 'hold' THEN 'held' ELSE 'failed' END,
        finished_at = p_now,
        lease_until = NULL,
        error = jsonb_build_object(
            'type', 'LeaseExpired',
            'message', format('lease expired on attempt %s of %s', j.attempts, j.max_attempts),
            'traceback', NULL)
    WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= p_now
      AND j.attempts >= j.max_attempts;

    -- `id = ANY(ARRAY(...))`, not a join with the due rows: a join estimated at a few hundred
    -- rows makes the planner hash the whole jobs table, on every claim.
    WITH promoted AS (
        UPDATE workhorse.jobs j SET status = 'ready'
        WHERE j.id = ANY(ARRAY(
                SELECT d.id FROM workhorse.jobs d
                WHERE d.queue = p_queue AND d.status = 'scheduled' AND d.run_at <= p_now
                ORDER BY d.queue, d.run_at
                LIMIT 1000
                FOR UPDATE SKIP LOCKED))
          AND j.status = 'scheduled'
        RETURNING j.ckey
    )
    SELECT array_agg(DISTINCT ckey) INTO v_keys FROM promoted WHERE ckey <> '';
    PERFORM workhorse._hint_keys(p_queue, v_keys);
END
$$;

-- Activate chosen jobs: a new fence from the sequence, one more attempt, a lease from the clock
-- (not now(): that is the transaction start, before any wait for the lock).
CREATE FUNCTION workhorse._activate(p_ids bigint[], p_lease double precision, p_now timestamptz)
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

-- Ready jobs in queue order plus expired leases, best `p_limit` by (rank, id).
-- Used by the fast path and by queues with only a queue-wide limit, where nothing is ever skipped.
-- Expired leases are taken in (rank, id) order too, not in expiry order: with more of them than
-- p_limit, expiry order would reclaim a low-priority job ahead of a high-priority one. They are
-- few (they were active), so sorting them is cheap.
CREATE FUNCTION workhorse._queue_order_candidates(p_queue text, p_limit integer, p_now timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    WITH ready AS (
        SELECT j.id, j.rank FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.status = 'ready'
        ORDER BY j.queue, j.rank, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), expired AS (
        SELECT j.id, j.rank FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= p_now
        ORDER BY j.rank, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), best AS (
        SELECT * FROM ready UNION ALL SELECT * FROM expired
        ORDER BY rank, id
        LIMIT p_limit
    )
    SELECT COALESCE(array_agg(best.id ORDER BY best.rank, best.id), '{}') INTO v_ids FROM best;
    RETURN v_ids;
END
$$;

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
        PERFORM pg_advisory_xact_lock(workhorse.admission_lock_id(p_queue));
    ELSE
        PERFORM pg_advisory_xact_lock_shared(workhorse.admission_lock_id(p_queue));
    END IF;

    -- Each statement of a VOLATILE function takes a fresh snapshot: this read, and every count
    -- below, sees every claim that committed before we got the lock.
    SELECT * INTO v_policy FROM workhorse.policies WHERE queue = p_queue;
    IF FOUND AND NOT v_governed THEN
        -- A policy was installed while we waited in shared mode; our caller retries on the hint.
        RETURN;
    END IF;

    v_now := clock_timestamp();
    PERFORM workhorse._prepare_queue(p_queue, v_now);

    IF v_policy.queue IS NULL THEN
        v_ids := workhorse._queue_order_candidates(p_queue, p_limit, v_now);
        RETURN QUERY SELECT * FROM workhorse._activate(v_ids, p_lease, v_now);
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
        v_ids := workhorse._queue_order_candidates(p_queue, v_room, v_now);
        RETURN QUERY SELECT * FROM workhorse._activate(v_ids, p_lease, v_now);
        RETURN;
    END IF;

    -- Per-key limits: bring the heads up to date with what was enqueued since the last claim.
    WITH drained AS (
        DELETE FROM workhorse.key_hints WHERE queue = p_queue RETURNING ckey
    )
    SELECT array_agg(DISTINCT ckey) INTO v_examined FROM drained;
    PERFORM workhorse._refresh_heads(p_queue, v_examined);

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
        UPDATE workhorse.jobs j
        SET status = 'active',
            attempts = j.attempts + 1,
            fence = nextval('workhorse.fence_seq'),
            lease_until = clock_timestamp() + make_interval(secs => p_lease),
            started_at = clock_timestamp()
        FROM admitted
        WHERE j.id = admitted.id
          AND (j.status = 'ready' OR (j.status = 'active' AND j.lease_until <= v_now))
        RETURNING j.*
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

-- Record successes. Accepted while the job is still active under this fence, that is, until it is
-- claimed again (an expired lease that nobody reclaimed yet still completes).
-- Returns the ids accepted; the others were stale and changed nothing.
CREATE FUNCTION workhorse.complete_v1(p_ids bigint[], p_fences bigint[], p_results text[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN QUERY
        WITH done AS (
            UPDATE workhorse.jobs j
            SET status = 'succeeded', result = b.result::jsonb, finished_at = clock_timestamp(),
                lease_until = NULL
            FROM unnest(p_ids, p_fences, p_results) AS b(id, fence, result)
            WHERE j.id = b.id AND j.fence = b.fence AND j.status = 'active'
            RETURNING j.id, j.queue
        ), woken AS (
            -- Capacity freed on a governed queue: wake the claimers that were waiting for it.
            SELECT count(pg_notify('workhorse_jobs', g.queue)) AS n
            FROM (SELECT DISTINCT d.queue FROM done d
                  JOIN workhorse.policies p ON p.queue = d.queue) AS g
        )
        SELECT done.id FROM done, woken;
END
$$;

-- Record a failed attempt. With p_retry_at and attempts left, the job waits as `scheduled`;
-- otherwise it ends `failed`, or `held` when its task says so. Returns the new status, or NULL
-- when the fence is stale (nothing changed).
CREATE FUNCTION workhorse.fail_v1(p_id bigint, p_fence bigint, p_error text, p_retry_at timestamptz)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_status text;
    v_queue text;
BEGIN
    UPDATE workhorse.jobs j
    SET status = CASE
            WHEN p_retry_at IS NOT NULL AND j.attempts < j.max_attempts THEN 'scheduled'
            WHEN j.on_failure = 'hold' THEN 'held'
            ELSE 'failed' END,
        run_at = CASE WHEN p_retry_at IS NOT NULL AND j.attempts < j.max_attempts
                      THEN p_retry_at ELSE j.run_at END,
        finished_at = CASE WHEN p_retry_at IS NOT NULL AND j.attempts < j.max_attempts
                           THEN NULL ELSE clock_timestamp() END,
        error = p_error::jsonb,
        lease_until = NULL
    WHERE j.id = p_id AND j.fence = p_fence AND j.status = 'active'
    RETURNING j.status, j.queue INTO v_status, v_queue;
    IF v_status IS NOT NULL AND EXISTS (SELECT 1 FROM workhorse.policies WHERE queue = v_queue) THEN
        PERFORM pg_notify('workhorse_jobs', v_queue);
    END IF;
    RETURN v_status;
END
$$;

-- Desired-state sync of one namespace's policies. Returns one row per queue touched, with what
-- happened to it: created, updated, unchanged or pruned.
CREATE FUNCTION workhorse.sync_concurrency_policies_v1(
    p_namespace text,
    p_queues text[],
    p_max_active integer[],
    p_max_active_per_key integer[],
    p_prune boolean
) RETURNS TABLE (sync_action text, sync_queue text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
    v_owner text;
    v_old workhorse.policies;
    v_max integer;
    v_per_key integer;
    v_was_per_key boolean;
BEGIN
    -- Every queue this call may touch, locked in one sorted order (concurrent syncs and claims
    -- cannot deadlock), before anything is read: two syncs racing for a new queue serialize here,
    -- and the second sees the first's row.
    FOR v_queue IN
        SELECT q FROM unnest(p_queues) AS q
        UNION
        SELECT p.queue FROM workhorse.policies p WHERE p.namespace = p_namespace AND p_prune
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(workhorse.admission_lock_id(v_queue));
    END LOOP;

    SELECT p.queue, p.namespace INTO v_queue, v_owner
    FROM workhorse.policies p
    WHERE p.queue = ANY(p_queues) AND p.namespace <> p_namespace
    ORDER BY p.queue
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queue % is owned by namespace %, not %', v_queue, v_owner, p_namespace
            USING ERRCODE = 'WH001';
    END IF;

    FOR v_queue, v_max, v_per_key IN
        SELECT * FROM unnest(p_queues, p_max_active, p_max_active_per_key) ORDER BY 1
    LOOP
        SELECT * INTO v_old FROM workhorse.policies p WHERE p.queue = v_queue;
        v_was_per_key := FOUND AND v_old.max_active_per_key IS NOT NULL;
        IF v_per_key IS NOT NULL AND NOT v_was_per_key THEN
            -- Wait out enqueues that read "no per-key policy", then build the heads they missed.
            PERFORM pg_advisory_xact_lock(workhorse.enqueue_gate_id(v_queue));
        END IF;
        IF v_old.queue IS NULL THEN
            INSERT INTO workhorse.policies (queue, namespace, max_active, max_active_per_key)
            VALUES (v_queue, p_namespace, v_max, v_per_key);
            sync_action := 'created';
        ELSIF v_old.max_active IS NOT DISTINCT FROM v_max
              AND v_old.max_active_per_key IS NOT DISTINCT FROM v_per_key THEN
            sync_action := 'unchanged';
        ELSE
            UPDATE workhorse.policies p
            SET max_active = v_max, max_active_per_key = v_per_key, updated_at = now()
            WHERE p.queue = v_queue;
            sync_action := 'updated';
        END IF;
        IF v_per_key IS NOT NULL AND NOT v_was_per_key THEN
            PERFORM workhorse._rebuild_heads(v_queue);
        ELSIF v_per_key IS NULL AND v_was_per_key THEN
            PERFORM workhorse._drop_heads(v_queue);
        END IF;
        IF sync_action <> 'unchanged' THEN
            PERFORM pg_notify('workhorse_jobs', v_queue);
        END IF;
        sync_queue := v_queue;
        RETURN NEXT;
    END LOOP;

    IF p_prune THEN
        FOR v_queue IN
            DELETE FROM workhorse.policies p
            WHERE p.namespace = p_namespace AND NOT (p.queue = ANY(p_queues))
            RETURNING p.queue
        LOOP
            PERFORM workhorse._drop_heads(v_queue);
            PERFORM pg_notify('workhorse_jobs', v_queue);
            sync_action := 'pruned';
            sync_queue := v_queue;
            RETURN NEXT;
        END LOOP;
    END IF;
END
$$;
