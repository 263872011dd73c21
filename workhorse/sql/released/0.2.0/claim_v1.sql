-- Claim: record a slot's finished jobs of one queue and claim their replacements in one call, so
-- that capacity freed goes straight to the next job, in one round trip and one acquisition of the
-- queue's admission lock. This is the claim of feature level 1.
--
-- Arguments: `p_queue`; `p_limit`, the most jobs to claim (NULL or below 1: none, only record);
-- `p_lease`, in seconds; the successes to record first, as _record_successes_v1 takes them
-- (`p_ids`, `p_fences`, `p_results` as JSON text, `p_retention_ix`, `p_retentions`; NULL arrays
-- when there are none).
--
-- Rows, in this order:
--  * one for each success that did not end `succeeded`: its id and fence, and `status`
--    `canceled` (its cancel was requested while it ran) or `stale` (its fence was rejected), no
--    task. None when every success was accepted, the usual case: a row per success would cost
--    more than the claim it rides on;
--  * the claimed jobs (`status` NULL), each with `scheduled_for`: its schedule's occurrence, else
--    its run_at on a first attempt (a retry moved run_at: NULL);
--  * when a rate limit cut the claim short, a marker row with no id and no status, whose
--    `next_start_in` says in how many seconds the next start is allowed;
--  * when the queue needs a newer claim than this one, a marker row with no id, `status`
--    'feature_level' and the queue's level in `attempts`: nothing is admitted there.
-- A governed queue's claimers are woken when this call freed more places than it took.
--
-- Admission (DESIGN.md, invariants 1 to 7):
--  * A queue with a policy or a control row is governed: its claims hold the queue's admission
--    lock exclusively, so each counts every committed claim; other queues' claims share it and
--    walk the ready rows with SKIP LOCKED. Active means an unexpired lease; a job whose lease
--    expired is claimable again and uses an attempt. A paused queue admits nothing.
--  * A queue-wide limit only, or none: the row walk, priority then id order, at most the room.
--  * A per-key limit or rate: the walk over key heads in admission order, passing over saturated
--    keys and keys out of starts, so the cost grows with the keys passed over and the batch,
--    never with a key's backlog.
--  * Every path ends in the same two statements: the key heads' moves, and the activation (a new
--    fence, the lease, an attempt, started_at) with the starts it files for the rate limits.
-- Plans are cached generic plans: every statement takes its LIMIT from a variable, and a custom
-- plan for each call would be made under the admission lock. Sequential and bitmap scans are off
-- so that a generic plan made on an empty table still reads the indexes.
CREATE FUNCTION workhorse.claim_v1(
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
    c_level CONSTANT integer := 1;  -- this function's feature level
    v_sent integer := COALESCE(cardinality(p_ids), 0);
    v_peek boolean;
    v_freed integer := 0;
    v_done_ids bigint[];
    v_done_fences bigint[];
    v_done_statuses text[];
    v_now timestamptz;
    v_governed boolean;
    v_paused boolean;
    v_level integer;
    -- The limits in force: concurrency queue-wide and per key, and both rate limits.
    v_max integer; v_per_key integer;
    v_rate integer; v_period double precision;
    v_rate_key integer; v_period_key double precision;
    v_expired boolean;
    v_due boolean;
    v_hinted boolean;
    v_keyed boolean;
    v_active integer;
    v_key_names text[];
    v_key_counts integer[];
    v_saturated text[];
    v_examined text[];
    v_room integer;
    v_used bigint;
    v_ids bigint[];
    v_move_keys text[];
    v_move_ranks integer[];
    v_move_ids bigint[];
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
        FROM workhorse._record_successes_v1(
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
    SELECT l.governed, l.paused, l.feature_level, l.max_active,
           COALESCE(l.max_active_per_key, 2147483647),
           l.rate_limit, l.rate_period, l.rate_limit_per_key, l.rate_period_per_key,
           EXISTS (SELECT 1 FROM workhorse.jobs j
                   WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= v_now),
           EXISTS (SELECT 1 FROM workhorse.jobs j
                   WHERE j.queue = p_queue AND j.status = 'scheduled' AND j.run_at <= v_now),
           EXISTS (SELECT 1 FROM workhorse.key_hints h WHERE h.queue = p_queue)
    INTO v_governed, v_paused, v_level, v_max, v_per_key, v_rate, v_period, v_rate_key,
         v_period_key, v_expired, v_due, v_hinted
    FROM workhorse._limits_v1(p_queue, v_now) AS l;
    IF v_level > c_level THEN
        -- The queue uses a feature this claim does not know: admitting here could break a rule
        -- it cannot count (invariant 5). Say so, so that the worker warns.
        RETURN QUERY SELECT NULL::bigint, NULL::text, p_queue, NULL::text, NULL::smallint,
            NULL::jsonb, v_level, NULL::integer, NULL::bigint, NULL::timestamptz,
            NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::timestamptz,
            NULL::integer, NULL::double precision, 'feature_level'::text, NULL::timestamptz;
        IF v_freed > 0 AND v_peek THEN
            PERFORM workhorse._wake_v1(p_queue);
        END IF;
        RETURN;
    END IF;
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
            v_used := workhorse._rate_used_v1(p_queue, '', v_period, v_now);
            IF v_used >= v_rate THEN
                v_next := workhorse._rate_next_start_v1(p_queue, '', v_rate, v_period, v_now);
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

    v_keyed := v_governed AND (v_per_key < 2147483647 OR v_rate_key IS NOT NULL);
    IF NOT v_keyed THEN
        -- No policy, or a queue-wide limit only: the row walk, v_room long. SKIP LOCKED, which
        -- ungoverned claims need: they run side by side under the shared lock, and the rows stay
        -- locked until the activation below.
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
        )
        SELECT array_agg(b.id) INTO v_ids FROM best b;
    ELSE
        IF v_hinted THEN
            -- Bring the heads up to date with what was enqueued since the last claim.
            WITH drained AS (
                DELETE FROM workhorse.key_hints h WHERE h.queue = p_queue RETURNING h.ckey
            )
            SELECT array_agg(DISTINCT d.ckey) INTO v_examined FROM drained d;
            PERFORM workhorse._refresh_heads_v1(p_queue, v_examined);
        END IF;

        -- The first v_room admissible heads are enough (a job among the best v_room admissible
        -- ones has at most v_room - 1 other keys' heads ahead of its own key's); each head's key
        -- is read allowance + 1 rows deep, the last of which says where the head moves. A key's
        -- first row not admitted now is its new head; none means the key ran dry.
        IF v_rate_key IS NULL AND v_period IS NULL THEN
            -- No rate limit: a head's allowance is its key's room under the per-key limit, at
            -- most v_room.
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
                -- Only the expired jobs their key still has room for may take one of the v_room
                -- places, or a saturated key's expired job would hide every other expired job
                -- behind it. (They were active, so there are few to number.)
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
                SELECT c.id, c.rank FROM candidates c
                LEFT JOIN active_keys a ON a.ckey = c.ckey
                WHERE c.ckey = '' OR c.nth <= v_per_key - COALESCE(a.n, 0)
                ORDER BY c.rank, c.id
                LIMIT v_room
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
            ), moves AS (
                SELECT array_agg(nh.ckey) AS keys, array_agg(nh.rank) AS ranks,
                       array_agg(nh.id) AS ids
                FROM next_heads nh
                WHERE (nh.head_rank, nh.head_id) IS DISTINCT FROM (nh.rank, nh.id)
            )
            SELECT (SELECT array_agg(a.id ORDER BY a.rank, a.id) FROM admitted a),
                   m.keys, m.ranks, m.ids
            INTO v_ids, v_move_keys, v_move_ranks, v_move_ids
            FROM moves m;
        ELSE
            -- A rate limit: heads are also passed over when their key is out of starts (one
            -- probe of at most ~101 start buckets each), and each candidate key's room is the
            -- lesser of its concurrency left and its starts left.
            WITH active_keys AS (
                SELECT * FROM unnest(v_key_names, v_key_counts) AS a(ckey, n)
            ), heads AS (
                SELECT s.ckey, s.head_rank, s.head_id,
                       LEAST(s.rate_left,
                             v_per_key - COALESCE((SELECT a.n FROM active_keys a
                                                   WHERE a.ckey = s.ckey), 0)) AS allowance
                FROM (
                    SELECT h.ckey, h.head_rank, h.head_id,
                           CASE WHEN v_rate_key IS NULL THEN v_room
                                ELSE LEAST(v_room, v_rate_key - workhorse._rate_used_v1(
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
                -- As in the statement above, with each key's starts left as well.
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
                       AND (v_rate_key IS NULL OR e.nth <= v_rate_key - workhorse._rate_used_v1(
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
                SELECT k.ckey,
                       LEAST(v_per_key - COALESCE(a.n, 0),
                             CASE WHEN v_rate_key IS NULL THEN v_room
                                  ELSE v_rate_key - workhorse._rate_used_v1(
                                      p_queue, k.ckey, v_period_key, v_now) END) AS room
                FROM (SELECT DISTINCT c.ckey FROM candidates c WHERE c.ckey <> '') AS k
                LEFT JOIN active_keys a ON a.ckey = k.ckey
            ), admitted AS (
                SELECT c.id, c.rank FROM candidates c
                LEFT JOIN key_room r ON r.ckey = c.ckey
                WHERE c.ckey = '' OR c.nth <= r.room
                ORDER BY c.rank, c.id
                LIMIT v_room
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
            ), moves AS (
                SELECT array_agg(nh.ckey) AS keys, array_agg(nh.rank) AS ranks,
                       array_agg(nh.id) AS ids
                FROM next_heads nh
                WHERE (nh.head_rank, nh.head_id) IS DISTINCT FROM (nh.rank, nh.id)
            )
            SELECT (SELECT array_agg(a.id ORDER BY a.rank, a.id) FROM admitted a),
                   m.keys, m.ranks, m.ids
            INTO v_ids, v_move_keys, v_move_ranks, v_move_ids
            FROM moves m;
        END IF;

        IF v_move_keys IS NOT NULL THEN
            -- Heads move by an upsert, each looked up in key_heads_pkey (it always exists: heads
            -- change only under the admission lock), and a key that ran dry loses its head, named
            -- by key: a join with the moves, estimated at one row, walks every head of the queue.
            WITH moved AS (
                INSERT INTO workhorse.key_heads AS kh (queue, ckey, head_rank, head_id)
                SELECT p_queue, m.ckey, m.rank, m.id
                FROM unnest(v_move_keys, v_move_ranks, v_move_ids) AS m(ckey, rank, id)
                WHERE m.id IS NOT NULL
                ON CONFLICT (queue, ckey) DO UPDATE
                    SET head_rank = excluded.head_rank, head_id = excluded.head_id
            )
            DELETE FROM workhorse.key_heads kh
            WHERE kh.queue = p_queue
              AND kh.ckey = ANY(ARRAY(SELECT m.ckey
                                      FROM unnest(v_move_keys, v_move_ids) AS m(ckey, id)
                                      WHERE m.id IS NULL));
        END IF;
    END IF;

    IF cardinality(v_ids) > 0 THEN
        -- The activation, and the starts it files for the rate limits in force (queue-wide under
        -- '', and per key), in buckets of 1/100 of the period, each stored at its end.
        RETURN QUERY
        WITH activated AS (
            UPDATE workhorse.jobs j
            SET status = 'active',
                attempts = j.attempts + 1,
                fence = nextval('workhorse.fence_seq'),
                lease_until = clock_timestamp() + make_interval(secs => p_lease),
                started_at = clock_timestamp()
            WHERE j.id = ANY(v_ids)
              AND j.feature_level <= c_level
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
            INSERT INTO workhorse.rate_starts AS r (queue, ckey, bucket_end, n)
            SELECT p_queue, s.ckey,
                   to_timestamp(ceil(EXTRACT(epoch FROM s.at)::double precision
                                     / (s.period / 100)) * (s.period / 100)),
                   s.n
            FROM scopes s
            ON CONFLICT (queue, ckey, bucket_end) DO UPDATE SET n = r.n + excluded.n
        )
        SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts, a.max_attempts,
               a.fence, a.lease_until, a.enqueued_at, a.run_at, a.meta, a.started_at, a.rank,
               NULL::double precision, NULL::text,
               COALESCE(a.scheduled_for, CASE WHEN a.attempts = 1 THEN a.run_at END)
        FROM activated a
        ORDER BY a.rank, a.id;
        GET DIAGNOSTICS v_admitted = ROW_COUNT;
        IF v_keyed AND v_admitted < cardinality(v_ids) THEN
            -- A chosen job was not activated (it changed meanwhile, or needs a newer level):
            -- the heads moved past it, so set its key's head again from its ready jobs.
            PERFORM workhorse._refresh_heads_v1(p_queue, ARRAY(
                SELECT DISTINCT j.ckey FROM workhorse.jobs j
                WHERE j.id = ANY(v_ids) AND j.ckey <> '' AND j.status <> 'active'));
        END IF;
    END IF;

    -- Starts used up: say when the next one is allowed (the queue's, else the soonest of the
    -- first heads whose key is out of starts), so the worker sleeps instead of polling.
    v_next := NULL;
    IF v_rate IS NOT NULL AND v_used + v_admitted >= v_rate THEN
        v_next := workhorse._rate_next_start_v1(p_queue, '', v_rate, v_period, clock_timestamp());
    ELSIF v_rate_key IS NOT NULL AND v_admitted < v_room THEN
        SELECT min(workhorse._rate_next_start_v1(p_queue, h.ckey, v_rate_key, v_period_key, v_now))
        INTO v_next
        FROM (SELECT kh.ckey FROM workhorse.key_heads kh WHERE kh.queue = p_queue
              ORDER BY kh.queue, kh.head_rank, kh.head_id LIMIT v_room) AS h
        WHERE workhorse._rate_used_v1(p_queue, h.ckey, v_period_key, v_now) >= v_rate_key;
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
