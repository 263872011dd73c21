-- The admission of a governed queue whose jobs may cost more than one unit, or whose policy
-- shares by key (docs/design.md "Fair share and job cost", invariants 9 and 10). Called by the claim
-- under the queue's admission lock, after its housekeeping; returns the jobs to activate, in
-- the order chosen, and `rate_blocked`: the queue's rate limit stopped the choice.
--
-- Arguments: the limits in force (an override's where it has one: `p_max` may be NULL; the
-- per-key ones NULL when not set), the synced policy's own limits (`p_policy_*`: a job whose
-- cost can never fit them is held with CostExceedsLimitError; one that only the override keeps
-- out waits), `p_fair` (fairness = 'key'), `p_heads` (the queue keeps key heads, refreshed by the
-- caller), `p_expired` (there are active jobs whose lease expired: claimable again), `p_tasks`
-- (NULL, or the tasks the claiming worker's app declares: another app's jobs are never taken)
-- and `p_filter` (the queue holds another app's ready jobs), and `p_off_keys`, the keys backed
-- off now (docs/design.md "Back-pressure"): passed over from the start, as saturated keys are
-- (the one-stream walks test them as `cardinality(p_off_keys) = 0 OR ...`: a bare NOT ANY made a
-- newer planner's generic plan read the budget-ordered walk past a full budget's backlog).
-- A budget backed off is passed over for the whole call, as a full one is, and
-- `backed_off_until` says when the first such backoff ends (NULL: none). `p_key_limits`: the
-- queue has per-key limits as data (docs/design.md "Per-key limits"), with the set's default
-- (`p_default_*`, NULL: none); each key tracked reads its own row of key_limits once, by its
-- primary key, so the call's cost does not grow with the rows. A key's limits in force are its
-- own, else the default, else the per-key ones in force (`p_per_key`, `p_rate_key`); its own or
-- the default's rate comes without a burst; its weight is its jobs' weight where a job has the
-- default weight 1.
--
-- Units: a job occupies `cost` units of max_active and of its key's max_active_per_key, and
-- counts `rate_cost` starts against both rate limits, and against their bursts (`p_burst` B in
-- force in its window `p_burst_window` = P*B/N, the same per key; NULL: none; burst_starts). Active units are derived here from the
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
--  * with `p_budgeted` (the queue's jobs name budgets: docs/design.md "Named budgets"): the queue's
--    budgets are locked here, in name order, after the queue's lock (every statement takes them
--    in that order). A job of a budget with limits is taken only when it fits the budget's free
--    units (its unexpired active jobs' cost, in every queue), its rate's starts left and its
--    burst's; one that does not passes its budget over for the rest of the call (nothing later
--    of that budget takes the places it waits for) and, in a queue with key heads, its key (a
--    key's order holds); the queue's other jobs go on. One that can never fit the declared
--    budget is held (CostExceedsLimitError). Turns between the queues that share a budget: the
--    queue defers (treats the budget as full for this call) while another queue of the budget
--    whose turn is older wants it (a claim of it met a job of the budget it could not take in
--    the last 10 s) and still has ready jobs of it, and wakes that queue; so freed places go to
--    the queues in turn, not to whichever claims fastest. Returns the budgets with rates
--    (`budget_names`, their windows `budget_periods` and `budget_windows` for the caller to file
--    the starts, their limits in force `budget_rates` and `budget_bursts`, and
--    `budget_stopped`: the budget's rate stopped a job, so the caller says when the next may
--    start, once it filed this call's starts).
-- Cost: a probe per tracked key, then per job chosen one head probe or one key probe, each
-- passing over at most the tracked and passed-over keys: bounded by the batch and the keys with
-- active jobs, never by the backlog. Budgets add per budget of the queue one read of its active
-- jobs (at most its max_active rows), of its start buckets (~101 per window) and of the queues
-- waiting for it, and per job chosen one probe per budget of the queue: the heads of a budget
-- passed over are skipped as a range of key_heads_budget_idx, a queue without heads reads each
-- budget's ready jobs (and those that name none) through jobs_budget_ready_idx. Only a keyed
-- queue's keyless jobs are read past a full budget's keyless ones (at most c_look rows).
CREATE FUNCTION workhorse._choose_units_v1(
    p_queue text, p_limit integer, p_now timestamptz,
    p_max integer, p_per_key integer,
    p_rate integer, p_period double precision, p_rate_key integer, p_period_key double precision,
    p_policy_max integer, p_policy_per_key integer, p_policy_rate integer,
    p_policy_rate_key integer,
    p_fair boolean, p_heads boolean, p_expired boolean, p_tasks text[],
    p_filter boolean, p_budgeted boolean,
    p_burst integer, p_burst_window double precision,
    p_burst_key integer, p_burst_window_key double precision,
    p_policy_burst integer, p_policy_burst_key integer, p_off_keys text[],
    p_key_limits boolean, p_default_max integer, p_default_weight integer,
    p_default_rate integer, p_default_period double precision,
    OUT ids bigint[], OUT rate_blocked boolean,
    OUT budget_names text[], OUT budget_periods double precision[],
    OUT budget_windows double precision[], OUT budget_rates integer[],
    OUT budget_bursts integer[], OUT budget_stopped boolean[],
    OUT backed_off_until timestamptz)
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
    k_c_budget text[] := '{}';
    -- The key's own row of key_limits (NULL: none, or that field unset), read once per tracked
    -- key: its limits in force are its own, else the set's default, else the per-key ones.
    k_own_max integer[] := '{}';
    k_own_weight integer[] := '{}';
    k_own_rate integer[] := '{}';
    k_own_period double precision[] := '{}';
    v_key_rate integer;
    v_key_period double precision;
    v_weight integer;
    -- The queue's budgets that have limits, parallel arrays: name, the declared limits (what
    -- can never fit), units and starts left (rate window, burst window), and this call's
    -- state: blocked (passed over), took a job, met a job it could not take.
    b_name text[] := '{}';
    b_decl_max integer[] := '{}';
    b_decl_rate integer[] := '{}';
    b_decl_burst integer[] := '{}';
    b_free bigint[] := '{}';
    b_rate_left bigint[] := '{}';
    b_burst_left bigint[] := '{}';
    b_rate integer[] := '{}';
    b_period double precision[] := '{}';
    b_burst integer[] := '{}';
    b_window double precision[] := '{}';
    b_took boolean[] := '{}';
    b_wanted boolean[] := '{}';
    b_rate_hit boolean[] := '{}';
    v_blocked text[] := '{}';  -- budgets passed over for the rest of the call
    v_held_budget bigint[] := '{}';
    b_waiter text[] := '{}';  -- a waiting queue to wake if places are left
    v_waiter record;
    v_classes text[] := '{}';  -- the budgets the queue's jobs name, declared or not
    v_found boolean;
    v_other_wait boolean := false;  -- a job waits for something other than a budget's rate
    c_look CONSTANT integer := 256;  -- rows looked at past the jobs of budgets passed over
    v_b integer;
    v_bname text;
    v_passed text[] := p_off_keys;  -- keys passed over: backed off, then saturated
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
    IF p_burst IS NOT NULL THEN
        v_rate_left := LEAST(v_rate_left, p_burst - workhorse._burst_used_v1(
            p_queue, '', p_burst_window, p_now));
    END IF;
    -- A queue without room or starts takes nothing: its budgets are not even locked.
    IF v_free <= 0 THEN
        RETURN;
    END IF;
    IF v_rate_left <= 0 THEN
        rate_blocked := true;
        RETURN;
    END IF;
    IF p_budgeted THEN
        -- The queue's budgets, locked in name order (after the queue's lock, as every statement
        -- that takes both), then read afresh: every claim of every queue that counts them and
        -- every sync or override of them committed before.
        FOR v_bname IN
            SELECT bq.budget FROM workhorse.budget_queues bq
            WHERE bq.queue = p_queue ORDER BY bq.queue, bq.budget
        LOOP
            PERFORM pg_advisory_xact_lock(workhorse._budget_lock_id_v1(v_bname));
            v_classes := v_classes || v_bname;
        END LOOP;
        FOR v_row IN
            SELECT l.*,
                   CASE WHEN l.burst IS NOT NULL AND l.rate IS NOT NULL
                        THEN floor(l.period * LEAST(l.burst, l.rate) / l.rate * 1000) / 1000
                   END AS burst_window
            FROM (
                SELECT bq.budget, bq.last_turn,
                       -- An adaptive budget's, halved by its last backoff (growing back).
                       workhorse._adaptive_max_v1(
                           COALESCE(o.max_active, bd.max_active),
                           CASE WHEN bd.adaptive THEN bo.adaptive_max END, bo.until,
                           bo.retry_after, p_now) AS max_active,
                       COALESCE(o.rate_limit, bd.rate_limit) AS rate,
                       CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_period
                            ELSE bd.rate_period END AS period,
                       COALESCE(o.rate_burst, bd.rate_burst) AS burst,
                       bd.max_active AS decl_max, bd.rate_limit AS decl_rate,
                       bd.rate_burst AS decl_burst,
                       CASE WHEN bo.until > p_now THEN bo.until END AS off_until
                FROM workhorse.budget_queues bq
                LEFT JOIN workhorse.budgets bd ON bd.name = bq.budget
                LEFT JOIN workhorse.budget_controls o
                    ON o.name = bq.budget
                   AND (o.override_expires_at IS NULL OR o.override_expires_at > p_now)
                LEFT JOIN workhorse.backoffs bo
                    ON bo.scope = 'budget' AND bo.name = bq.budget AND bo.ckey = ''
                WHERE bq.queue = p_queue
                  -- A budget nobody declared limits nothing, unless a handler backed it off.
                  AND (bd.name IS NOT NULL OR o.name IS NOT NULL OR bo.until > p_now)
                ORDER BY bq.queue, bq.budget
            ) AS l
            WHERE l.max_active IS NOT NULL OR l.rate IS NOT NULL OR l.off_until IS NOT NULL
        LOOP
            b_name := b_name || v_row.budget;
            b_decl_max := b_decl_max || v_row.decl_max;
            b_decl_rate := b_decl_rate || v_row.decl_rate;
            b_decl_burst := b_decl_burst || v_row.decl_burst;
            b_rate := b_rate || v_row.rate;
            b_period := b_period || v_row.period;
            b_burst := b_burst || LEAST(v_row.burst, v_row.rate);
            b_window := b_window || v_row.burst_window::double precision;
            -- Free units: less its unexpired active jobs' cost and its unexpired holds' units
            -- (docs/design.md "Holds": taken outside tasks, under this same lock).
            b_free := b_free || CASE WHEN v_row.max_active IS NULL THEN c_big
                ELSE v_row.max_active - (
                    SELECT COALESCE(sum(j.cost), 0) FROM workhorse.jobs j
                    WHERE j.budget = v_row.budget AND j.status = 'active'
                      AND j.lease_until > p_now) - (
                    SELECT COALESCE(sum(h.units), 0) FROM workhorse.budget_holds h
                    WHERE h.budget = v_row.budget AND h.lease_until > p_now) END;
            b_rate_left := b_rate_left || CASE WHEN v_row.rate IS NULL THEN c_big
                ELSE v_row.rate - workhorse._budget_starts_used_v1(
                    v_row.budget, 0::smallint, v_row.period, p_now) END;
            b_burst_left := b_burst_left || CASE WHEN v_row.burst_window IS NULL THEN c_big
                ELSE LEAST(v_row.burst, v_row.rate) - workhorse._budget_starts_used_v1(
                    v_row.budget, 1::smallint, v_row.burst_window::double precision, p_now) END;
            b_took := b_took || false;
            b_wanted := b_wanted || false;
            b_rate_hit := b_rate_hit || false;
            IF v_row.rate IS NOT NULL THEN
                budget_names := COALESCE(budget_names, '{}') || v_row.budget;
                budget_periods := COALESCE(budget_periods, '{}') || v_row.period;
                budget_windows := COALESCE(budget_windows, '{}')
                                  || v_row.burst_window::double precision;
            END IF;
            IF v_row.off_until IS NOT NULL THEN
                -- Backed off (docs/design.md "Back-pressure"): passed over for the whole call,
                -- as a full budget is; no turn is given or taken (no other queue may start
                -- one of its jobs either), and the caller sleeps until the first such ends.
                v_blocked := v_blocked || v_row.budget;
                b_waiter := b_waiter || NULL::text;
                backed_off_until := LEAST(backed_off_until, v_row.off_until);
                CONTINUE;
            END IF;
            -- Turns: the other queue of the budget that waits for it with the oldest turn (a
            -- claim of it met a job of the budget it could not take in the last 10 s, and it
            -- still has ready jobs of it). If its turn is older than this queue's, this call
            -- leaves the budget's places to it and wakes it, and wants the budget itself if it
            -- has ready jobs of it (they are not read, so nothing else would say so); else it
            -- is woken at the end if places are left. Only while the budget has room (units,
            -- rate and burst): a full budget is full for every queue, and a wake would only make
            -- the other queue's claim wake this one back (two budgets deferred opposite ways
            -- woke each other at claim speed until a window opened).
            SELECT w.queue, w.last_turn INTO v_waiter
            FROM workhorse.budget_queues w
            WHERE w.budget = v_row.budget AND w.wanted_at IS NOT NULL
              AND w.queue <> p_queue
              AND w.wanted_at > p_now - interval '10 seconds'
              -- (A scalar probe: an EXISTS may be planned as a hash over all the budget's
              -- ready jobs.)
              AND (SELECT j.id FROM workhorse.jobs j
                   WHERE j.budget = v_row.budget AND j.queue = w.queue AND j.status = 'ready'
                   ORDER BY j.budget, j.queue, j.rank, j.id
                   LIMIT 1) IS NOT NULL
            ORDER BY w.budget, w.last_turn NULLS FIRST
            LIMIT 1;
            IF NOT FOUND THEN
                b_waiter := b_waiter || NULL::text;
            ELSIF v_row.last_turn IS NOT NULL
                  AND (v_waiter.last_turn IS NULL OR v_waiter.last_turn < v_row.last_turn)
                  AND b_free[cardinality(b_name)] > 0 AND b_rate_left[cardinality(b_name)] > 0
                  AND b_burst_left[cardinality(b_name)] > 0 THEN
                v_blocked := v_blocked || v_row.budget;
                PERFORM workhorse._wake_v1(v_waiter.queue);
                b_waiter := b_waiter || NULL::text;
                b_wanted[cardinality(b_name)] := EXISTS (
                    SELECT 1 FROM workhorse.jobs j
                    WHERE j.budget = v_row.budget AND j.queue = p_queue AND j.status = 'ready');
                v_other_wait := v_other_wait OR b_wanted[cardinality(b_name)];
            ELSE
                b_waiter := b_waiter || v_waiter.queue;
            END IF;
        END LOOP;
    END IF;

    IF NOT v_all THEN
        -- The tracked keys: those with active units, those of expired jobs, and the keyless.
        FOR v_row IN
            SELECT g.ckey, g.units, kl.max_active, kl.weight, kl.rate_limit, kl.rate_period
            FROM (SELECT t.ckey, sum(t.units)::bigint AS units
                  FROM (SELECT j.ckey, j.cost AS units FROM workhorse.jobs j
                        WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until > p_now
                        UNION ALL
                        SELECT j.ckey, 0 FROM workhorse.jobs j
                        WHERE p_expired AND j.queue = p_queue AND j.status = 'active'
                          AND j.lease_until <= p_now
                        UNION ALL
                        SELECT '', 0) AS t
                  GROUP BY t.ckey) AS g
            -- (LATERAL: one probe of key_limits' primary key per key, never a scan of it.)
            LEFT JOIN LATERAL (
                SELECT k.max_active, k.weight, k.rate_limit, k.rate_period
                FROM workhorse.key_limits k
                WHERE p_key_limits AND k.queue = p_queue AND k.ckey = g.ckey) AS kl ON true
            ORDER BY g.ckey
        LOOP
            k_own_max := k_own_max || v_row.max_active;
            k_own_weight := k_own_weight || v_row.weight::integer;
            k_own_rate := k_own_rate || v_row.rate_limit;
            k_own_period := k_own_period || v_row.rate_period;
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
            k_c_budget := k_c_budget || NULL::text;
        END LOOP;
        -- Each tracked key's first candidate.
        FOR v_i IN 1 .. cardinality(k_key) LOOP
            SELECT c.id, c.rank, c.cost, c.rate_cost, c.weight, c.task, c.budget INTO v_row
            FROM (
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task, j.budget
                 FROM workhorse.jobs j
                 WHERE (k_key[v_i] <> '' OR cardinality(v_blocked) = 0)
                   AND j.queue = p_queue AND j.ckey = k_key[v_i] AND j.status = 'ready'
                 ORDER BY j.queue, j.ckey, j.rank, j.id
                 LIMIT 1)
                UNION ALL
                -- The keyless jobs past the budgets passed over: at most c_look rows looked at.
                (SELECT w.id, w.rank, w.cost, w.rate_cost, w.weight, w.task, w.budget
                 FROM (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task, j.budget
                       FROM workhorse.jobs j
                       WHERE k_key[v_i] = '' AND cardinality(v_blocked) > 0
                         AND j.queue = p_queue AND j.ckey = '' AND j.status = 'ready'
                       ORDER BY j.queue, j.ckey, j.rank, j.id
                       LIMIT c_look) AS w
                 WHERE NOT (COALESCE(w.budget, '') = ANY(v_blocked))
                 ORDER BY w.rank, w.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task, j.budget FROM workhorse.jobs j
                 WHERE p_expired AND j.queue = p_queue AND j.status = 'active'
                   AND j.lease_until <= p_now AND j.ckey = k_key[v_i]
                   AND (j.ckey <> '' OR NOT (COALESCE(j.budget, '') = ANY(v_blocked)))
                 ORDER BY j.rank, j.id
                 LIMIT 1)
            ) AS c
            ORDER BY c.rank, c.id
            LIMIT 1;
            IF FOUND THEN
                k_c_id[v_i] := v_row.id; k_c_rank[v_i] := v_row.rank;
                k_c_cost[v_i] := v_row.cost; k_c_rate[v_i] := v_row.rate_cost;
                k_c_weight[v_i] := v_row.weight; k_c_task[v_i] := v_row.task;
                k_c_budget[v_i] := v_row.budget;
            END IF;
        END LOOP;
    END IF;

    LOOP
        EXIT WHEN v_n >= p_limit OR v_free <= 0;
        v_guard := v_guard + 1;
        EXIT WHEN v_guard > 8 * p_limit + 10000;  -- belt and braces: each pass takes, holds or passes

        v_best := NULL;
        v_from_head := false;
        IF v_all AND p_budgeted AND NOT p_filter THEN
            -- One stream, in a queue whose jobs name budgets: the first of each budget's ready
            -- jobs in the queue and the first of those that name none (jobs_budget_ready_idx; a
            -- budget passed over is not read), and the first expired job.
            SELECT c.id, c.rank, c.cost, c.rate_cost, c.weight, c.ckey, c.task, c.budget
            INTO v_head
            FROM unnest(v_classes) AS b(budget)
            CROSS JOIN LATERAL (
                SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task, j.budget
                FROM workhorse.jobs j
                WHERE j.budget = b.budget AND j.queue = p_queue AND j.status = 'ready'
                  AND (j.rank, j.id) > (v_all_rank, v_all_id)
                  AND (cardinality(p_off_keys) = 0 OR NOT (j.ckey = ANY(p_off_keys)))
                ORDER BY j.budget, j.queue, j.rank, j.id
                LIMIT 1) AS c
            WHERE NOT (b.budget = ANY(v_blocked))
            ORDER BY c.rank, c.id
            LIMIT 1;
            v_found := FOUND;
            SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task, j.budget
            INTO v_row
            FROM workhorse.jobs j
            WHERE j.budget IS NULL AND j.queue = p_queue AND j.status = 'ready'
              AND (j.rank, j.id) > (v_all_rank, v_all_id)
              AND (cardinality(p_off_keys) = 0 OR NOT (j.ckey = ANY(p_off_keys)))
            ORDER BY j.budget, j.queue, j.rank, j.id
            LIMIT 1;
            IF FOUND AND (NOT v_found OR (v_row.rank, v_row.id) < (v_head.rank, v_head.id)) THEN
                v_head := v_row;
                v_found := true;
            END IF;
            IF p_expired THEN
                SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task, j.budget
                INTO v_row
                FROM workhorse.jobs j
                WHERE j.queue = p_queue AND j.status = 'active'
                  AND j.lease_until <= p_now AND (j.rank, j.id) > (v_all_rank, v_all_id)
                  AND NOT (COALESCE(j.budget, '') = ANY(v_blocked))
                  AND (cardinality(p_off_keys) = 0 OR NOT (j.ckey = ANY(p_off_keys)))
                ORDER BY j.rank, j.id
                LIMIT 1;
                IF FOUND AND (NOT v_found OR (v_row.rank, v_row.id) < (v_head.rank, v_head.id))
                THEN
                    v_head := v_row;
                    v_found := true;
                END IF;
            END IF;
            EXIT WHEN NOT v_found;
            v_all_rank := v_head.rank;
            v_all_id := v_head.id;
            v_key := v_head.ckey;
        ELSIF v_all THEN
            -- One stream: the next ready row or expired job after the last one taken.
            SELECT c.id, c.rank, c.cost, c.rate_cost, c.weight, c.ckey, c.task, c.budget INTO v_head
            FROM (
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task, j.budget
                 FROM workhorse.jobs j
                 WHERE NOT p_filter AND j.queue = p_queue AND j.status = 'ready'
                   AND (j.rank, j.id) > (v_all_rank, v_all_id)
                   AND NOT (COALESCE(j.budget, '') = ANY(v_blocked))
                   AND (cardinality(p_off_keys) = 0 OR NOT (j.ckey = ANY(p_off_keys)))
                 ORDER BY j.queue, j.rank, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT k.id, k.rank, k.cost, k.rate_cost, k.weight, k.ckey, k.task, k.budget
                 FROM unnest(CASE WHEN p_filter THEN p_tasks END) AS t(task)
                 CROSS JOIN LATERAL (
                     SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task, j.budget
                     FROM workhorse.jobs j
                     WHERE j.queue = p_queue AND j.task = t.task AND j.status = 'ready'
                       AND (j.rank, j.id) > (v_all_rank, v_all_id)
                       AND NOT (COALESCE(j.budget, '') = ANY(v_blocked))
                       AND (cardinality(p_off_keys) = 0 OR NOT (j.ckey = ANY(p_off_keys)))
                     ORDER BY j.queue, j.task, j.rank, j.id
                     LIMIT 1) AS k
                 ORDER BY k.rank, k.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.ckey, j.task, j.budget
                 FROM workhorse.jobs j
                 WHERE p_expired AND j.queue = p_queue AND j.status = 'active'
                   AND j.lease_until <= p_now AND (j.rank, j.id) > (v_all_rank, v_all_id)
                   AND (p_tasks IS NULL OR j.task = ANY(p_tasks))
                   AND NOT (COALESCE(j.budget, '') = ANY(v_blocked))
                   AND (cardinality(p_off_keys) = 0 OR NOT (j.ckey = ANY(p_off_keys)))
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
            WHERE cardinality(v_blocked) = 0 AND h.queue = p_queue
              AND NOT (h.ckey = ANY(k_key)) AND NOT (h.ckey = ANY(v_passed))
            ORDER BY h.queue, h.head_rank, h.head_id
            LIMIT 1;
            IF NOT FOUND AND cardinality(v_blocked) > 0 THEN
                -- Heads whose job names a budget passed over are passed over too (its key with
                -- it), as whole ranges of key_heads_budget_idx: the first head of each other
                -- budget the queue's jobs name, and of the heads that name none.
                SELECT c.ckey, c.head_rank, c.head_id INTO v_row
                FROM (SELECT x.budget FROM unnest(v_classes) AS x(budget)
                      WHERE NOT (x.budget = ANY(v_blocked))) AS b
                CROSS JOIN LATERAL (
                    SELECT h.ckey, h.head_rank, h.head_id
                    FROM workhorse.key_heads h
                    WHERE h.queue = p_queue AND h.budget = b.budget
                      AND NOT (h.ckey = ANY(k_key)) AND NOT (h.ckey = ANY(v_passed))
                    ORDER BY h.queue, h.budget, h.head_rank, h.head_id
                    LIMIT 1) AS c
                UNION ALL
                (SELECT h.ckey, h.head_rank, h.head_id
                 FROM workhorse.key_heads h
                 WHERE h.queue = p_queue AND h.budget IS NULL
                   AND NOT (h.ckey = ANY(k_key)) AND NOT (h.ckey = ANY(v_passed))
                 ORDER BY h.queue, h.budget, h.head_rank, h.head_id
                 LIMIT 1)
                ORDER BY 2, 3
                LIMIT 1;
            END IF;
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
                -- A job's own weight other than 1 wins; else its key's (its row's, the default;
                -- the keyless jobs are no key: theirs).
                v_weight := CASE WHEN k_c_weight[v_i] <> 1 OR k_key[v_i] = ''
                                 THEN k_c_weight[v_i]
                                 ELSE COALESCE(k_own_weight[v_i], p_default_weight, 1) END;
                v_ratio := CASE WHEN p_fair THEN k_units[v_i]::double precision / v_weight
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
                SELECT k.max_active, k.weight, k.rate_limit, k.rate_period INTO v_row
                FROM workhorse.key_limits k
                WHERE p_key_limits AND k.queue = p_queue AND k.ckey = v_key;
                k_own_max := k_own_max || v_row.max_active;
                k_own_weight := k_own_weight || v_row.weight::integer;
                k_own_rate := k_own_rate || v_row.rate_limit;
                k_own_period := k_own_period || v_row.rate_period;
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
                k_c_budget := k_c_budget || NULL::text;
                v_best := cardinality(k_key);
                SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task, j.budget INTO v_row
                FROM workhorse.jobs j
                WHERE j.queue = p_queue AND j.ckey = v_key AND j.status = 'ready'
                ORDER BY j.queue, j.ckey, j.rank, j.id
                LIMIT 1;
                IF FOUND THEN
                    k_c_id[v_best] := v_row.id; k_c_rank[v_best] := v_row.rank;
                    k_c_cost[v_best] := v_row.cost; k_c_rate[v_best] := v_row.rate_cost;
                    k_c_weight[v_best] := v_row.weight; k_c_task[v_best] := v_row.task;
                k_c_budget[v_best] := v_row.budget;
                END IF;
                CONTINUE;
            END IF;
            v_key := k_key[v_best];
            v_head := NULL;
            SELECT k_c_id[v_best] AS id, k_c_rank[v_best] AS rank, k_c_cost[v_best] AS cost,
                   k_c_rate[v_best] AS rate_cost, k_c_task[v_best] AS task,
                   k_c_budget[v_best] AS budget INTO v_head;
        END IF;

        IF p_tasks IS NOT NULL AND NOT (v_head.task = ANY(p_tasks)) THEN
            -- Another app's job: never taken here. Its key is passed over, unless it does not
            -- fit the free units: then nothing behind it takes them (no starvation).
            EXIT WHEN v_head.cost > v_free;
            v_passed := v_passed || v_key;
            CONTINUE;
        END IF;

        v_b := array_position(b_name, v_head.budget);
        -- Never fits the synced policy, or the declared budget: held, and the choice goes on.
        -- (A key's own limits, or the set's default, in place of the policy's per-key ones; a key
        -- with a rate of its own has no burst. One stream has no per-key limits of its own.)
        IF NOT v_all THEN
            v_key_rate := COALESCE(k_own_rate[v_best], p_default_rate);
        END IF;
        IF v_head.cost > COALESCE(p_policy_max, c_big)
           OR (v_key <> '' AND v_head.cost > COALESCE(
                   CASE WHEN v_all THEN p_policy_per_key
                        ELSE COALESCE(k_own_max[v_best], p_default_max, p_policy_per_key) END,
                   c_big))
           OR v_head.rate_cost > COALESCE(p_policy_rate, c_big)
           OR (v_key <> '' AND v_head.rate_cost > COALESCE(
                   CASE WHEN v_all THEN p_policy_rate_key
                        ELSE COALESCE(v_key_rate, p_policy_rate_key) END, c_big))
           OR v_head.rate_cost > COALESCE(p_policy_burst, c_big)
           OR (v_key <> '' AND (v_all OR v_key_rate IS NULL)
               AND v_head.rate_cost > COALESCE(p_policy_burst_key, c_big)) THEN
            v_held := v_held || v_head.id;
        ELSIF v_b IS NOT NULL
              AND (v_head.cost > COALESCE(b_decl_max[v_b], c_big)
                   OR v_head.rate_cost > COALESCE(b_decl_rate[v_b], c_big)
                   OR v_head.rate_cost > COALESCE(b_decl_burst[v_b], c_big)) THEN
            v_held_budget := v_held_budget || v_head.id;
        ELSE
            IF v_key <> '' AND NOT v_all THEN
                IF k_rate_left[v_best] IS NULL THEN
                    IF v_key_rate IS NOT NULL THEN  -- its own rate, or the set's default
                        v_key_period := CASE WHEN k_own_rate[v_best] IS NOT NULL
                                             THEN k_own_period[v_best] ELSE p_default_period END;
                        k_rate_left[v_best] := v_key_rate - workhorse._rate_used_v1(
                            p_queue, v_key, v_key_period, p_now);
                    ELSE
                        k_rate_left[v_best] := CASE WHEN p_rate_key IS NULL THEN c_big
                            ELSE p_rate_key - workhorse._rate_used_v1(p_queue, v_key,
                                                                       p_period_key, p_now) END;
                    END IF;
                    IF p_burst_key IS NOT NULL AND v_key_rate IS NULL THEN
                        k_rate_left[v_best] := LEAST(k_rate_left[v_best],
                            p_burst_key - workhorse._burst_used_v1(p_queue, v_key,
                                                                   p_burst_window_key, p_now));
                    END IF;
                END IF;
                IF k_units[v_best] + v_head.cost
                       > COALESCE(k_own_max[v_best], p_default_max, p_per_key, c_big)
                   OR v_head.rate_cost > k_rate_left[v_best] THEN
                    -- The key's head does not fit the key's units or starts left: passed over.
                    v_passed := v_passed || v_key;
                    v_other_wait := true;
                    CONTINUE;
                END IF;
            END IF;
            IF v_b IS NOT NULL
               AND (v_head.budget = ANY(v_blocked) OR v_head.cost > b_free[v_b]
                    OR v_head.rate_cost > b_rate_left[v_b]
                    OR v_head.rate_cost > b_burst_left[v_b]) THEN
                -- Its budget is full, out of starts, or left to another queue's turn: passed
                -- over for the rest of the call (nothing later of it takes the places it waits
                -- for), with its key in a queue of heads; the keyless stream and the one stream
                -- go on past the budget's jobs.
                IF NOT (v_head.budget = ANY(v_blocked)) THEN
                    v_blocked := v_blocked || v_head.budget;
                    b_rate_hit[v_b] := v_head.rate_cost > b_rate_left[v_b]
                                       OR v_head.rate_cost > b_burst_left[v_b];
                    v_other_wait := v_other_wait OR NOT b_rate_hit[v_b];
                END IF;
                b_wanted[v_b] := true;
                IF v_key <> '' AND NOT v_all THEN
                    v_passed := v_passed || v_key;
                    CONTINUE;
                END IF;
            ELSE
                IF v_head.cost > v_free THEN
                    v_other_wait := true;
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
                IF v_b IS NOT NULL THEN
                    b_free[v_b] := b_free[v_b] - v_head.cost;
                    b_rate_left[v_b] := b_rate_left[v_b] - v_head.rate_cost;
                    b_burst_left[v_b] := b_burst_left[v_b] - v_head.rate_cost;
                    b_took[v_b] := true;
                END IF;
            END IF;
        END IF;

        IF NOT v_all THEN
            -- The key's next candidate, after the one just taken or held.
            k_pos_rank[v_best] := v_head.rank;
            k_pos_id[v_best] := v_head.id;
            SELECT c.id, c.rank, c.cost, c.rate_cost, c.weight, c.task, c.budget INTO v_row
            FROM (
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task, j.budget
                 FROM workhorse.jobs j
                 WHERE (v_key <> '' OR cardinality(v_blocked) = 0)
                   AND j.queue = p_queue AND j.ckey = v_key AND j.status = 'ready'
                   AND (j.rank, j.id) > (k_pos_rank[v_best], k_pos_id[v_best])
                 ORDER BY j.queue, j.ckey, j.rank, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT w.id, w.rank, w.cost, w.rate_cost, w.weight, w.task, w.budget
                 FROM (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task, j.budget
                       FROM workhorse.jobs j
                       WHERE v_key = '' AND cardinality(v_blocked) > 0
                         AND j.queue = p_queue AND j.ckey = '' AND j.status = 'ready'
                         AND (j.rank, j.id) > (k_pos_rank[v_best], k_pos_id[v_best])
                       ORDER BY j.queue, j.ckey, j.rank, j.id
                       LIMIT c_look) AS w
                 WHERE NOT (COALESCE(w.budget, '') = ANY(v_blocked))
                 ORDER BY w.rank, w.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.id, j.rank, j.cost, j.rate_cost, j.weight, j.task, j.budget FROM workhorse.jobs j
                 WHERE p_expired AND j.queue = p_queue AND j.status = 'active'
                   AND j.lease_until <= p_now AND j.ckey = v_key
                   AND (j.rank, j.id) > (k_pos_rank[v_best], k_pos_id[v_best])
                   AND (j.ckey <> '' OR NOT (COALESCE(j.budget, '') = ANY(v_blocked)))
                 ORDER BY j.rank, j.id
                 LIMIT 1)
            ) AS c
            ORDER BY c.rank, c.id
            LIMIT 1;
            IF FOUND THEN
                k_c_id[v_best] := v_row.id; k_c_rank[v_best] := v_row.rank;
                k_c_cost[v_best] := v_row.cost; k_c_rate[v_best] := v_row.rate_cost;
                k_c_weight[v_best] := v_row.weight; k_c_task[v_best] := v_row.task;
                k_c_budget[v_best] := v_row.budget;
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
                                  'rate_limit_per_key N=%s, rate_burst=%s, '
                                  'rate_burst_per_key=%s) or its key''s own limits',
                                  j.cost, j.rate_cost, p_queue,
                                  p_policy_max, p_policy_per_key, p_policy_rate,
                                  p_policy_rate_key, p_policy_burst, p_policy_burst_key),
                'traceback', NULL)
        WHERE j.id = ANY(v_held);
        PERFORM workhorse._ended_v2(v_held);
        IF p_heads THEN
            PERFORM workhorse._refresh_heads_v1(p_queue, ARRAY(
                SELECT DISTINCT j.ckey FROM workhorse.jobs j
                WHERE j.id = ANY(v_held) AND j.ckey <> ''));
        END IF;
    END IF;
    IF cardinality(v_held_budget) > 0 THEN
        -- Held, never to start under its declared budget: an operator retries it after
        -- raising the budget's limits.
        UPDATE workhorse.jobs j
        SET status = 'held', finished_at = p_now, lease_until = NULL, expires_at = NULL,
            error = jsonb_build_object(
                'type', 'CostExceedsLimitError',
                'message', format('cost %s and rate_cost %s can never fit budget %s '
                                  '(max_active=%s, rate_limit N=%s, rate_burst=%s)', j.cost,
                                  j.rate_cost, j.budget, bd.max_active, bd.rate_limit,
                                  bd.rate_burst),
                'traceback', NULL)
        FROM workhorse.budgets bd
        WHERE j.id = ANY(v_held_budget) AND bd.name = j.budget;
        PERFORM workhorse._ended_v2(v_held_budget);
        IF p_heads THEN
            PERFORM workhorse._refresh_heads_v1(p_queue, ARRAY(
                SELECT DISTINCT j.ckey FROM workhorse.jobs j
                WHERE j.id = ANY(v_held_budget) AND j.ckey <> ''));
        END IF;
    END IF;
    IF cardinality(b_name) > 0 THEN
        -- The turns: a budget this call took from is the queue's newest turn; one whose job it
        -- could not take is wanted (refreshed at most once a second, to spare writes).
        UPDATE workhorse.budget_queues bq
        SET last_turn = CASE WHEN t.took THEN clock_timestamp() ELSE bq.last_turn END,
            wanted_at = CASE WHEN t.wanted THEN clock_timestamp() ELSE NULL END
        FROM unnest(b_name, b_took, b_wanted) AS t(budget, took, wanted)
        WHERE bq.budget = t.budget AND bq.queue = p_queue
          AND (t.took OR (t.wanted AND (bq.wanted_at IS NULL
                                        OR bq.wanted_at < clock_timestamp() - interval '1 second')));
        -- Places of a budget left after this call, and another queue waits for them: wake it.
        PERFORM workhorse._wake_v1(w.queue)
        FROM (SELECT DISTINCT x.queue
              FROM unnest(b_waiter, b_free, b_rate_left, b_burst_left) AS x(queue, free, r, b)
              WHERE x.queue IS NOT NULL AND x.free > 0 AND x.r > 0 AND x.b > 0) AS w;
        -- A budget's rate stopped a job, and nothing else keeps a job of this queue waiting
        -- (its units, a key, a full or deferred budget free up without a clock: the caller
        -- must not sleep until a rate's next start then).
        v_other_wait := v_other_wait OR v_free <= 0;
        SELECT array_agg(b.hit AND NOT v_other_wait ORDER BY b.ord),
               array_agg(b.rate ORDER BY b.ord),
               array_agg(b.burst ORDER BY b.ord)
        INTO budget_stopped, budget_rates, budget_bursts
        FROM unnest(b_name, b_rate_hit, b_rate, b_burst) WITH ORDINALITY
             AS b(name, hit, rate, burst, ord)
        WHERE b.rate IS NOT NULL;
    END IF;
    ids := v_taken;
END
$$;
