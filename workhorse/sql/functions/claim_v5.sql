-- Claim v5: claim_v4, admitting exactly what it admits, at less cost:
--  * The key heads it moves or drops are looked up by key (key_heads_pkey). claim_v4's planner,
--    estimating one row for the heads to move, walked every head of the queue and scanned the
--    moved heads for each: a cost that grew with the queue's keys until the statistics flipped
--    the plan. Per-key statement, record 32 + claim 32, pg_stat_statements: 1268 -> 756 µs at
--    100 keys, 2346 -> 742 µs at 300 keys, about the same at 1,000 (where the statistics already
--    led to lookups). The hint refresh's heads to drop likewise (_refresh_heads_v2).
--  * A leaner per-key statement when the queue has no rate limit: the rate parts of claim_v4's
--    statement (each head's starts left, each candidate key's room, the start records) cost
--    about 10% of a per-key claim even when no rate limit is set (1341 -> 1218 µs at 100 keys).
-- With a rate limit, claim_v4's statement runs, with the first change only.
--
-- Arguments and rows are claim_v4's (see claim_v4.sql).
CREATE FUNCTION workhorse.claim_v5(
    p_queue text, p_limit integer, p_lease double precision,
    p_ids bigint[], p_fences bigint[], p_results text[], p_retention_ix integer[],
    p_retentions text[])
RETURNS TABLE (
    id bigint, task text, queue text, ckey text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fence bigint, lease_until timestamptz,
    enqueued_at timestamptz, run_at timestamptz, meta jsonb, started_at timestamptz,
    rank integer, next_start_in double precision, status text, scheduled_for timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_sent integer := COALESCE(cardinality(p_ids), 0);
    v_peek boolean;
    v_freed integer := 0;
    v_done_ids bigint[];
    v_done_fences bigint[];
    v_done_statuses text[];
    v_now timestamptz;
    v_governed boolean;
    v_paused boolean;
    v_max integer;
    v_per_key integer;
    v_rate integer;
    v_period double precision;
    v_rate_key integer;
    v_period_key double precision;
    v_expired boolean;
    v_due boolean;
    v_hinted boolean;
    v_active integer;
    v_key_names text[];
    v_key_counts integer[];
    v_saturated text[];
    v_examined text[];
    v_room integer;
    v_used bigint;
    v_admitted integer := 0;
    v_next double precision;
BEGIN
    -- Unlocked peek, to choose the lock mode (never shared first and then exclusive: two
    -- claimers doing that would deadlock), then the lock, before the successes: their row locks
    -- must not be held while we wait for it, or a claimer holding it that reclaims one of them
    -- (its lease expired) would wait for us while we wait for it.
    v_peek := EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = p_queue)
              OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = p_queue);
    IF v_peek THEN
        PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
    ELSE
        PERFORM pg_advisory_xact_lock_shared(workhorse._admission_lock_id_v1(p_queue));
    END IF;

    IF v_sent > 0 THEN
        SELECT COALESCE(array_agg(r.id), '{}'), array_agg(r.fence), array_agg(r.status)
        INTO v_done_ids, v_done_fences, v_done_statuses
        FROM workhorse._record_successes_v2(
            p_ids, p_fences, p_results, p_retention_ix, p_retentions) AS r;
        v_freed := cardinality(v_done_ids);
        IF v_freed < v_sent OR NOT 'succeeded' = ALL(v_done_statuses) THEN
            RETURN QUERY
                SELECT b.id, NULL::text, p_queue, NULL::text, NULL::smallint, NULL::jsonb,
                       NULL::integer, NULL::integer, b.fence, NULL::timestamptz,
                       NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::timestamptz,
                       NULL::integer, NULL::double precision, COALESCE(d.status, 'stale'),
                       NULL::timestamptz
                FROM unnest(p_ids, p_fences) AS b(id, fence)
                LEFT JOIN unnest(v_done_ids, v_done_fences, v_done_statuses) AS d(id, fence, status)
                    ON d.id = b.id AND d.fence = b.fence
                WHERE d.status IS DISTINCT FROM 'succeeded';
        END IF;
    END IF;

    IF p_limit IS NULL OR p_limit < 1 THEN
        IF v_freed > 0 AND v_peek THEN
            PERFORM workhorse._wake_v1(p_queue);
        END IF;
        RETURN;
    END IF;

    -- Fresh snapshot after the lock: every claim, sync, pause and override committed before it.
    -- The probes say whether housekeeping or a hint refresh has anything to do.
    v_now := clock_timestamp();
    SELECT l.governed, l.paused, l.max_active, COALESCE(l.max_active_per_key, 2147483647),
           l.rate_limit, l.rate_period, l.rate_limit_per_key, l.rate_period_per_key,
           EXISTS (SELECT 1 FROM workhorse.jobs j
                   WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= v_now),
           EXISTS (SELECT 1 FROM workhorse.jobs j
                   WHERE j.queue = p_queue AND j.status = 'scheduled' AND j.run_at <= v_now),
           EXISTS (SELECT 1 FROM workhorse.key_hints h WHERE h.queue = p_queue)
    INTO v_governed, v_paused, v_max, v_per_key, v_rate, v_period, v_rate_key, v_period_key,
         v_expired, v_due, v_hinted
    FROM workhorse._limits_v2(p_queue, v_now) AS l;
    IF (v_governed AND NOT v_peek) OR v_paused THEN
        -- Governed while we waited in shared mode (our caller retries on the hint), or paused.
        IF v_freed > 0 AND v_peek THEN
            PERFORM workhorse._wake_v1(p_queue);
        END IF;
        RETURN;
    END IF;

    IF v_expired OR v_due THEN
        PERFORM workhorse._prepare_queue_v1(p_queue, v_now);
        v_hinted := v_hinted OR v_due;
    END IF;

    v_room := p_limit;
    IF v_governed THEN
        -- Capacity in use: unexpired leases only, so a dead worker's share is back once its
        -- lease ends.
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
            IF v_freed > 0 THEN
                PERFORM workhorse._wake_v1(p_queue);
            END IF;
            RETURN;
        END IF;
        IF v_rate IS NOT NULL THEN
            v_used := workhorse._rate_used_v2(p_queue, '', v_period, v_now);
            IF v_used >= v_rate THEN
                v_next := workhorse._rate_next_start_v2(p_queue, '', v_rate, v_period, v_now);
                RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::text,
                    NULL::smallint, NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint,
                    NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::jsonb,
                    NULL::timestamptz, NULL::integer, v_next, NULL::text, NULL::timestamptz;
                IF v_freed > 0 THEN
                    PERFORM workhorse._wake_v1(p_queue);
                END IF;
                RETURN;
            END IF;
            v_room := LEAST(v_room, (v_rate - v_used)::integer);
        END IF;
    END IF;

    IF NOT v_governed OR (v_per_key = 2147483647 AND v_rate_key IS NULL) THEN
        -- No policy, or a queue-wide limit only: the row walk (SKIP LOCKED, which ungoverned
        -- claims need: they run side by side under the shared lock), v_room long.
        RETURN QUERY
        WITH ready AS (
            SELECT j.id, j.rank FROM workhorse.jobs j
            WHERE j.queue = p_queue AND j.status = 'ready'
            ORDER BY j.queue, j.rank, j.id
            LIMIT v_room
            FOR UPDATE SKIP LOCKED
        ), expired AS (
            SELECT j.id, j.rank FROM workhorse.jobs j
            WHERE v_expired AND j.queue = p_queue AND j.status = 'active' AND j.lease_until <= v_now
            ORDER BY j.rank, j.id
            LIMIT v_room
            FOR UPDATE SKIP LOCKED
        ), best AS (
            SELECT * FROM ready UNION ALL SELECT * FROM expired
            ORDER BY rank, id
            LIMIT v_room
        ), activated AS (
            -- `id = ANY(ARRAY(...))`, not a join: a join estimated at many rows hashes the jobs
            -- table.
            UPDATE workhorse.jobs j
            SET status = 'active',
                attempts = j.attempts + 1,
                fence = nextval('workhorse.fence_seq'),
                lease_until = clock_timestamp() + make_interval(secs => p_lease),
                started_at = clock_timestamp()
            WHERE j.id = ANY(ARRAY(SELECT b.id FROM best b))
              AND (j.status = 'ready' OR (j.status = 'active' AND j.lease_until <= v_now))
            RETURNING j.*
        ), recorded AS (
            -- The queue's starts, for its rate limit (as _activate_v2 files them).
            INSERT INTO workhorse.rate_starts AS r (queue, ckey, bucket_end, n)
            SELECT p_queue, '',
                   to_timestamp(ceil(EXTRACT(epoch FROM max(a.started_at))::double precision
                                     / (v_period / 100)) * (v_period / 100)),
                   count(*)::integer
            FROM activated a
            WHERE v_period IS NOT NULL
            HAVING count(*) > 0
            ON CONFLICT (queue, ckey, bucket_end) DO UPDATE SET n = r.n + excluded.n
        )
        SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts, a.max_attempts,
               a.fence, a.lease_until, a.enqueued_at, a.run_at, a.meta, a.started_at, a.rank,
               NULL::double precision, NULL::text,
               COALESCE(a.scheduled_for, CASE WHEN a.attempts = 1 THEN a.run_at END)
        FROM activated a
        ORDER BY a.rank, a.id;
        GET DIAGNOSTICS v_admitted = ROW_COUNT;
    ELSE
        IF v_hinted THEN
            -- Bring the heads up to date with what was enqueued since the last claim.
            WITH drained AS (
                DELETE FROM workhorse.key_hints h WHERE h.queue = p_queue RETURNING h.ckey
            )
            SELECT array_agg(DISTINCT d.ckey) INTO v_examined FROM drained d;
            PERFORM workhorse._refresh_heads_v2(p_queue, v_examined);
        END IF;

        -- claim_v2's per-key statement, with the activation and the start records inline. The
        -- first v_room admissible heads are enough (a job among the best v_room admissible ones
        -- has at most v_room - 1 other keys' heads ahead of its own key's); each head's key is
        -- read allowance + 1 rows deep, the last of which says where the head moves.
        IF v_rate_key IS NULL AND v_period IS NULL THEN
            -- No rate limit: the statement below less its rate parts. A head's allowance is its
            -- key's room under the per-key limit, at most v_room.
            RETURN QUERY
            WITH active_keys AS (
                SELECT * FROM unnest(v_key_names, v_key_counts) AS a(ckey, n)
            ), heads AS (
                SELECT h.ckey, h.head_rank, h.head_id,
                       LEAST(v_room, v_per_key - COALESCE((SELECT a.n FROM active_keys a
                                                           WHERE a.ckey = h.ckey), 0)) AS allowance
                FROM workhorse.key_heads h
                WHERE h.queue = p_queue
                  AND NOT (h.ckey = ANY(SELECT unnest(v_saturated)))
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
                -- As in claim_v4: only the expired jobs their key still has room for.
                SELECT e.id, e.rank, e.ckey
                FROM (
                    SELECT j.id, j.rank, j.ckey,
                           row_number() OVER (PARTITION BY j.ckey ORDER BY j.rank, j.id) AS nth
                    FROM workhorse.jobs j
                    WHERE v_expired AND j.queue = p_queue AND j.status = 'active'
                      AND j.lease_until <= v_now
                ) AS e
                LEFT JOIN active_keys a ON a.ckey = e.ckey
                WHERE e.ckey = '' OR e.nth <= v_per_key - COALESCE(a.n, 0)
                ORDER BY e.rank, e.id
                LIMIT v_room
            ), candidates AS (
                -- Numbered per key over its ready and expired candidates: the key's room is the
                -- same number for both.
                SELECT u.id, u.rank, u.ckey,
                       row_number() OVER (PARTITION BY u.ckey ORDER BY u.rank, u.id) AS nth
                FROM (SELECT * FROM keyed UNION ALL SELECT * FROM keyless
                      UNION ALL SELECT * FROM expired) AS u
            ), admitted AS (
                SELECT c.id FROM candidates c
                LEFT JOIN active_keys a ON a.ckey = c.ckey
                WHERE c.ckey = '' OR c.nth <= v_per_key - COALESCE(a.n, 0)
                ORDER BY c.rank, c.id
                LIMIT v_room
            ), activated AS (
                UPDATE workhorse.jobs j
                SET status = 'active',
                    attempts = j.attempts + 1,
                    fence = nextval('workhorse.fence_seq'),
                    lease_until = clock_timestamp() + make_interval(secs => p_lease),
                    started_at = clock_timestamp()
                WHERE j.id = ANY(ARRAY(SELECT a.id FROM admitted a))
                  AND (j.status = 'ready' OR (j.status = 'active' AND j.lease_until <= v_now))
                RETURNING j.*
            ), next_heads AS (
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
                -- Heads moved by an upsert, each looked up in key_heads_pkey (it always exists:
                -- heads change only under the admission lock), and dropped by key: claim_v4's
                -- joins with next_heads, which the planner estimated at one row, walked every
                -- head of the queue and scanned next_heads for each (a cost that grew with the
                -- queue's keys; see the top of this file).
                INSERT INTO workhorse.key_heads AS kh (queue, ckey, head_rank, head_id)
                SELECT p_queue, nh.ckey, nh.rank, nh.id FROM next_heads nh
                WHERE nh.id IS NOT NULL
                  AND (nh.head_rank, nh.head_id) IS DISTINCT FROM (nh.rank, nh.id)
                ON CONFLICT (queue, ckey) DO UPDATE
                    SET head_rank = excluded.head_rank, head_id = excluded.head_id
            ), emptied AS (
                DELETE FROM workhorse.key_heads kh
                WHERE kh.queue = p_queue
                  AND kh.ckey = ANY(ARRAY(SELECT n.ckey FROM next_heads n WHERE n.id IS NULL))
            )
            SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts, a.max_attempts,
                   a.fence, a.lease_until, a.enqueued_at, a.run_at, a.meta, a.started_at, a.rank,
                   NULL::double precision, NULL::text,
                   COALESCE(a.scheduled_for, CASE WHEN a.attempts = 1 THEN a.run_at END)
            FROM activated a
            ORDER BY a.rank, a.id;
            GET DIAGNOSTICS v_admitted = ROW_COUNT;
        ELSE
            -- A rate limit: claim_v4's statement.
            RETURN QUERY
            WITH active_keys AS (
                SELECT * FROM unnest(v_key_names, v_key_counts) AS a(ckey, n)
            ), heads AS (
                -- Walk heads in order, passing over saturated keys (a hashed set, no row read) and
                -- keys out of starts (one probe of at most ~101 start buckets each): the cost grows
                -- with the keys passed over, never with their backlog.
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
                      AND NOT (h.ckey = ANY(SELECT unnest(v_saturated)))
                    ORDER BY h.queue, h.head_rank, h.head_id
                ) AS s
                WHERE s.rate_left > 0
                LIMIT v_room
            ), keyed AS (
                SELECT c.id, c.rank, c.ckey, c.nth, heads.allowance
                FROM heads
                CROSS JOIN LATERAL (
                    SELECT k.id, k.rank, k.ckey, row_number() OVER (ORDER BY k.rank, k.id) AS nth
                    FROM (SELECT j.id, j.rank, j.ckey FROM workhorse.jobs j
                          WHERE j.queue = p_queue AND j.ckey = heads.ckey AND j.status = 'ready'
                          ORDER BY j.queue, j.ckey, j.rank, j.id
                          LIMIT heads.allowance + 1) AS k
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
                    WHERE v_expired AND j.queue = p_queue AND j.status = 'active'
                      AND j.lease_until <= v_now
                ) AS e
                LEFT JOIN active_keys a ON a.ckey = e.ckey
                WHERE e.ckey = ''
                   OR (e.nth <= v_per_key - COALESCE(a.n, 0)
                       AND (v_rate_key IS NULL OR e.nth <= v_rate_key - workhorse._rate_used_v2(
                                p_queue, e.ckey, v_period_key, v_now)))
                ORDER BY e.rank, e.id
                LIMIT v_room
            ), candidates AS (
                -- A key's ready jobs within its allowance, the keyless ones, and the expired ones;
                -- a key with both ready and expired candidates is numbered again over both.
                SELECT u.id, u.rank, u.ckey,
                       row_number() OVER (PARTITION BY u.ckey ORDER BY u.rank, u.id) AS nth
                FROM (SELECT k.id, k.rank, k.ckey FROM keyed k WHERE k.nth <= k.allowance
                      UNION ALL SELECT l.id, l.rank, l.ckey FROM keyless l
                      UNION ALL SELECT x.id, x.rank, x.ckey FROM expired x) AS u
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
                SELECT c.id, c.rank, c.ckey FROM candidates c
                LEFT JOIN key_room r ON r.ckey = c.ckey
                WHERE c.ckey = '' OR c.nth <= r.room
                ORDER BY c.rank, c.id
                LIMIT v_room
            ), activated AS (
                UPDATE workhorse.jobs j
                SET status = 'active',
                    attempts = j.attempts + 1,
                    fence = nextval('workhorse.fence_seq'),
                    lease_until = clock_timestamp() + make_interval(secs => p_lease),
                    started_at = clock_timestamp()
                WHERE j.id = ANY(ARRAY(SELECT a.id FROM admitted a))
                  AND (j.status = 'ready' OR (j.status = 'active' AND j.lease_until <= v_now))
                RETURNING j.*
            ), scopes AS (
                SELECT '' AS ckey, v_period AS period, max(a.started_at) AS at, count(*)::integer AS n
                FROM activated a
                WHERE v_period IS NOT NULL
                HAVING count(*) > 0
                UNION ALL
                SELECT a.ckey, v_period_key, max(a.started_at), count(*)::integer
                FROM activated a
                WHERE v_period_key IS NOT NULL AND a.ckey <> ''
                GROUP BY a.ckey
            ), recorded AS (
                -- Starts for the rate limits in force, filed as _activate_v2 files them.
                INSERT INTO workhorse.rate_starts AS r (queue, ckey, bucket_end, n)
                SELECT p_queue, s.ckey,
                       to_timestamp(ceil(EXTRACT(epoch FROM s.at)::double precision
                                         / (s.period / 100)) * (s.period / 100)),
                       s.n
                FROM scopes s
                ON CONFLICT (queue, ckey, bucket_end) DO UPDATE SET n = r.n + excluded.n
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
                -- Moved and dropped by key, as in the statement above.
                INSERT INTO workhorse.key_heads AS kh (queue, ckey, head_rank, head_id)
                SELECT p_queue, nh.ckey, nh.rank, nh.id FROM next_heads nh
                WHERE nh.id IS NOT NULL
                  AND (nh.head_rank, nh.head_id) IS DISTINCT FROM (nh.rank, nh.id)
                ON CONFLICT (queue, ckey) DO UPDATE
                    SET head_rank = excluded.head_rank, head_id = excluded.head_id
            ), emptied AS (
                DELETE FROM workhorse.key_heads kh
                WHERE kh.queue = p_queue
                  AND kh.ckey = ANY(ARRAY(SELECT n.ckey FROM next_heads n WHERE n.id IS NULL))
            )
            SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts, a.max_attempts,
                   a.fence, a.lease_until, a.enqueued_at, a.run_at, a.meta, a.started_at, a.rank,
                   NULL::double precision, NULL::text,
                   COALESCE(a.scheduled_for, CASE WHEN a.attempts = 1 THEN a.run_at END)
            FROM activated a
            ORDER BY a.rank, a.id;
            GET DIAGNOSTICS v_admitted = ROW_COUNT;
        END IF;
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
            NULL::integer, v_next, NULL::text, NULL::timestamptz;
    END IF;

    IF v_governed AND v_freed > v_admitted THEN
        PERFORM workhorse._wake_v1(p_queue);
    END IF;
END
$$;
