-- Enqueue a batch in one statement, and say of each job whether this enqueue inserted it.
-- Arrays are parallel (one entry per job; a NULL array means NULL for every job); the rows come
-- back in input order as (id, duplicate): duplicate is true when no row was inserted for that
-- entry and `id` is an existing job's.
--
-- Every job is one of four kinds, by the key it carries (the caller sends at most one):
-- * No key: inserted.
-- * `p_idempotency_keys`: inserted only while no job of the same task has that key (in any
--   status, until retention prunes it); otherwise that job's id. The unique index decides, so
--   concurrent enqueues of one key make one job (an uncommitted one makes the second wait, as
--   any unique index does); the same key twice in one batch gives the first one's id twice.
-- * `p_unique_keys` (a digest of the job's `by` values, made by the caller), with
--   `p_unique_periods` (seconds, or NULL) and `p_unique_states` (comma-separated statuses, or
--   NULL: waiting,scheduled,ready,active; a suspended job counts as active): a duplicate of the job of the same task with an equal
--   digest (and, with a period, enqueued in the same period bucket, counted from the Unix epoch
--   on the database's clock) whose status is one of the states; otherwise inserted. The bucket
--   is part of the stored `unique_key`, and the index on (task, unique_key) is exact under
--   concurrency. A job that left the states keeps its unique_key until an equal enqueue comes:
--   that enqueue clears it (so the key never blocks a new job) and inserts.
-- * `p_job_keys` with `p_job_key_modes` ('replace', the default, or 'preserve_run_at'): at most
--   one pending (scheduled, ready) job per task and key. If the key's holder is pending it is
--   updated in place (payload and meta; run_at and priority too under 'replace'; its status
--   follows its run_at) and its id returned as a duplicate; otherwise (the holder is active or
--   finished, or there is none) the holder's job_key is cleared and a new job inserted with the
--   key, in this transaction, under the holder's row lock: the key belongs to the newest job,
--   and an older one that returns to `scheduled` runs on without it. Concurrent enqueues of one
--   key: the index on (task, job_key) makes the second wait for the first's commit, and it then
--   updates the first's job. Keys are taken in (task, key) order, so two batches never
--   deadlock on each other's keys; one key twice in a batch ends with the later arguments.
--
-- Ids follow input order within a batch (each entry gets its candidate id first; a duplicate's
-- is left unused). `p_feature_levels` (NULL: every job level 1) is the feature level each job
-- needs; a job above level 1 raises its queue's level in queue_levels, in this transaction, so
-- that no claim of a lower level sees the job without seeing its queue's level too. Keys need no
-- level of their own: see migrations/0002_0.3.0.sql, "job keys".
--
-- `p_costs`, `p_rate_costs` and `p_weights` (NULL: 1 for every job) are each job's cost, rate
-- cost and weight (docs/design.md "Fair share and job cost"). A cost or rate cost other than 1
-- raises its queue's level to at least 2 (a claim of level 1 cannot count it); the job row
-- keeps its own level (see migrations/0002_0.3.0.sql, "fair share and cost"). A job whose cost exceeds
-- its queue's synced max_active or max_active_per_key, or whose rate cost exceeds a synced
-- rate limit's N, can never start: the enqueue refuses it (SQLSTATE WH005, before anything is
-- written). The stored policy is the one checked; an override that lowers a limit does not
-- refuse (the job waits for it to end). The same holds for a rate burst (rate_cost above B), and
-- for the declared budget a job names (cost above its max_active, rate cost above its N or B).
-- Takes each queue's enqueue gate in
-- shared mode (sorted), hints the keys of ready keyed jobs it made or changed, and wakes the
-- queues' claimers at commit. On a queue whose policy sets on_key_full, the new keyed jobs then
-- go through _on_key_full_v1, under the queue's admission lock.
--
-- `p_budgets` (NULL: none for every job) is the named budget each job names (docs/design.md "Named
-- budgets"), stored on the row as it is, declared or not. A job that names one raises its
-- queue's level to at least 2, as a cost does (see migrations/0002_0.3.0.sql, "budgets"), and records the
-- (budget, queue) pair in budget_queues (ON CONFLICT DO NOTHING: no existing row is locked).
--
-- `p_tags` (NULL: none for every job) is each job's tags as a JSON array of strings (or NULL),
-- checked and deduplicated by the caller: stored on the row in their order, and one job_tags row
-- each for the lookups by tag (see migrations/0002_0.3.0.sql, "tags"). A duplicate keeps its own
-- tags; a job_key replace takes the new ones, as it takes the rest of the call's options.
--
-- `p_expires_ats` or `p_expires_ins` (seconds from now), and `p_deadlines` or `p_deadline_ins`
-- (NULL arrays: none) are each job's expiry and deadline (docs/design.md "Deadlines"): the row
-- keeps its deadline and its start_by, the earlier of the two. Either raises the queue's level
-- to 2 (a claim of level 1 knows no deadline), as a cost does.
CREATE FUNCTION workhorse.enqueue_v2(
    p_tasks text[],
    p_queues text[],
    p_ckeys text[],
    p_priorities smallint[],
    p_payloads text[],
    p_run_ats timestamptz[],
    p_delays double precision[],
    p_max_attempts integer[],
    p_on_failures text[],
    p_metas text[],
    p_idempotency_keys text[],
    p_feature_levels smallint[] DEFAULT NULL,
    p_unique_keys text[] DEFAULT NULL,
    p_unique_periods double precision[] DEFAULT NULL,
    p_unique_states text[] DEFAULT NULL,
    p_job_keys text[] DEFAULT NULL,
    p_job_key_modes text[] DEFAULT NULL,
    p_costs integer[] DEFAULT NULL,
    p_rate_costs integer[] DEFAULT NULL,
    p_weights smallint[] DEFAULT NULL,
    p_budgets text[] DEFAULT NULL,
    p_tags text[] DEFAULT NULL,
    p_expires_ats timestamptz[] DEFAULT NULL,
    p_expires_ins double precision[] DEFAULT NULL,
    p_deadlines timestamptz[] DEFAULT NULL,
    p_deadline_ins double precision[] DEFAULT NULL
) RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql VOLATILE
-- Generic plans, made once a session: the statements below take whole arrays as parameters,
-- which the planner cannot see into, so a custom plan is no better, and planning each of them
-- again at every call (what the default chooses for such statements) cost more than the rest of
-- a keyed enqueue of one job.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_queue text;
    v_n integer := COALESCE(cardinality(p_tasks), 0);
    v_inserted bigint[];
    v_cand bigint[];
    v_sequence regclass;
    v_ukeys text[];
    v_ids bigint[];
    v_dup boolean[];
    v_done boolean[];
    v_hint_queues text[] := '{}';
    v_hint_keys text[] := '{}';
    v_woken text[] := '{}';
    v_i integer;
    v_passes integer := 0;
    v_due timestamptz;
    v_replace boolean;
    v_holder record;
    v_row record;
    v_status text;
    v_new bigint;
    v_left boolean;
    v_full_queues text[] := '{}';
    v_deadline timestamptz;  -- a keyed entry's deadline and start_by (docs/design.md "Deadlines")
    v_start_by timestamptz;
    -- What an on_key_full cancel keeps (the default retention's: no app runs these jobs).
    c_canceled_retention CONSTANT text := '{"canceled": 86400}';
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- A queue whose policy acts on a full key (on_key_full) serializes this enqueue with the
    -- key's claims: its admission lock (exclusive, sorted) comes before the enqueue gates, the
    -- order a sync takes them in. A policy that changes meanwhile is read again under the lock.
    FOR v_queue IN
        SELECT DISTINCT t.q FROM unnest(p_queues, p_ckeys) AS t(q, k)
        WHERE t.k IS NOT NULL
          AND EXISTS (SELECT 1 FROM workhorse.policies p
                      WHERE p.queue = t.q AND p.on_key_full <> 'queue')
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(v_queue));
        v_full_queues := v_full_queues || v_queue;
    END LOOP;
    -- Sorted, so that two multi-queue enqueues and an install take the gates in one order.
    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock_shared(workhorse._enqueue_gate_id_v1(v_queue));
    END LOOP;

    IF p_costs IS NOT NULL OR p_rate_costs IS NOT NULL THEN
        -- A cost that can never fit the queue's synced policy is refused before anything is
        -- written (the policy row is locked by the sync that changes it, under the gate we hold
        -- in shared mode only for enqueues: a concurrent sync may still lower it, and the claim
        -- then holds the job with CostExceedsLimitError).
        -- A key's limits are its own (key_limits), else its queue's default, else the policy's
        -- per-key ones (docs/design.md "Per-key limits"); a rate of its own has no burst.
        SELECT l.queue, l.cost, l.rate_cost, l.max_active, l.max_active_per_key, l.rate_limit,
               l.rate_limit_per_key, l.ckey, l.rate_burst, l.rate_burst_per_key
        INTO v_row
        FROM (
            SELECT t.queue, t.cost, t.rate_cost, t.ckey, t.ord, p.max_active, p.rate_limit,
                   p.rate_burst,
                   COALESCE(kl.max_active, ks.default_max_active, p.max_active_per_key)
                       AS max_active_per_key,
                   COALESCE(kl.rate_limit, ks.default_rate_limit, p.rate_limit_per_key)
                       AS rate_limit_per_key,
                   CASE WHEN COALESCE(kl.rate_limit, ks.default_rate_limit) IS NULL
                        THEN p.rate_burst_per_key END AS rate_burst_per_key
            FROM unnest(p_queues, p_costs, p_rate_costs, p_ckeys)
                 WITH ORDINALITY AS t(queue, cost, rate_cost, ckey, ord)
            JOIN workhorse.policies p ON p.queue = t.queue
            LEFT JOIN workhorse.key_limit_sets ks ON ks.queue = t.queue
            LEFT JOIN LATERAL (
                SELECT k.max_active, k.rate_limit FROM workhorse.key_limits k
                WHERE ks.queue IS NOT NULL AND k.queue = t.queue AND k.ckey = t.ckey) AS kl
                ON true
        ) AS l
        WHERE COALESCE(l.cost, 1) > COALESCE(l.max_active, 2147483647)
           OR (l.ckey IS NOT NULL
               AND COALESCE(l.cost, 1) > COALESCE(l.max_active_per_key, 2147483647))
           OR COALESCE(l.rate_cost, 1) > COALESCE(l.rate_limit, 2147483647)
           OR COALESCE(l.rate_cost, 1) > COALESCE(l.rate_burst, 2147483647)
           OR (l.ckey IS NOT NULL
               AND COALESCE(l.rate_cost, 1) > COALESCE(l.rate_limit_per_key, 2147483647))
           OR (l.ckey IS NOT NULL
               AND COALESCE(l.rate_cost, 1) > COALESCE(l.rate_burst_per_key, 2147483647))
        ORDER BY l.ord
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'a job of cost % and rate_cost % can never start on queue %: its '
                            'policy (with its key''s own limits) allows max_active=%, '
                            'max_active_per_key=%, rate_limit N=%, '
                            'rate_limit_per_key N=%, rate_burst=%, rate_burst_per_key=%',
                COALESCE(v_row.cost, 1), COALESCE(v_row.rate_cost, 1), v_row.queue,
                v_row.max_active, v_row.max_active_per_key, v_row.rate_limit,
                v_row.rate_limit_per_key, v_row.rate_burst, v_row.rate_burst_per_key
                USING ERRCODE = 'WH005';
        END IF;
        IF p_budgets IS NOT NULL THEN
            -- The same for the declared budget a job names (docs/design.md "Named budgets": its cost
            -- counts against the budget's max_active, its rate cost against its rate and burst).
            SELECT t.budget, t.cost, t.rate_cost, b.max_active, b.rate_limit, b.rate_burst
            INTO v_row
            FROM unnest(p_budgets, p_costs, p_rate_costs)
                 WITH ORDINALITY AS t(budget, cost, rate_cost, ord)
            JOIN workhorse.budgets b ON b.name = t.budget
            WHERE COALESCE(t.cost, 1) > COALESCE(b.max_active, 2147483647)
               OR COALESCE(t.rate_cost, 1) > COALESCE(b.rate_limit, 2147483647)
               OR COALESCE(t.rate_cost, 1) > COALESCE(b.rate_burst, 2147483647)
            ORDER BY t.ord
            LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'a job of cost % and rate_cost % can never start in budget %: '
                                'it allows max_active=%, rate_limit N=%, rate_burst=%',
                    COALESCE(v_row.cost, 1), COALESCE(v_row.rate_cost, 1), v_row.budget,
                    v_row.max_active, v_row.rate_limit, v_row.rate_burst
                    USING ERRCODE = 'WH005';
            END IF;
        END IF;
    END IF;

    IF p_feature_levels IS NOT NULL OR p_costs IS NOT NULL OR p_rate_costs IS NOT NULL
       OR p_budgets IS NOT NULL OR p_expires_ats IS NOT NULL OR p_expires_ins IS NOT NULL
       OR p_deadlines IS NOT NULL OR p_deadline_ins IS NOT NULL THEN
        -- Raised before the jobs exist, and never lowered: a queue that used a feature keeps
        -- the claims that do not know it away. A cost other than 1, a budget, an expiry or a
        -- deadline is level 2.
        INSERT INTO workhorse.queue_levels AS lv (queue, feature_level)
        SELECT t.queue, max(GREATEST(COALESCE(t.level, 1),
                                     CASE WHEN COALESCE(t.cost, 1) <> 1
                                               OR COALESCE(t.rate_cost, 1) <> 1
                                               OR t.budget IS NOT NULL
                                               OR COALESCE(t.ea, t.da) IS NOT NULL OR COALESCE(t.ei, t.di) IS NOT NULL
                                          THEN 2 ELSE 1 END))
        FROM unnest(p_queues, p_feature_levels, p_costs, p_rate_costs, p_budgets,
                    p_expires_ats, p_expires_ins, p_deadlines, p_deadline_ins)
             AS t(queue, level, cost, rate_cost, budget, ea, ei, da, di)
        GROUP BY t.queue
        HAVING max(GREATEST(COALESCE(t.level, 1),
                            CASE WHEN COALESCE(t.cost, 1) <> 1 OR COALESCE(t.rate_cost, 1) <> 1
                                      OR t.budget IS NOT NULL
                                      OR COALESCE(t.ea, t.da) IS NOT NULL OR COALESCE(t.ei, t.di) IS NOT NULL
                                 THEN 2 ELSE 1 END)) > 1
        ORDER BY t.queue
        ON CONFLICT (queue) DO UPDATE SET feature_level = excluded.feature_level
            WHERE lv.feature_level < excluded.feature_level;
    END IF;
    IF p_budgets IS NOT NULL THEN
        INSERT INTO workhorse.budget_queues (budget, queue)
        SELECT DISTINCT t.budget, t.queue FROM unnest(p_budgets, p_queues) AS t(budget, queue)
        WHERE t.budget IS NOT NULL
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    END IF;

    IF NOT EXISTS (SELECT 1 FROM unnest(p_idempotency_keys, p_unique_keys, p_job_keys)
                   AS k(idem, ukey, jkey)
                   WHERE k.idem IS NOT NULL OR k.ukey IS NOT NULL OR k.jkey IS NOT NULL) THEN
        -- No keys: every row is inserted, and ids follow input order (the plain enqueue's cost).
        -- A new statement, so the policy read behind the hints sees any install that finished
        -- while we waited at the gate.
        WITH input AS (
            SELECT t.*,
                   COALESCE(t.run_at, now() + make_interval(secs => COALESCE(t.delay, 0))) AS due
            FROM unnest(p_tasks, p_queues, p_ckeys, p_priorities, p_payloads, p_run_ats,
                        p_delays, p_max_attempts, p_on_failures, p_metas, p_feature_levels,
                        p_costs, p_rate_costs, p_weights, p_budgets, p_tags, p_expires_ats,
                        p_expires_ins, p_deadlines, p_deadline_ins)
                 WITH ORDINALITY
                 AS t(task, queue, ckey, priority, payload, run_at, delay, max_attempts,
                      on_failure, meta, level, cost, rate_cost, weight, budget, tags, ea, ei,
                      da, di, ord)
        ), bounded AS (
            SELECT d.*, LEAST(COALESCE(d.ea, now() + make_interval(secs => d.ei)), d.deadline)
                       AS start_by
            FROM (SELECT i.*, COALESCE(i.da, now() + make_interval(secs => i.di)) AS deadline
                  FROM input i) AS d
        ), inserted AS (
            INSERT INTO workhorse.jobs
                (task, queue, ckey, priority, payload, status, max_attempts, on_failure, run_at,
                 meta, feature_level, cost, rate_cost, weight, budget, tags, deadline, start_by)
            SELECT i.task, i.queue, COALESCE(i.ckey, ''), i.priority, i.payload::jsonb,
                   CASE WHEN i.due > now() THEN 'scheduled' ELSE 'ready' END,
                   i.max_attempts, i.on_failure, i.due, COALESCE(i.meta, '{}')::jsonb,
                   COALESCE(i.level, 1), COALESCE(i.cost, 1), COALESCE(i.rate_cost, 1),
                   COALESCE(i.weight, 1), i.budget,
                   CASE WHEN i.tags IS NOT NULL
                        THEN ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)) END,
                   i.deadline, i.start_by
            FROM bounded i
            ORDER BY i.ord
            RETURNING id, queue, ckey, status, tags
        ), tagged AS (
            INSERT INTO workhorse.job_tags (tag, job_id)
            SELECT x.tag, ins.id FROM inserted ins CROSS JOIN LATERAL unnest(ins.tags) AS x(tag)
            WHERE ins.tags IS NOT NULL
        ), hinted AS (
            INSERT INTO workhorse.key_hints (queue, ckey)
            SELECT DISTINCT i.queue, i.ckey
            FROM inserted i
            JOIN (SELECT DISTINCT q FROM unnest(p_queues) AS q) AS keyed
              ON keyed.q = i.queue AND workhorse._keyed_v2(keyed.q)
            WHERE i.ckey <> '' AND i.status = 'ready'
        )
        SELECT array_agg(ins.id ORDER BY ins.id) INTO v_inserted FROM inserted ins;
        IF cardinality(v_full_queues) > 0 THEN
            PERFORM workhorse._on_key_full_v1(v_full_queues, v_inserted, c_canceled_retention);
        END IF;
        FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q LOOP
            PERFORM workhorse._wake_v1(v_queue);
        END LOOP;
        RETURN QUERY SELECT u.id, false FROM unnest(v_inserted) WITH ORDINALITY AS u(id, n)
                     ORDER BY u.n;
        RETURN;
    END IF;

    -- Each entry's candidate id, in input order: the id it gets if it is inserted.
    -- The identity's sequence looked up once, not once a job.
    v_sequence := pg_get_serial_sequence('workhorse.jobs', 'id')::regclass;
    v_cand := ARRAY(SELECT nextval(v_sequence) FROM generate_series(1, v_n) ORDER BY 1);
    v_ids := array_fill(NULL::bigint, ARRAY[v_n]);
    v_dup := array_fill(false, ARRAY[v_n]);
    v_done := array_fill(false, ARRAY[v_n]);
    -- A unique job's stored key: its digest, and its period's bucket (now(): the transaction's
    -- clock, as enqueued_at).
    IF p_unique_keys IS NOT NULL THEN
        v_ukeys := ARRAY(
            SELECT CASE WHEN u.k IS NULL OR u.p IS NULL THEN u.k
                        ELSE u.k || '@'
                             || floor(extract(epoch FROM now())::double precision / u.p)::bigint
                   END
            FROM unnest(p_unique_keys, p_unique_periods) WITH ORDINALITY AS u(k, p, ord)
            ORDER BY u.ord);
    END IF;

    -- ---- job keys: one entry at a time, in (task, key, input) order --------------------------
    FOR v_i IN SELECT k.ord FROM unnest(p_tasks, p_job_keys) WITH ORDINALITY AS k(task, jkey, ord)
               WHERE k.jkey IS NOT NULL ORDER BY k.task, k.jkey, k.ord LOOP
        v_due := COALESCE(p_run_ats[v_i],
                          now() + make_interval(secs => COALESCE(p_delays[v_i], 0)));
        v_replace := COALESCE(p_job_key_modes[v_i], 'replace') = 'replace';
        v_deadline := COALESCE(p_deadlines[v_i], now() + make_interval(secs => p_deadline_ins[v_i]));
        v_start_by := LEAST(COALESCE(p_expires_ats[v_i],
                                     now() + make_interval(secs => p_expires_ins[v_i])),
                            v_deadline);
        LOOP
            SELECT j.id, j.status, j.queue, j.ckey, j.tags INTO v_holder
            FROM workhorse.jobs j
            WHERE j.task = p_tasks[v_i] AND j.job_key = p_job_keys[v_i] AND j.job_key IS NOT NULL
            FOR UPDATE;
            IF FOUND AND v_holder.status IN ('scheduled', 'ready') THEN
                UPDATE workhorse.jobs j
                SET payload = p_payloads[v_i]::jsonb,
                    meta = j.meta || COALESCE(p_metas[v_i], '{}')::jsonb,
                    cost = COALESCE(p_costs[v_i], 1),
                    rate_cost = COALESCE(p_rate_costs[v_i], 1),
                    weight = COALESCE(p_weights[v_i], 1),
                    budget = p_budgets[v_i],
                    tags = CASE WHEN p_tags[v_i] IS NOT NULL
                                THEN ARRAY(SELECT jsonb_array_elements_text(p_tags[v_i]::jsonb))
                           END,
                    deadline = v_deadline,
                    start_by = v_start_by,
                    run_at = CASE WHEN v_replace THEN v_due ELSE j.run_at END,
                    priority = CASE WHEN v_replace THEN p_priorities[v_i] ELSE j.priority END,
                    status = CASE WHEN (CASE WHEN v_replace THEN v_due ELSE j.run_at END) > now()
                                  THEN 'scheduled' ELSE 'ready' END
                WHERE j.id = v_holder.id
                RETURNING j.status INTO v_status;
                IF v_holder.tags IS NOT NULL OR p_tags[v_i] IS NOT NULL THEN
                    -- Its lookup rows follow its new tags.
                    DELETE FROM workhorse.job_tags t
                    WHERE t.job_id = v_holder.id AND t.tag = ANY(v_holder.tags);
                    INSERT INTO workhorse.job_tags (tag, job_id)
                    SELECT x.tag, v_holder.id
                    FROM jsonb_array_elements_text(p_tags[v_i]::jsonb) AS x(tag)
                    WHERE p_tags[v_i] IS NOT NULL;
                END IF;
                -- A ready job's head may have moved (its rank, or it left `ready`), as after a
                -- cancel: the claim refreshes the hinted key.
                IF v_status = 'ready' OR v_holder.status = 'ready' THEN
                    v_hint_queues := v_hint_queues || v_holder.queue;
                    v_hint_keys := v_hint_keys || v_holder.ckey;
                END IF;
                v_woken := v_woken || v_holder.queue;
                v_ids[v_i] := v_holder.id;
                v_dup[v_i] := true;
                EXIT;
            END IF;
            IF FOUND THEN
                -- Active or finished: the new job takes the key over.
                UPDATE workhorse.jobs j SET job_key = NULL WHERE j.id = v_holder.id;
            END IF;
            INSERT INTO workhorse.jobs
                (id, task, queue, ckey, priority, payload, status, max_attempts, on_failure,
                 run_at, meta, feature_level, job_key, cost, rate_cost, weight, budget, tags,
                 deadline, start_by)
            OVERRIDING SYSTEM VALUE
            VALUES (v_cand[v_i], p_tasks[v_i], p_queues[v_i], COALESCE(p_ckeys[v_i], ''),
                    p_priorities[v_i], p_payloads[v_i]::jsonb,
                    CASE WHEN v_due > now() THEN 'scheduled' ELSE 'ready' END,
                    p_max_attempts[v_i], p_on_failures[v_i], v_due,
                    COALESCE(p_metas[v_i], '{}')::jsonb, COALESCE(p_feature_levels[v_i], 1),
                    p_job_keys[v_i], COALESCE(p_costs[v_i], 1), COALESCE(p_rate_costs[v_i], 1),
                    COALESCE(p_weights[v_i], 1), p_budgets[v_i],
                    CASE WHEN p_tags[v_i] IS NOT NULL
                         THEN ARRAY(SELECT jsonb_array_elements_text(p_tags[v_i]::jsonb)) END,
                    v_deadline, v_start_by)
            ON CONFLICT DO NOTHING
            RETURNING id, queue, ckey, status INTO v_row;
            IF FOUND THEN
                IF v_row.status = 'ready' THEN
                    v_hint_queues := v_hint_queues || v_row.queue;
                    v_hint_keys := v_hint_keys || v_row.ckey;
                END IF;
                v_ids[v_i] := v_row.id;
                EXIT;
            END IF;
            -- Another enqueue inserted the key's job first and has committed: go again.
        END LOOP;
        v_done[v_i] := true;
    END LOOP;

    -- ---- every other entry: set by set, until each has its job ---------------------------------
    LOOP
        EXIT WHEN NOT (false = ANY(v_done));  -- a batch of job keys only: nothing left
        v_passes := v_passes + 1;
        IF v_passes > 100 THEN
            -- Each pass resolves what no concurrent change undid; this is not expected.
            RAISE EXCEPTION 'enqueue_v2: entries still unresolved after % passes', v_passes - 1;
        END IF;
        IF v_ukeys IS NOT NULL THEN
            -- A job no longer in an equal enqueue's states gives its unique key up.
            -- Each entry's holder found by an index probe; the conditions are repeated on the
            -- updated row, so that a holder changed meanwhile is judged as it is now.
            UPDATE workhorse.jobs j SET unique_key = NULL
            FROM (SELECT u.ukey, u.states, h.id
                  FROM unnest(p_tasks, v_ukeys, p_unique_states, v_done)
                       AS u(task, ukey, states, done)
                  CROSS JOIN LATERAL (
                      SELECT x.id FROM workhorse.jobs x
                      WHERE x.task = u.task AND x.unique_key = u.ukey
                        AND x.unique_key IS NOT NULL) AS h
                  WHERE u.ukey IS NOT NULL AND NOT u.done) AS s
            WHERE j.id = s.id AND j.unique_key = s.ukey
              -- A suspended job is an active one that waits (docs/design.md "Durable
              -- execution"): it stays unique wherever `active` does.
              AND NOT (CASE WHEN j.status = 'suspended' THEN 'active' ELSE j.status END
                       = ANY(COALESCE(string_to_array(s.states, ','),
                                      '{waiting,scheduled,ready,active}')));
        END IF;
        WITH input AS (
            SELECT t.*,
                   COALESCE(t.run_at, now() + make_interval(secs => COALESCE(t.delay, 0))) AS due
            FROM unnest(p_tasks, p_queues, p_ckeys, p_priorities, p_payloads, p_run_ats,
                        p_delays, p_max_attempts, p_on_failures, p_metas, p_idempotency_keys,
                        p_feature_levels, v_ukeys, v_cand, v_done, p_costs, p_rate_costs,
                        p_weights, p_budgets, p_tags, p_expires_ats, p_expires_ins, p_deadlines,
                        p_deadline_ins)
                 WITH ORDINALITY
                 AS t(task, queue, ckey, priority, payload, run_at, delay, max_attempts,
                      on_failure, meta, idem, level, ukey, cand, done, cost, rate_cost, weight,
                      budget, tags, ea, ei, da, di, ord)
            WHERE NOT t.done
        ), bounded AS (
            SELECT d.*, LEAST(COALESCE(d.ea, now() + make_interval(secs => d.ei)), d.deadline)
                       AS start_by
            FROM (SELECT i.*, COALESCE(i.da, now() + make_interval(secs => i.di)) AS deadline
                  FROM input i) AS d
        ), inserted AS (
            INSERT INTO workhorse.jobs
                (id, task, queue, ckey, priority, payload, status, max_attempts, on_failure,
                 run_at, meta, idempotency_key, feature_level, unique_key, cost, rate_cost,
                 weight, budget, tags, deadline, start_by)
            OVERRIDING SYSTEM VALUE
            SELECT i.cand, i.task, i.queue, COALESCE(i.ckey, ''), i.priority, i.payload::jsonb,
                   CASE WHEN i.due > now() THEN 'scheduled' ELSE 'ready' END,
                   i.max_attempts, i.on_failure, i.due, COALESCE(i.meta, '{}')::jsonb, i.idem,
                   COALESCE(i.level, 1), i.ukey, COALESCE(i.cost, 1), COALESCE(i.rate_cost, 1),
                   COALESCE(i.weight, 1), i.budget,
                   CASE WHEN i.tags IS NOT NULL
                        THEN ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)) END,
                   i.deadline, i.start_by
            FROM bounded i
            ORDER BY i.ord
            ON CONFLICT DO NOTHING
            RETURNING id, queue, ckey, status
        )
        SELECT v_hint_queues || COALESCE(array_agg(ins.queue) FILTER (WHERE ins.status = 'ready'),
                                         '{}'),
               v_hint_keys || COALESCE(array_agg(ins.ckey) FILTER (WHERE ins.status = 'ready'),
                                       '{}')
        INTO v_hint_queues, v_hint_keys
        FROM inserted ins;

        -- A new statement: it sees the rows just inserted, and those of enqueues that committed
        -- while the insert waited on them. An entry not inserted takes its holder's id; one
        -- whose holder is gone (pruned) or left the states meanwhile goes round again.
        v_left := false;
        FOR v_row IN
            SELECT t.ord, t.cand,
                   ins.id IS NOT NULL AS inserted,
                   CASE WHEN ins.id IS NOT NULL THEN ins.id
                        WHEN t.idem IS NOT NULL THEN
                            (SELECT j.id FROM workhorse.jobs j
                             WHERE j.task = t.task AND j.idempotency_key = t.idem
                               AND j.idempotency_key IS NOT NULL)
                        WHEN t.ukey IS NOT NULL THEN
                            (SELECT j.id FROM workhorse.jobs j
                             WHERE j.task = t.task AND j.unique_key = t.ukey
                               AND j.unique_key IS NOT NULL
                               AND CASE WHEN j.status = 'suspended' THEN 'active'
                                        ELSE j.status END
                                   = ANY(COALESCE(string_to_array(t.states, ','),
                                                  '{waiting,scheduled,ready,active}')))
                   END AS job_id
            FROM unnest(p_tasks, p_idempotency_keys, v_ukeys, p_unique_states, v_cand, v_done)
                 WITH ORDINALITY AS t(task, idem, ukey, states, cand, done, ord)
            -- Inserted means its candidate id exists (no one else uses it): one primary-key
            -- probe an entry, where a join with the inserted ids, planned for arrays of unknown
            -- size, may compare every pair.
            LEFT JOIN LATERAL (SELECT j.id FROM workhorse.jobs j WHERE j.id = t.cand) AS ins
                   ON true
            WHERE NOT t.done
        LOOP
            IF v_row.job_id IS NULL THEN
                v_left := true;
            ELSE
                v_ids[v_row.ord] := v_row.job_id;
                v_dup[v_row.ord] := NOT v_row.inserted;
                v_done[v_row.ord] := true;
            END IF;
        END LOOP;
        EXIT WHEN NOT v_left;
    END LOOP;

    IF cardinality(v_full_queues) > 0 THEN
        PERFORM workhorse._on_key_full_v1(
            v_full_queues,
            ARRAY(SELECT u.id FROM unnest(v_ids, v_dup) AS u(id, dup) WHERE NOT u.dup),
            c_canceled_retention);
    END IF;

    IF p_tags IS NOT NULL THEN
        -- The lookup rows of the jobs this call inserted (a job_key replace wrote its own).
        INSERT INTO workhorse.job_tags (tag, job_id)
        SELECT x.tag, u.id
        FROM unnest(v_ids, v_dup, p_tags) AS u(id, dup, tags)
        CROSS JOIN LATERAL jsonb_array_elements_text(u.tags::jsonb) AS x(tag)
        WHERE NOT u.dup AND u.tags IS NOT NULL;
    END IF;

    INSERT INTO workhorse.key_hints (queue, ckey)
    SELECT h.queue, h.ckey
    FROM (SELECT DISTINCT h.queue, h.ckey FROM unnest(v_hint_queues, v_hint_keys) AS h(queue, ckey)
          WHERE h.ckey <> '') AS h
    WHERE workhorse._keyed_v2(h.queue);

    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues || v_woken) AS q LOOP
        PERFORM workhorse._wake_v1(v_queue);
    END LOOP;

    RETURN QUERY SELECT u.id, u.dup FROM unnest(v_ids, v_dup) WITH ORDINALITY AS u(id, dup, n)
                 ORDER BY u.n;
END
$$;
