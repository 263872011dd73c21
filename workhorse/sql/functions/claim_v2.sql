-- Claim v2: claim_v1's admission (concurrency limits, key heads, leases, fences) plus exact
-- rate limits, pause and operator overrides. Up to p_limit jobs from one queue, in autocommit.
--
-- Rate limits count every start in rate_starts (see 0005_admission_v2.sql): a claim admits at most
-- N - (starts in the last period) from the queue, and from each key. When a rate limit cut the
-- claim short, its last row has no job and says in `next_start_in` how many seconds remain until
-- the next start is allowed, so the worker sleeps until then instead of polling.
CREATE FUNCTION workhorse.claim_v2(p_queue text, p_limit integer, p_lease double precision)
RETURNS TABLE (
    id bigint, task text, queue text, ckey text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fence bigint, lease_until timestamptz,
    enqueued_at timestamptz, run_at timestamptz, meta jsonb, started_at timestamptz,
    rank integer, next_start_in double precision)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_peek boolean;
    v_governed boolean;
    v_paused boolean;
    v_max integer;
    v_per_key integer;
    v_rate integer;
    v_period double precision;
    v_rate_key integer;
    v_period_key double precision;
    v_now timestamptz;
    v_active integer;
    v_room integer;
    v_used bigint;
    v_admitted integer;
    v_next double precision;
    v_key_names text[];
    v_key_counts integer[];
    v_saturated text[];
    v_examined text[];
    v_ids bigint[];
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RETURN;
    END IF;

    -- Unlocked peek, to choose the lock mode (never shared first and then exclusive: two
    -- claimers doing that would deadlock). Pauses and overrides govern a queue like a policy.
    v_peek := EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = p_queue)
              OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = p_queue);
    IF v_peek THEN
        PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
    ELSE
        PERFORM pg_advisory_xact_lock_shared(workhorse._admission_lock_id_v1(p_queue));
    END IF;

    -- Fresh snapshot after the lock: every claim, sync, pause and override committed before it.
    v_now := clock_timestamp();
    SELECT l.governed, l.paused, l.max_active, COALESCE(l.max_active_per_key, 2147483647),
           l.rate_limit, l.rate_period, l.rate_limit_per_key, l.rate_period_per_key
    INTO v_governed, v_paused, v_max, v_per_key, v_rate, v_period, v_rate_key, v_period_key
    FROM workhorse._limits_v2(p_queue, v_now) AS l;
    IF (v_governed AND NOT v_peek) OR v_paused THEN
        -- Governed while we waited in shared mode (our caller retries on the hint), or paused.
        RETURN;
    END IF;

    PERFORM workhorse._prepare_queue_v1(p_queue, v_now);

    IF NOT v_governed THEN
        v_ids := workhorse._queue_order_candidates_v1(p_queue, p_limit, v_now);
        RETURN QUERY SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts, a.max_attempts, a.fence,
           a.lease_until, a.enqueued_at, a.run_at, a.meta, a.started_at, a.rank, NULL::double precision
        FROM workhorse._activate_v1(v_ids, p_lease, v_now) AS a
        ORDER BY a.rank, a.id;
        RETURN;
    END IF;

    -- Capacity in use: unexpired leases only, so a dead worker's share is back once its lease ends.
    SELECT COALESCE(sum(a.n), 0)::integer,
           array_agg(a.ckey) FILTER (WHERE a.ckey <> ''),
           array_agg(a.n) FILTER (WHERE a.ckey <> ''),
           array_agg(a.ckey) FILTER (WHERE a.ckey <> '' AND a.n >= v_per_key)
    INTO v_active, v_key_names, v_key_counts, v_saturated
    FROM (
        SELECT j.ckey, count(*)::integer AS n
        FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until > v_now
        GROUP BY j.ckey
    ) AS a;

    v_room := CASE WHEN v_max IS NULL THEN p_limit ELSE LEAST(p_limit, v_max - v_active) END;
    IF v_room <= 0 THEN
        RETURN;
    END IF;
    IF v_rate IS NOT NULL THEN
        v_used := workhorse._rate_used_v2(p_queue, '', v_period, v_now);
        IF v_used >= v_rate THEN
            v_next := workhorse._rate_next_start_v2(p_queue, '', v_rate, v_period, v_now);
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::smallint,
                NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint, NULL::timestamptz,
                NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::timestamptz,
                NULL::integer, v_next;
            RETURN;
        END IF;
        v_room := LEAST(v_room, (v_rate - v_used)::integer);
    END IF;

    IF v_per_key = 2147483647 AND v_rate_key IS NULL THEN
        v_ids := workhorse._queue_order_candidates_v1(p_queue, v_room, v_now);
        RETURN QUERY SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts, a.max_attempts, a.fence,
           a.lease_until, a.enqueued_at, a.run_at, a.meta, a.started_at, a.rank, NULL::double precision
        FROM workhorse._activate_v2(v_ids, p_lease, v_now, v_period, NULL) AS a
        ORDER BY a.rank, a.id;
        GET DIAGNOSTICS v_admitted = ROW_COUNT;
    ELSE
        -- Per-key limits: bring the heads up to date with what was enqueued since the last claim.
        WITH drained AS (
            DELETE FROM workhorse.key_hints h WHERE h.queue = p_queue RETURNING h.ckey
        )
        SELECT array_agg(DISTINCT d.ckey) INTO v_examined FROM drained d;
        PERFORM workhorse._refresh_heads_v1(p_queue, v_examined);

        -- As in claim_v1: the first v_room admissible heads are enough, and one statement
        -- chooses, activates, and moves the heads on.
        RETURN QUERY
        WITH active_keys AS (
            SELECT * FROM unnest(v_key_names, v_key_counts) AS a(ckey, n)
        ), heads AS (
            -- Walk heads in order, passing over saturated keys (a hashed set, no row read) and
            -- keys out of starts (one probe of at most ~101 start buckets each): the cost grows
            -- with the keys passed over, never with their backlog. A key's concurrency room is
            -- worked out only for the heads kept (a saturated key was passed over already).
            SELECT s.ckey, s.head_rank, s.head_id,
                   LEAST(s.rate_left,
                         v_per_key - COALESCE((SELECT a.n FROM active_keys a
                                               WHERE a.ckey = s.ckey), 0)) AS allowance
            FROM (
                SELECT h.ckey, h.head_rank, h.head_id,
                       CASE WHEN v_rate_key IS NULL THEN v_room
                            ELSE LEAST(v_room, v_rate_key - workhorse._rate_used_v2(
                                p_queue, h.ckey, v_period_key, v_now)) END AS rate_left
                FROM workhorse.key_heads h
                WHERE h.queue = p_queue
                  -- A subquery, not `= ANY(array)`: it is hashed whatever plan PL/pgSQL caches,
                  -- where a generic plan would scan the array once per head.
                  AND NOT (h.ckey = ANY(SELECT unnest(v_saturated)))
                ORDER BY h.queue, h.head_rank, h.head_id
            ) AS s
            WHERE s.rate_left > 0
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
            WHERE e.ckey = ''
               OR (e.nth <= v_per_key - COALESCE(a.n, 0)
                   AND (v_rate_key IS NULL OR e.nth <= v_rate_key - workhorse._rate_used_v2(
                            p_queue, e.ckey, v_period_key, v_now)))
            ORDER BY e.rank, e.id
            LIMIT v_room
        ), candidates AS (
            SELECT u.*, row_number() OVER (PARTITION BY u.ckey ORDER BY u.rank, u.id) AS nth
            FROM (SELECT * FROM keyed UNION ALL SELECT * FROM keyless UNION ALL SELECT * FROM expired) u
        ), key_room AS (
            -- Each candidate key's room: concurrency left, and starts left in its window.
            SELECT k.ckey,
                   LEAST(v_per_key - COALESCE(a.n, 0),
                         CASE WHEN v_rate_key IS NULL THEN v_room
                              ELSE v_rate_key - workhorse._rate_used_v2(
                                  p_queue, k.ckey, v_period_key, v_now) END) AS room
            FROM (SELECT DISTINCT c.ckey FROM candidates c WHERE c.ckey <> '') AS k
            LEFT JOIN active_keys a ON a.ckey = k.ckey
        ), admitted AS (
            SELECT c.id FROM candidates c
            LEFT JOIN key_room r ON r.ckey = c.ckey
            WHERE c.ckey = '' OR c.nth <= r.room
            ORDER BY c.rank, c.id
            LIMIT v_room
        ), activated AS (
            SELECT * FROM workhorse._activate_v2(ARRAY(SELECT a.id FROM admitted a), p_lease, v_now,
                                                 v_period, v_period_key)
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
        SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts, a.max_attempts, a.fence,
           a.lease_until, a.enqueued_at, a.run_at, a.meta, a.started_at, a.rank, NULL::double precision
        FROM activated a
        ORDER BY a.rank, a.id;
        GET DIAGNOSTICS v_admitted = ROW_COUNT;
    END IF;

    -- Starts used up: say when the next one is allowed (the queue's, else the soonest of the
    -- first heads whose key is out of starts), so the worker sleeps instead of polling.
    v_next := NULL;
    IF v_rate IS NOT NULL AND v_used + v_admitted >= v_rate THEN
        v_next := workhorse._rate_next_start_v2(p_queue, '', v_rate, v_period, clock_timestamp());
    ELSIF v_rate_key IS NOT NULL AND v_admitted < v_room THEN
        SELECT min(workhorse._rate_next_start_v2(p_queue, h.ckey, v_rate_key, v_period_key, v_now))
        INTO v_next
        FROM (SELECT kh.ckey FROM workhorse.key_heads kh WHERE kh.queue = p_queue
              ORDER BY kh.queue, kh.head_rank, kh.head_id LIMIT v_room) AS h
        WHERE workhorse._rate_used_v2(p_queue, h.ckey, v_period_key, v_now) >= v_rate_key;
    END IF;
    IF v_next > 0 THEN
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::smallint,
            NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint, NULL::timestamptz,
            NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::timestamptz,
            NULL::integer, v_next;
    END IF;
END
$$;
