-- The admission of a governed queue whose jobs may cost more than one unit, or whose policy
-- shares by key (DESIGN.md "Fair share and job cost", invariants 9 and 10). Called by the claim
-- under the queue's admission lock, after its housekeeping; returns the jobs to activate, in
-- the order chosen, and `rate_blocked`: the queue's rate limit stopped the choice.
--
-- Arguments: the limits in force (an override's where it has one: `p_max` may be NULL; the
-- per-key ones NULL when not set), the synced policy's own limits (`p_policy_*`: a job whose
-- cost can never fit them is held with CostExceedsLimitError; one that only the override keeps
-- out waits), `p_fair` (fairness = 'key'), `p_heads` (the queue keeps key heads, refreshed by the
-- caller), `p_expired` (there are active jobs whose lease expired: claimable again), `p_tasks`
-- (NULL, or the tasks the claiming worker's app declares: another app's jobs are never taken)
-- and `p_filter` (the queue holds another app's ready jobs).
--
-- Units: a job occupies `cost` units of max_active and of its key's max_active_per_key, and
-- counts `rate_cost` starts against both rate limits. Active units are derived here from the
-- active jobs (at most max_active of them), never stored.
--
-- The choice is one job at a time, at most p_limit of them:
--  * the candidates are each tracked key's next job (the keys with active units, the keys of
--    expired jobs, the keyless jobs as one key, and every key already taken from in this call),
--    and the first key head (key_heads, in head order) of a key not tracked and not passed over;
--    a queue without heads is one stream, its ready rows in (rank, id) order;
--  * FIFO: the candidate first in (rank, id) order. Fair: among the candidates of the best
--    priority, the key with the smallest active units / weight (the weight of the candidate,
--    its key's head), ties to the older job; an untracked key has no active units (ratio 0), so
--    the first head is the best of them;
--  * a candidate whose cost or rate cost exceeds the synced policy is held
--    (CostExceedsLimitError) and the choice goes on; one whose key has not the units or starts
--    left passes its key over for the rest of the call, like a saturated key; one that does not
--    fit the queue's free units or starts ends the choice: later jobs may not take the units it
--    waits for (no starvation).
--  * with `p_filter`: one stream merges one walk per known task, so another app's jobs are never
--    read; a key whose candidate is another app's job is passed over for the rest of the call,
--    unless that job does not fit the queue's free units (then the choice ends, as for any job).
-- Cost: a probe per tracked key, then per job chosen one head probe or one key probe, each
-- passing over at most the tracked and passed-over keys: bounded by the batch and the keys with
-- active jobs, never by the backlog.
CREATE FUNCTION workhorse._choose_units_v1(
    p_queue text, p_limit integer, p_now timestamptz,
    p_max integer, p_per_key integer,
    p_rate integer, p_period double precision, p_rate_key integer, p_period_key double precision,
    p_policy_max integer, p_policy_per_key integer, p_policy_rate integer,
    p_policy_rate_key integer,
    p_fair boolean, p_heads boolean, p_expired boolean, p_tasks text[],
    p_filter boolean,
    OUT ids bigint[], OUT rate_blocked boolean)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    c_big CONSTANT bigint := 9223372036854775807;
    v_free bigint;
    v_rate_left bigint;
    -- Tracked keys, parallel arrays: key, active units, starts left (NULL: not read yet), the
    -- last position taken from the key (its next candidate comes after it), and the candidate.
    k_key text[] := '{}';
    k_units bigint[] := '{}';
    k_rate_left bigint[] := '{}';
    k_pos_rank integer[] := '{}';
    k_pos_id bigint[] := '{}';
    k_c_id bigint[] := '{}';
    k_c_rank integer[] := '{}';
    k_c_cost integer[] := '{}';
    k_c_rate integer[] := '{}';
    k_c_weight integer[] := '{}';
    k_c_task text[] := '{}';
    v_passed text[] := '{}';
    v_taken bigint[] := '{}';
    v_held bigint[] := '{}';
    v_i integer;
    v_best integer;
    v_row record;
    v_head record;
    v_all boolean := NOT p_heads;  -- one stream: no heads, no per-key limits
    v_all_rank integer := -2147483648;
    v_all_id bigint := 0;
    v_key text;
    v_rank integer;
    v_ratio double precision;
    v_best_ratio double precision;
    v_best_id bigint;
    v_best_rank integer;
    v_from_head boolean;
    v_units bigint;
    v_n integer := 0;
    v_guard integer := 0;
BEGIN
    rate_blocked := false;
    ids := '{}';
    SELECT COALESCE(sum(j.cost), 0) INTO v_units
    FROM workhorse.jobs j
    WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until > p_now;
    v_free := CASE WHEN p_max IS NULL THEN c_big ELSE p_max - v_units END;
    v_rate_left := CASE WHEN p_rate IS NULL THEN c_big
                        ELSE p_rate - workhorse._rate_used_v1(p_queue, '', p_period, p_now) END;
    IF v_free <= 0 THEN
        RETURN;
    END IF;
    IF v_rate_left <= 0 THEN
        rate_blocked := true;
        RETURN;
    END IF;

    IF NOT v_all THEN
        -- The tracked keys: those with active units, those of expired jobs, and the keyless.
        FOR v_row IN
            SELECT t.ckey, sum(t.units)::bigint AS units
            FROM (SELECT j.ckey, j.cost AS units FROM workhorse.jobs j
                  WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until > p_now
                  UNION ALL
                  SELECT j.ckey, 0 FROM workhorse.jobs j
                  WHERE p_expired AND j.queue = p_queue AND j.status = 'active'
                    AND j.lease_until <= p_now
                  UNION ALL
                  SELECT '', 0) AS t
            GROUP BY t.ckey
            ORDER BY t.ckey
        LOOP
            k_key := k_key || v_row.ckey;
            k_units := k_units || v_row.units;
            k_rate_left := k_rate_left || NULL::bigint;
            k_pos_rank := k_pos_rank || (-2147483648);
            k_pos_id := k_pos_id || 0::bigint;
            k_c_id := k_c_id || NULL::bigint;
            k_c_rank := k_c_rank || NULL::integer;
            k_c_cost := k_c_cost || NULL::integer;
            k_c_rate := k_c_rate || NULL::integer;
            k_c_weight := k_c_weight || NULL::integer;
            k_c_task := k_c_task || NULL::text;
        END LOOP;
        -- Each tracked key's first candidate.
        FOR v_i IN 1 .. cardinality(k_key) LOOP
            SELECT c.id, c.rank, c.cost, c.rate_cost, c.weight, c.task INTO v_row
            FROM (
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task FROM workhorse.jobs j
                 WHERE j.queue = p_queue AND j.ckey = k_key[v_i] AND j.status = 'ready'
                 ORDER BY j.queue, j.ckey, j.rank, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task FROM workhorse.jobs j
                 WHERE p_expired AND j.queue = p_queue AND j.status = 'active'
                   AND j.lease_until <= p_now AND j.ckey = k_key[v_i]
                 ORDER BY j.rank, j.id
                 LIMIT 1)
            ) AS c
            ORDER BY c.rank, c.id
            LIMIT 1;
            IF FOUND THEN
                k_c_id[v_i] := v_row.id; k_c_rank[v_i] := v_row.rank;
                k_c_cost[v_i] := v_row.cost; k_c_rate[v_i] := v_row.rate_cost;
                k_c_weight[v_i] := v_row.weight; k_c_task[v_i] := v_row.task;
            END IF;
        END LOOP;
    END IF;

    LOOP
        EXIT WHEN v_n >= p_limit OR v_free <= 0;
        v_guard := v_guard + 1;
        EXIT WHEN v_guard > 8 * p_limit + 10000;  -- belt and braces: each pass takes, holds or passes

        v_best := NULL;
        v_from_head := false;
        IF v_all THEN
            -- One stream: the next ready row or expired job after the last one taken.
            SELECT c.id, c.rank, c.cost, c.rate_cost, c.weight, c.ckey, c.task INTO v_head
            FROM (
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task
                 FROM workhorse.jobs j
                 WHERE NOT p_filter AND j.queue = p_queue AND j.status = 'ready'
                   AND (j.rank, j.id) > (v_all_rank, v_all_id)
                 ORDER BY j.queue, j.rank, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT k.id, k.rank, k.cost, k.rate_cost, k.weight, k.ckey, k.task
                 FROM unnest(CASE WHEN p_filter THEN p_tasks END) AS t(task)
                 CROSS JOIN LATERAL (
                     SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task
                     FROM workhorse.jobs j
                     WHERE j.queue = p_queue AND j.task = t.task AND j.status = 'ready'
                       AND (j.rank, j.id) > (v_all_rank, v_all_id)
                     ORDER BY j.queue, j.task, j.rank, j.id
                     LIMIT 1) AS k
                 ORDER BY k.rank, k.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task
                 FROM workhorse.jobs j
                 WHERE p_expired AND j.queue = p_queue AND j.status = 'active'
                   AND j.lease_until <= p_now AND (j.rank, j.id) > (v_all_rank, v_all_id)
                   AND (p_tasks IS NULL OR j.task = ANY(p_tasks))
                 ORDER BY j.rank, j.id
                 LIMIT 1)
            ) AS c
            ORDER BY c.rank, c.id
            LIMIT 1;
            EXIT WHEN NOT FOUND;
            v_all_rank := v_head.rank;
            v_all_id := v_head.id;
            v_key := v_head.ckey;
        ELSE
            -- The first head of a key neither tracked nor passed over: its key has no active
            -- units (ratio 0).
            SELECT h.ckey, h.head_rank, h.head_id INTO v_row
            FROM workhorse.key_heads h
            WHERE h.queue = p_queue
              AND NOT (h.ckey = ANY(k_key)) AND NOT (h.ckey = ANY(v_passed))
            ORDER BY h.queue, h.head_rank, h.head_id
            LIMIT 1;
            IF FOUND THEN
                v_best_rank := v_row.head_rank;
                v_best_id := v_row.head_id;
                v_best_ratio := 0;
                v_from_head := true;
                v_key := v_row.ckey;
            ELSE
                v_best_rank := NULL;
            END IF;
            FOR v_i IN 1 .. cardinality(k_key) LOOP
                CONTINUE WHEN k_c_id[v_i] IS NULL OR k_key[v_i] = ANY(v_passed);
                v_ratio := CASE WHEN p_fair THEN k_units[v_i]::double precision / k_c_weight[v_i]
                                ELSE 0 END;
                IF v_best_rank IS NULL
                   OR k_c_rank[v_i] < v_best_rank
                   OR (k_c_rank[v_i] = v_best_rank AND v_ratio < v_best_ratio)
                   OR (k_c_rank[v_i] = v_best_rank AND v_ratio = v_best_ratio
                       AND k_c_id[v_i] < v_best_id) THEN
                    v_best := v_i;
                    v_best_rank := k_c_rank[v_i];
                    v_best_id := k_c_id[v_i];
                    v_best_ratio := v_ratio;
                    v_from_head := false;
                END IF;
            END LOOP;
            EXIT WHEN v_best_rank IS NULL;  -- no admissible ready work left
            IF v_from_head THEN
                -- Start tracking the head's key (no active units), its candidate read from its
                -- ready rows, and choose again.
                k_key := k_key || v_key;
                k_units := k_units || 0::bigint;
                k_rate_left := k_rate_left || NULL::bigint;
                k_pos_rank := k_pos_rank || (-2147483648);
                k_pos_id := k_pos_id || 0::bigint;
                k_c_id := k_c_id || NULL::bigint;
                k_c_rank := k_c_rank || NULL::integer;
                k_c_cost := k_c_cost || NULL::integer;
                k_c_rate := k_c_rate || NULL::integer;
                k_c_weight := k_c_weight || NULL::integer;
                k_c_task := k_c_task || NULL::text;
                v_best := cardinality(k_key);
                SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task INTO v_row
                FROM workhorse.jobs j
                WHERE j.queue = p_queue AND j.ckey = v_key AND j.status = 'ready'
                ORDER BY j.queue, j.ckey, j.rank, j.id
                LIMIT 1;
                IF FOUND THEN
                    k_c_id[v_best] := v_row.id; k_c_rank[v_best] := v_row.rank;
                    k_c_cost[v_best] := v_row.cost; k_c_rate[v_best] := v_row.rate_cost;
                    k_c_weight[v_best] := v_row.weight; k_c_task[v_best] := v_row.task;
                END IF;
                CONTINUE;
            END IF;
            v_key := k_key[v_best];
            v_head := NULL;
            SELECT k_c_id[v_best] AS id, k_c_rank[v_best] AS rank, k_c_cost[v_best] AS cost,
                   k_c_rate[v_best] AS rate_cost, k_c_task[v_best] AS task INTO v_head;
        END IF;

        IF p_tasks IS NOT NULL AND NOT (v_head.task = ANY(p_tasks)) THEN
            -- Another app's job: never taken here. Its key is passed over, unless it does not
            -- fit the free units: then nothing behind it takes them (no starvation).
            EXIT WHEN v_head.cost > v_free;
            v_passed := v_passed || v_key;
            CONTINUE;
        END IF;

        -- Never fits the synced policy: held, and the choice goes on.
        IF v_head.cost > COALESCE(p_policy_max, c_big)
           OR (v_key <> '' AND v_head.cost > COALESCE(p_policy_per_key, c_big))
           OR v_head.rate_cost > COALESCE(p_policy_rate, c_big)
           OR (v_key <> '' AND v_head.rate_cost > COALESCE(p_policy_rate_key, c_big)) THEN
            v_held := v_held || v_head.id;
        ELSE
            IF v_key <> '' AND NOT v_all THEN
                IF k_rate_left[v_best] IS NULL THEN
                    k_rate_left[v_best] := CASE WHEN p_rate_key IS NULL THEN c_big
                        ELSE p_rate_key - workhorse._rate_used_v1(p_queue, v_key, p_period_key,
                                                                   p_now) END;
                END IF;
                IF k_units[v_best] + v_head.cost > COALESCE(p_per_key, c_big)
                   OR v_head.rate_cost > k_rate_left[v_best] THEN
                    -- The key's head does not fit the key's units or starts left: passed over.
                    v_passed := v_passed || v_key;
                    CONTINUE;
                END IF;
            END IF;
            IF v_head.cost > v_free THEN
                EXIT;  -- no starvation: nothing behind it takes the units it waits for
            END IF;
            IF v_head.rate_cost > v_rate_left THEN
                rate_blocked := true;
                EXIT;
            END IF;
            v_taken := v_taken || v_head.id;
            v_n := v_n + 1;
            v_free := v_free - v_head.cost;
            v_rate_left := v_rate_left - v_head.rate_cost;
            IF NOT v_all THEN
                k_units[v_best] := k_units[v_best] + v_head.cost;
                k_rate_left[v_best] := k_rate_left[v_best] - v_head.rate_cost;
            END IF;
        END IF;

        IF NOT v_all THEN
            -- The key's next candidate, after the one just taken or held.
            k_pos_rank[v_best] := v_head.rank;
            k_pos_id[v_best] := v_head.id;
            SELECT c.id, c.rank, c.cost, c.rate_cost, c.weight, c.task INTO v_row
            FROM (
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task FROM workhorse.jobs j
                 WHERE j.queue = p_queue AND j.ckey = v_key AND j.status = 'ready'
                   AND (j.rank, j.id) > (k_pos_rank[v_best], k_pos_id[v_best])
                 ORDER BY j.queue, j.ckey, j.rank, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task FROM workhorse.jobs j
                 WHERE p_expired AND j.queue = p_queue AND j.status = 'active'
                   AND j.lease_until <= p_now AND j.ckey = v_key
                   AND (j.rank, j.id) > (k_pos_rank[v_best], k_pos_id[v_best])
                 ORDER BY j.rank, j.id
                 LIMIT 1)
            ) AS c
            ORDER BY c.rank, c.id
            LIMIT 1;
            IF FOUND THEN
                k_c_id[v_best] := v_row.id; k_c_rank[v_best] := v_row.rank;
                k_c_cost[v_best] := v_row.cost; k_c_rate[v_best] := v_row.rate_cost;
                k_c_weight[v_best] := v_row.weight; k_c_task[v_best] := v_row.task;
            ELSE
                k_c_id[v_best] := NULL;
            END IF;
        END IF;
    END LOOP;

    IF cardinality(v_held) > 0 THEN
        -- Held, never to start under this policy: an operator retries it after raising a limit.
        UPDATE workhorse.jobs j
        SET status = 'held', finished_at = p_now, lease_until = NULL, expires_at = NULL,
            error = jsonb_build_object(
                'type', 'CostExceedsLimitError',
                'message', format('cost %s and rate_cost %s can never fit the policy of queue %s '
                                  '(max_active=%s, max_active_per_key=%s, rate_limit N=%s, '
                                  'rate_limit_per_key N=%s)', j.cost, j.rate_cost, p_queue,
                                  p_policy_max, p_policy_per_key, p_policy_rate,
                                  p_policy_rate_key),
                'traceback', NULL)
        WHERE j.id = ANY(v_held);
        PERFORM workhorse._ended_v1(v_held);
        IF p_heads THEN
            PERFORM workhorse._refresh_heads_v1(p_queue, ARRAY(
                SELECT DISTINCT j.ckey FROM workhorse.jobs j
                WHERE j.id = ANY(v_held) AND j.ckey <> ''));
        END IF;
    END IF;
    ids := v_taken;
END
$$;
