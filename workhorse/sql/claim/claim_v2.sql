-- Claim: record a slot's finished jobs of one queue and claim their replacements in one call, so
-- that capacity freed goes straight to the next job, in one round trip and one acquisition of the
-- queue's admission lock. This is the claim of feature level 2, the level of 0.3.0: level 1's
-- admission, with a per-key rate limit's next start counted from the end of the claim.
--
-- Arguments: `p_queue`; `p_limit`, the most jobs to claim (NULL or below 1: none, only record);
-- `p_lease`, in seconds; the successes to record first, as _record_successes_v2 takes them
-- (`p_ids`, `p_fences`, `p_results` as JSON text, `p_retention_ix`, `p_retentions`; NULL arrays
-- when there are none); `p_tasks`, the task names the claiming worker's app declares (NULL: any
-- task); `p_expect_full`, whether the caller's last claim found the queue full (only then does
-- a claim with no successes first look, unlocked, whether it still is: that look counts the
-- active jobs once more, which a claim that will find room should not pay).
-- `p_async_commit`: when this call waited for the queue's admission lock behind a queue of
-- claims (more than 2 ms), its transaction commits without waiting for its WAL flush
-- (synchronous_commit off for the transaction only; see "The commit after the lock" below) and
-- says so with an 'unflushed' marker; the caller then waits for the flush itself with a commit
-- barrier (statements/commit_barrier.sql) before it acts on the reply. Only for a caller whose
-- call is its own transaction.
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
--  * when the queue's max_active left no room, or this claim took the last places (the claim
--    in units says nothing), a marker row with no id and `status` 'full': the worker then
--    leaves the queue's wake-ups to its own next outcome while it runs jobs there.
--  * when this claim commits asynchronously (`p_async_commit`, and it queued for the lock), a
--    marker row with no id and `status` 'unflushed': send the commit barrier before acting.
-- A governed queue's claimers are woken when this call freed more places than it took.
--
-- Admission (docs/design.md, invariants 1 to 7):
--  * A queue with a policy or a control row is governed: its claims hold the queue's admission
--    lock exclusively, so each counts every committed claim; other queues' claims share it and
--    walk the ready rows with SKIP LOCKED. Active means an unexpired lease; a job whose lease
--    expired is claimable again and uses an attempt. A paused queue admits nothing.
--    Two calls skip the lock, because they cannot admit: one that asks for no job (it only
--    records successes, as complete does), and one with no successes that expects the queue
--    full and finds it so in its committed snapshot (a claim not yet committed only adds to
--    that count).
--  * A queue-wide limit only, or none: the row walk, priority then id order, at most the room.
--    A plain governed queue (max_active its one rule, nothing else to do: see the branch
--    after the successes) takes it in two statements, the count and the activation.
--  * A per-key limit or rate: the walk over key heads in admission order, passing over saturated
--    keys and keys out of starts, so the cost grows with the keys passed over and the batch,
--    never with a key's backlog.
--  * Costs and fair share (invariants 9 and 10): a governed queue of level 2 (a job of cost or
--    rate cost other than 1 was enqueued there, its policy has fairness = 'key', or it has
--    per-key limits as data: key_limit_sets) is admitted by _choose_units_v1, one job at a time
--    in units, and its touched keys' heads refreshed after the activation. Queues of level 1
--    keep the statements below, plans unchanged.
--  * Named budgets (docs/design.md "Named budgets"): a queue whose jobs have named a budget
--    (budget_queues) is governed, whatever its policy, and admitted in units by
--    _choose_units_v1, which locks its budgets after the queue's lock and counts them; the
--    activation files their starts. No other path activates a job that names a budget (one
--    enqueued since this claim looked is left ready), so none is admitted uncounted.
--  * Every path ends in the same two statements: the key heads' moves, and the activation (a new
--    fence, the lease, an attempt, started_at) with the starts it files for the rate limits.
--  * Another app's jobs (docs/design.md "Errors", UnknownTaskError): a job whose task is not in
--    `p_tasks` is never claimed. One probe per gap between the declared tasks (in
--    jobs_ready_task_idx) says whether the queue has any ready; while it has none, every path
--    below is the one it always was.
--    While it has some (v_filter): the row walk merges one walk per task of `p_tasks`
--    (jobs_ready_task_idx), so it never reads the jobs it passes over; a key whose head is
--    another app's job is passed over like a saturated key, and within a key nothing is taken
--    past such a job (its FIFO order holds), so the cost grows with the keys passed over, never
--    with their backlog. Their expired leases are not reclaimed here, and hold up their key as
--    their ready jobs do.
-- Plans are cached generic plans: every statement takes its LIMIT from a variable, and a custom
-- plan for each call would be made under the admission lock. Sequential and bitmap scans are off
-- so that a generic plan made on an empty table still reads the indexes. JIT is off: a generic
-- plan's estimates (an unknown LIMIT, and the cost a disabled scan adds before PostgreSQL 18)
-- passed jit_above_cost on a keyed queue of 25,000 keys, and each claim compiled for ~80 ms to
-- read 50 buffers (benchmarks/HISTORY.md, "Per-key limits as data").
--
-- The commit after the lock. The admission lock is a transaction lock, so it is held until the
-- commit has ended, and a synchronous commit ends only when its WAL is on disk: with 8
-- supervisors on a 256 budget the holder spent about half of the lock's time waiting for that
-- flush (issue #40, docs/architecture.md "The flush under the lock"), while the next claim
-- needs only to see this one's rows, which an asynchronous commit makes visible as soon. So a
-- worker's claim that queued for the lock (it waited more than 2 ms: others queue behind it
-- then) commits asynchronously (`p_async_commit`), and the worker then sends a commit barrier, a
-- statement that commits synchronously after writing WAL: its flush covers this commit (WAL is
-- flushed in order). Only then does it start a claimed job or count a success as recorded. A
-- claim that got the lock at once, or after one claim ahead, commits synchronously as before:
-- there the barrier's round trip and a second flush (the WAL writer's, of the asynchronous
-- commit) only cost, 1-6 points of a 64 budget's 20 ms jobs at one supervisor of two slots. A
-- server crash before the flush loses this claim and every claim that saw it (theirs come later
-- in the WAL), and none of their jobs has started: invariants 1, 4 and 7 hold across it as they
-- do with synchronous commits.
--
-- This folder (sql/claim/) holds this claim and every function it calls, directly or not, and
-- nothing it calls lives elsewhere (tests/unit/test_sql_lifecycle.py checks it): the admission
-- lock (_admission_lock_id_v1), the successes it records first (_record_successes_v2, _expiry_v1,
-- _ended_v2, results_channel_v1), the queue's limits in force (_limits_v1), the probes for
-- another app's jobs (_unknown_ready_v1), the key heads
-- (_prepare_queue_v2, _hint_keys_v2, _keyed_v2, _refresh_heads_v1), the claim in units
-- (_choose_units_v1) with its rate, burst and budget counts (_rate_used_v1, _burst_used_v1,
-- _budget_starts_used_v1, _budget_lock_id_v1) and their next starts (_rate_next_start_v1,
-- _burst_next_start_v1, _budget_next_start_v1), and the wake-up (_wake_v1,
-- notification_channel_v1; listen_v1 is the worker's side of it).
CREATE FUNCTION workhorse.claim_v2(
    p_queue text, p_limit integer, p_lease double precision,
    p_ids bigint[], p_fences bigint[], p_results text[], p_retention_ix integer[],
    p_retentions text[], p_tasks text[] DEFAULT NULL, p_expect_full boolean DEFAULT false,
    p_async_commit boolean DEFAULT false)
RETURNS TABLE (
    id bigint, task text, queue text, ckey text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fence bigint, lease_until timestamptz,
    enqueued_at timestamptz, run_at timestamptz, meta jsonb, started_at timestamptz,
    rank integer, next_start_in double precision, status text, scheduled_for timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    c_level CONSTANT integer := 2;  -- this function's feature level
    -- A wait for the admission lock longer than this means a queue of claims, not one claim
    -- ahead (a claim and its commit hold it about a millisecond on a 2-core machine): then this
    -- claim commits asynchronously ("The commit after the lock").
    c_queued_wait CONSTANT interval := interval '2 milliseconds';
    v_waited_from timestamptz;
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
    v_past_deadline boolean;  -- jobs that may no longer start wait to be ended (expired)
    v_start timestamptz;  -- the instant the activation stamps as started_at
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
    v_limit integer := p_limit;  -- what the paths after the plain queue's may still claim
    v_plain_admitted integer := 0;  -- what the plain queue's walk claimed before them
    v_next double precision;
    v_units boolean := false;
    v_fair boolean;
    v_rate_blocked boolean := false;
    v_policy record;
    v_filter boolean := false;
    -- Another app's expired jobs, the first of each key: a key whose head comes after one is
    -- passed over (nothing of a key is taken past another app's job).
    v_cut_keys text[];
    v_cut_ranks integer[];
    v_cut_ids bigint[];
    v_budgeted boolean := false;
    v_budget_names text[];
    v_budget_periods double precision[];
    v_budget_windows double precision[];
    v_budget_rates integer[];
    v_budget_bursts integer[];
    v_budget_stopped boolean[];
    v_burst integer;
    v_burst_key integer;
    v_burst_window double precision;
    v_burst_window_key double precision;
    -- Back-pressure (docs/design.md "Back-pressure"): the queue's control row's stamp, the
    -- queue's own backoff, and its keys backed off now (passed over like saturated keys).
    v_backoff_stamp timestamptz;
    v_queue_off timestamptz;
    v_off_keys text[] := '{}';
    v_budget_off timestamptz;
    -- Per-key limits as data (docs/design.md "Per-key limits"): the queue has a set, and its
    -- default rate's period (the starts of a key are filed in buckets of its own period).
    v_key_limited boolean := false;
    v_key_default_period double precision;
BEGIN
    -- Unlocked peek, to choose the lock mode (never shared first and then exclusive: two
    -- claimers doing that would deadlock), then the lock, before the successes: their row locks
    -- must not be held while we wait for it, or a claimer holding it that reclaims one of them
    -- (its lease expired) would wait for us while we wait for it.
    v_peek := EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = p_queue)
              OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = p_queue)
              OR EXISTS (SELECT 1 FROM workhorse.budget_queues bq WHERE bq.queue = p_queue);
    IF p_limit IS NULL OR p_limit < 1 THEN
        -- Only successes to record: no admission, so no lock (complete_v2 takes none either).
        -- Recording frees places and never needs to see another claim, and a claim that queued
        -- for the lock only to record would hold up the claims that admit.
        NULL;
    ELSIF v_peek THEN
        -- (Two IFs, not one AND: an expression's subqueries are set up before its first
        -- operand is tested, 13 µs at every claim that carries successes.)
        IF v_sent = 0 AND p_expect_full THEN
            IF EXISTS (
                SELECT 1 FROM workhorse._limits_v1(p_queue, clock_timestamp()) AS l
                WHERE l.max_active IS NOT NULL AND l.feature_level <= c_level
                  AND l.max_active <= (
                      SELECT count(*) FROM (
                          SELECT 1 FROM workhorse.jobs j
                          WHERE j.queue = p_queue AND j.status = 'active'
                            AND j.lease_until > clock_timestamp()
                          LIMIT l.max_active) AS a))
            THEN
                -- Full in a committed snapshot, so full under the lock too: a claim not yet
                -- committed only adds to the count, and a place freed after this snapshot is
                -- reused by the claim that freed it or wakes the claimers again (every job costs
                -- at least one unit, so a full count of jobs is a full count of units). A claim
                -- that frees nothing returns at once instead of queueing for the lock to find
                -- no room: with several supervisors on a full budget those were a third of the
                -- claims (issue #40).
                RETURN QUERY SELECT NULL::bigint, NULL::text, p_queue, NULL::text,
                    NULL::smallint, NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint,
                    NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::jsonb,
                    NULL::timestamptz, NULL::integer, NULL::double precision, 'full'::text,
                    NULL::timestamptz;
                RETURN;
            END IF;
        END IF;
        IF NOT p_async_commit THEN
            PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
        ELSIF NOT pg_try_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue)) THEN
            v_waited_from := clock_timestamp();
            PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
            IF clock_timestamp() - v_waited_from > c_queued_wait THEN
                -- Claims queue for this lock, so its hold should not include our WAL flush
                -- ("The commit after the lock"). For this transaction only (a SET clause
                -- would end with the function); the marker tells the caller to send the
                -- barrier.
                PERFORM set_config('synchronous_commit', 'off', true);
                RETURN QUERY SELECT NULL::bigint, NULL::text, p_queue, NULL::text,
                    NULL::smallint, NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint,
                    NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::jsonb,
                    NULL::timestamptz, NULL::integer, NULL::double precision, 'unflushed'::text,
                    NULL::timestamptz;
            END IF;
        END IF;
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

    IF v_peek THEN
        -- The plain queue, a governed queue's usual case (issue #40): its policy's one rule is
        -- max_active (no per-key limit, no rate, no fair share, level 1), and it has no control
        -- row (a pause, an override), no named budget, no job of a newer level, no expired
        -- lease to reclaim, and no scheduled job or suspended timer due. One statement says so and counts its
        -- active jobs, one more takes and activates the jobs: what the paths below do there
        -- (the row walk, at most the room), in two statements instead of about ten. A small
        -- claim's cost is mostly each statement's executor start-up, not its rows. Any other
        -- queue falls through to the paths below. Another app's jobs are never activated (the
        -- activation names the worker's tasks); only a walk they left short looks whether the
        -- queue holds any (the probes cost a tenth of a claim in a fleet), and if it does, the
        -- paths below, which walk one index per declared task, claim the rest.
        v_now := clock_timestamp();
        -- The subqueries name p.queue, not p_queue: correlated, they run only for a policy
        -- that passed the tests before them (an uncorrelated one is a one-time filter, run
        -- first: 11 buffers at every claim of a queue that is not plain).
        SELECT p.max_active,
               (SELECT count(*)::integer FROM workhorse.jobs j
                WHERE j.queue = p.queue AND j.status = 'active' AND j.lease_until > v_now)
        INTO v_max, v_active
        FROM workhorse.policies p
        WHERE p.queue = p_queue AND p.max_active IS NOT NULL AND p.max_active_per_key IS NULL
          AND p.rate_limit IS NULL AND p.rate_limit_per_key IS NULL AND p.fairness = 'fifo'
          AND p.feature_level <= 1
          AND NOT EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = p.queue)
          AND NOT EXISTS (SELECT 1 FROM workhorse.budget_queues bq WHERE bq.queue = p.queue)
          AND NOT EXISTS (SELECT 1 FROM workhorse.queue_levels lv
                          WHERE lv.queue = p.queue AND lv.feature_level > 1)
          AND NOT EXISTS (SELECT 1 FROM workhorse.jobs j
                          WHERE j.queue = p.queue AND j.status = 'active'
                            AND j.lease_until <= v_now)
          AND NOT EXISTS (SELECT 1 FROM workhorse.jobs j
                          WHERE j.queue = p.queue AND j.status = 'scheduled'
                            AND j.run_at <= v_now)
          AND NOT EXISTS (SELECT 1 FROM workhorse.jobs j
                          WHERE j.queue = p.queue AND j.status = 'suspended'
                            AND j.wake_at <= v_now);
        IF FOUND THEN
            v_room := LEAST(p_limit, v_max - v_active);
            IF v_room > 0 THEN
                -- The ready rows by `id = ANY(ARRAY(...))`: a join with them would be planned,
                -- generically, as a merge join reading all of jobs_pkey.
                RETURN QUERY
                WITH activated AS (
                    UPDATE workhorse.jobs j
                    SET status = 'active',
                        attempts = j.attempts + 1,
                        fence = nextval('workhorse.fence_seq'),
                        lease_until = clock_timestamp() + make_interval(secs => p_lease),
                        started_at = clock_timestamp()
                    WHERE j.id = ANY(ARRAY(
                            SELECT r.id FROM workhorse.jobs r
                            WHERE r.queue = p_queue AND r.status = 'ready'
                            ORDER BY r.queue, r.rank, r.id
                            LIMIT v_room
                            FOR UPDATE SKIP LOCKED))
                      -- `IN ('ready', '')` (no job's status is ''), as in
                      -- _record_successes_v2: `= 'ready'` implies the predicate of every
                      -- partial index of ready jobs, and with statistics that say the queue
                      -- holds a row or two the rows were looked up by filtering one of those
                      -- indexes (the whole ready backlog, 12 ms at 50,000 jobs), not jobs_pkey.
                      AND j.status IN ('ready', '')
                      AND j.feature_level <= c_level
                      AND (p_tasks IS NULL OR j.task = ANY(p_tasks))
                      -- The count above is of jobs, so only jobs of one unit: a job of another
                      -- cost (or of a budget) enqueued since it raised the queue's level in
                      -- the same commit, and is left for the next claim, which counts units.
                      AND j.cost = 1
                      AND j.budget IS NULL
                      -- Likewise a job with a deadline (level 2: the general path ends it).
                      AND j.start_by IS NULL
                    RETURNING j.*
                )
                SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts,
                       a.max_attempts, a.fence, a.lease_until, a.enqueued_at, a.run_at, a.meta,
                       a.started_at, a.rank, NULL::double precision, NULL::text,
                       COALESCE(a.scheduled_for, CASE WHEN a.attempts = 1 THEN a.run_at END)
                FROM activated a
                ORDER BY a.rank, a.id;
                GET DIAGNOSTICS v_admitted = ROW_COUNT;
            END IF;
            IF v_admitted < v_room AND p_tasks IS NOT NULL
               AND workhorse._unknown_ready_v1(p_queue, p_tasks, false, v_now) THEN
                -- Short, and another app's jobs are ready: they may be what the walk met.
                v_plain_admitted := v_admitted;
                v_limit := p_limit - v_admitted;
                v_admitted := 0;
            ELSE
                IF v_active + v_admitted >= v_max THEN
                    RETURN QUERY SELECT NULL::bigint, NULL::text, p_queue, NULL::text,
                        NULL::smallint, NULL::jsonb, NULL::integer, NULL::integer,
                        NULL::bigint, NULL::timestamptz, NULL::timestamptz,
                        NULL::timestamptz, NULL::jsonb, NULL::timestamptz, NULL::integer,
                        NULL::double precision, 'full'::text, NULL::timestamptz;
                END IF;
                IF v_freed > v_admitted THEN
                    PERFORM workhorse._wake_v1(p_queue);
                END IF;
                RETURN;
            END IF;
        END IF;
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
                   WHERE j.queue = p_queue AND j.status = 'scheduled' AND j.run_at <= v_now)
           OR EXISTS (SELECT 1 FROM workhorse.jobs j
                      WHERE j.queue = p_queue AND j.status = 'suspended'
                        AND j.wake_at <= v_now),
           EXISTS (SELECT 1 FROM workhorse.key_hints h WHERE h.queue = p_queue),
           EXISTS (SELECT 1 FROM workhorse.jobs j
                   WHERE j.queue = p_queue AND j.start_by IS NOT NULL AND j.start_by <= v_now
                     AND j.status IN ('ready', 'scheduled', 'active')
                     AND (j.status <> 'active' OR j.lease_until <= v_now))
    INTO v_governed, v_paused, v_level, v_max, v_per_key, v_rate, v_period, v_rate_key,
         v_period_key, v_expired, v_due, v_hinted, v_past_deadline
    FROM workhorse._limits_v1(p_queue, v_now) AS l;
    -- (One statement for both probes: each statement's start-up costs more than its probe. A
    -- queue with a backoff has a control row, so only a claim that peeked one reads its stamp:
    -- an ungoverned claim reads no more than it did.)
    SELECT EXISTS (SELECT 1 FROM workhorse.budget_queues bq WHERE bq.queue = p_queue),
           CASE WHEN v_peek THEN (SELECT c.backed_off_until FROM workhorse.queue_controls c
                                  WHERE c.queue = p_queue) END
    INTO v_budgeted, v_backoff_stamp;
    v_governed := v_governed OR v_budgeted;
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
    IF v_backoff_stamp > v_now THEN
        -- A backoff of the queue or of some of its keys is in force: the queue's admits
        -- nothing until it ends (the worker sleeps until then: the marker says when), its
        -- keys' are passed over by every path below.
        SELECT max(b.until) FILTER (WHERE b.scope = 'queue'),
               COALESCE(array_agg(b.ckey) FILTER (WHERE b.scope = 'key'), '{}')
        INTO v_queue_off, v_off_keys
        FROM workhorse.backoffs b
        WHERE b.scope IN ('queue', 'key') AND b.name = p_queue AND b.until > v_now;
        IF v_queue_off IS NOT NULL THEN
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::text,
                NULL::smallint, NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint,
                NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::jsonb,
                NULL::timestamptz, NULL::integer,
                GREATEST(EXTRACT(epoch FROM v_queue_off - clock_timestamp())::double precision,
                         0.001),
                NULL::text, NULL::timestamptz;
            IF v_freed > 0 THEN
                PERFORM workhorse._wake_v1(p_queue);
            END IF;
            RETURN;
        END IF;
    END IF;

    IF v_past_deadline AND workhorse._expire_jobs_v1(p_queue, v_now) > 0 THEN
        -- (Before the due jobs are made ready: one past its deadline ends instead.)
        v_hinted := true;
    END IF;
    IF v_expired OR v_due THEN
        PERFORM workhorse._prepare_queue_v2(p_queue, v_now);
        v_hinted := v_hinted OR v_due;
    END IF;

    IF p_tasks IS NOT NULL THEN
        v_filter := workhorse._unknown_ready_v1(p_queue, p_tasks, v_expired, v_now);
    END IF;

    v_room := v_limit;
    IF v_governed AND (v_level >= 2 OR v_budgeted) THEN
        -- Costs or fair share: the choice in units (_choose_units_v1 says how). The synced
        -- policy's own limits say which jobs can never fit (held); an override only delays.
        v_units := true;
        -- The bursts in force (a live override's over the policy's, at most the N in force) and
        -- their windows, P*B/N in whole milliseconds.
        SELECT p.fairness = 'key' AS fair, p.max_active, p.max_active_per_key, p.rate_limit,
               p.rate_limit_per_key, p.rate_burst, p.rate_burst_per_key,
               -- (LEAST ignores a NULL: no burst must stay NULL, not become N.)
               CASE WHEN v_rate IS NOT NULL AND COALESCE(o.rate_burst, p.rate_burst) IS NOT NULL
                    THEN LEAST(COALESCE(o.rate_burst, p.rate_burst), v_rate) END AS burst,
               CASE WHEN v_rate_key IS NOT NULL
                         AND COALESCE(o.rate_burst_per_key, p.rate_burst_per_key) IS NOT NULL
                    THEN LEAST(COALESCE(o.rate_burst_per_key, p.rate_burst_per_key), v_rate_key)
               END AS burst_key,
               ks.queue IS NOT NULL AS key_limited, ks.default_max_active,
               ks.default_weight, ks.default_rate_limit, ks.default_rate_period
        INTO v_policy
        FROM (SELECT p_queue AS queue) AS q
        LEFT JOIN workhorse.policies p ON p.queue = q.queue
        LEFT JOIN workhorse.queue_controls o
            ON o.queue = q.queue AND o.override_set_at IS NOT NULL
           AND (o.override_expires_at IS NULL OR o.override_expires_at > v_now)
        LEFT JOIN workhorse.key_limit_sets ks ON ks.queue = q.queue;
        v_burst := v_policy.burst;
        v_burst_key := v_policy.burst_key;
        v_burst_window := floor(v_period * v_burst / v_rate * 1000) / 1000;
        v_burst_window_key := floor(v_period_key * v_burst_key / v_rate_key * 1000) / 1000;
        v_fair := COALESCE(v_policy.fair, false);
        v_key_limited := v_policy.key_limited;
        v_key_default_period := v_policy.default_rate_period;
        v_keyed := v_per_key < 2147483647 OR v_rate_key IS NOT NULL OR v_fair OR v_key_limited;
        IF v_hinted AND v_keyed THEN
            WITH drained AS (
                DELETE FROM workhorse.key_hints h WHERE h.queue = p_queue RETURNING h.ckey
            )
            SELECT array_agg(DISTINCT d.ckey) INTO v_examined FROM drained d;
            PERFORM workhorse._refresh_heads_v1(p_queue, v_examined);
        END IF;
        SELECT c.ids, c.rate_blocked, c.budget_names, c.budget_periods, c.budget_windows,
               c.budget_rates, c.budget_bursts, c.budget_stopped, c.backed_off_until
        INTO v_ids, v_rate_blocked, v_budget_names, v_budget_periods, v_budget_windows,
             v_budget_rates, v_budget_bursts, v_budget_stopped, v_budget_off
        FROM workhorse._choose_units_v1(
            p_queue, v_limit, v_now, v_max, NULLIF(v_per_key, 2147483647),
            v_rate, v_period, v_rate_key, v_period_key,
            v_policy.max_active, v_policy.max_active_per_key, v_policy.rate_limit,
            v_policy.rate_limit_per_key, v_fair, v_keyed, v_expired, p_tasks,
            v_filter, v_budgeted, v_burst, v_burst_window, v_burst_key, v_burst_window_key,
            v_policy.rate_burst, v_policy.rate_burst_per_key, v_off_keys, v_key_limited,
            v_policy.default_max_active, v_policy.default_weight, v_policy.default_rate_limit,
            v_policy.default_rate_period) AS c;
    ELSIF v_governed THEN
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
        v_saturated := v_saturated || v_off_keys;  -- a backed-off key is passed over alike

        v_room := CASE WHEN v_max IS NULL THEN v_limit ELSE LEAST(v_limit, v_max - v_active) END;
        IF v_room <= 0 THEN
            IF v_freed > 0 THEN
                PERFORM workhorse._wake_v1(p_queue);
            END IF;
            RETURN QUERY SELECT NULL::bigint, NULL::text, p_queue, NULL::text, NULL::smallint,
                NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint, NULL::timestamptz,
                NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::timestamptz,
                NULL::integer, NULL::double precision, 'full'::text, NULL::timestamptz;
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

    IF v_units THEN
        NULL;  -- chosen above
    ELSIF NOT (v_governed AND (v_per_key < 2147483647 OR v_rate_key IS NOT NULL)) THEN
        v_keyed := false;
        -- No policy, or a queue-wide limit only: the row walk, v_room long. SKIP LOCKED, which
        -- ungoverned claims need: they run side by side under the shared lock, and the rows stay
        -- locked until the activation below.
        WITH ready AS (
            SELECT j.id, j.rank FROM workhorse.jobs j
            WHERE NOT v_filter AND j.queue = p_queue AND j.status = 'ready'
              -- A backed-off key's ready rows are read past (this queue keeps no heads to
              -- skip a key by): that costs its ready jobs ahead, only while the backoff lasts.
              AND NOT (j.ckey = ANY(v_off_keys))
            ORDER BY j.queue, j.rank, j.id
            LIMIT v_room
            FOR UPDATE SKIP LOCKED
        ), ready_known AS (
            -- Another app's jobs are in the queue: one walk per task the worker knows.
            SELECT c.id, c.rank
            FROM unnest(CASE WHEN v_filter THEN p_tasks END) AS t(task)
            CROSS JOIN LATERAL (
                SELECT j.id, j.rank FROM workhorse.jobs j
                WHERE v_filter AND j.queue = p_queue AND j.task = t.task AND j.status = 'ready'
                  AND NOT (j.ckey = ANY(v_off_keys))
                ORDER BY j.queue, j.task, j.rank, j.id
                LIMIT v_room
                FOR UPDATE SKIP LOCKED
            ) AS c
        ), expired AS (
            SELECT j.id, j.rank FROM workhorse.jobs j
            WHERE v_expired AND j.queue = p_queue AND j.status = 'active' AND j.lease_until <= v_now
              AND (p_tasks IS NULL OR j.task = ANY(p_tasks))
              AND NOT (j.ckey = ANY(v_off_keys))
            ORDER BY j.rank, j.id
            LIMIT v_room
            FOR UPDATE SKIP LOCKED
        ), best AS (
            SELECT * FROM ready UNION ALL SELECT * FROM ready_known UNION ALL SELECT * FROM expired
            ORDER BY rank, id
            LIMIT v_room
        )
        SELECT array_agg(b.id) INTO v_ids FROM best b;
    ELSE
        v_keyed := true;
        IF v_hinted THEN
            -- Bring the heads up to date with what was enqueued since the last claim.
            WITH drained AS (
                DELETE FROM workhorse.key_hints h WHERE h.queue = p_queue RETURNING h.ckey
            )
            SELECT array_agg(DISTINCT d.ckey) INTO v_examined FROM drained d;
            PERFORM workhorse._refresh_heads_v1(p_queue, v_examined);
        END IF;

        IF v_filter AND v_expired THEN
            SELECT array_agg(c.ckey), array_agg(c.rank), array_agg(c.id)
            INTO v_cut_keys, v_cut_ranks, v_cut_ids
            FROM (SELECT DISTINCT ON (j.ckey) j.ckey, j.rank, j.id
                  FROM workhorse.jobs j
                  WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= v_now
                    AND j.ckey <> '' AND NOT (j.task = ANY(p_tasks))
                  ORDER BY j.ckey, j.rank, j.id) AS c;
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
                  AND (NOT v_filter OR ((SELECT hj.task FROM workhorse.jobs hj
                                         WHERE hj.id = h.head_id) = ANY(p_tasks)
                                        AND NOT EXISTS (
                                            SELECT 1 FROM unnest(v_cut_keys, v_cut_ranks,
                                                                 v_cut_ids) AS c(ckey, rank, id)
                                            WHERE c.ckey = h.ckey
                                              AND (c.rank, c.id) < (h.head_rank, h.head_id))))
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
                      AND j.lease_until <= v_now AND (p_tasks IS NULL OR j.task = ANY(p_tasks))
                      AND NOT (j.ckey = ANY(v_off_keys))
                ) AS e
                LEFT JOIN active_keys a ON a.ckey = e.ckey
                WHERE e.ckey = '' OR e.nth <= v_per_key - COALESCE(a.n, 0)
                ORDER BY e.rank, e.id
                LIMIT v_room
            ), unknown AS (
                -- Another app's jobs (only while the queue holds any): nothing of their key is
                -- taken from them on. Those among the rows read (the first becomes its key's
                -- head, which the next claim passes over); its expired ones; and the heads of
                -- the expired jobs' keys, which the heads above may have passed over.
                -- (Tasks are read by scalar subqueries on the primary key: an EXISTS or a
                -- join may be planned as a hash over every row of jobs.)
                SELECT u.id, u.rank, u.ckey
                FROM (SELECT k.id, k.rank, k.ckey FROM keyed k
                      UNION ALL SELECT l.id, l.rank, l.ckey FROM keyless l) AS u
                WHERE v_filter
                  AND NOT ((SELECT j.task FROM workhorse.jobs j WHERE j.id = u.id) = ANY(p_tasks))
                UNION ALL
                SELECT j.id, j.rank, j.ckey FROM workhorse.jobs j
                WHERE v_filter AND v_expired AND j.queue = p_queue AND j.status = 'active'
                  AND j.lease_until <= v_now AND NOT (j.task = ANY(p_tasks))
                UNION ALL
                SELECT h.head_id, h.head_rank, h.ckey
                FROM workhorse.key_heads h
                WHERE v_filter AND h.queue = p_queue
                  AND h.ckey = ANY(ARRAY(SELECT e.ckey FROM expired e WHERE e.ckey <> ''))
                  AND NOT ((SELECT hj.task FROM workhorse.jobs hj WHERE hj.id = h.head_id)
                           = ANY(p_tasks))
            ), candidates AS (
                -- Numbered per key over its ready and expired candidates: the key's room is the
                -- same number for both.
                SELECT u.id, u.rank, u.ckey,
                       row_number() OVER (PARTITION BY u.ckey ORDER BY u.rank, u.id) AS nth
                FROM (SELECT * FROM keyed UNION ALL SELECT * FROM keyless
                      UNION ALL SELECT * FROM expired) AS u
                WHERE NOT EXISTS (SELECT 1 FROM unknown x
                                  WHERE x.ckey = u.ckey AND (x.rank, x.id) <= (u.rank, u.id))
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
                      AND (NOT v_filter OR ((SELECT hj.task FROM workhorse.jobs hj
                                             WHERE hj.id = h.head_id) = ANY(p_tasks)
                                            AND NOT EXISTS (
                                                SELECT 1 FROM unnest(v_cut_keys, v_cut_ranks,
                                                                     v_cut_ids)
                                                    AS c(ckey, rank, id)
                                                WHERE c.ckey = h.ckey
                                                  AND (c.rank, c.id)
                                                      < (h.head_rank, h.head_id))))
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
                      AND j.lease_until <= v_now AND (p_tasks IS NULL OR j.task = ANY(p_tasks))
                      AND NOT (j.ckey = ANY(v_off_keys))
                ) AS e
                LEFT JOIN active_keys a ON a.ckey = e.ckey
                WHERE e.ckey = ''
                   OR (e.nth <= v_per_key - COALESCE(a.n, 0)
                       AND (v_rate_key IS NULL OR e.nth <= v_rate_key - workhorse._rate_used_v1(
                                p_queue, e.ckey, v_period_key, v_now)))
                ORDER BY e.rank, e.id
                LIMIT v_room
            ), unknown AS (
                -- Another app's jobs (only while the queue holds any): nothing of their key is
                -- taken from them on. Those among the rows read (the first becomes its key's
                -- head, which the next claim passes over); its expired ones; and the heads of
                -- the expired jobs' keys, which the heads above may have passed over.
                -- (Tasks are read by scalar subqueries on the primary key: an EXISTS or a
                -- join may be planned as a hash over every row of jobs.)
                SELECT u.id, u.rank, u.ckey
                FROM (SELECT k.id, k.rank, k.ckey FROM keyed k
                      UNION ALL SELECT l.id, l.rank, l.ckey FROM keyless l) AS u
                WHERE v_filter
                  AND NOT ((SELECT j.task FROM workhorse.jobs j WHERE j.id = u.id) = ANY(p_tasks))
                UNION ALL
                SELECT j.id, j.rank, j.ckey FROM workhorse.jobs j
                WHERE v_filter AND v_expired AND j.queue = p_queue AND j.status = 'active'
                  AND j.lease_until <= v_now AND NOT (j.task = ANY(p_tasks))
                UNION ALL
                SELECT h.head_id, h.head_rank, h.ckey
                FROM workhorse.key_heads h
                WHERE v_filter AND h.queue = p_queue
                  AND h.ckey = ANY(ARRAY(SELECT e.ckey FROM expired e WHERE e.ckey <> ''))
                  AND NOT ((SELECT hj.task FROM workhorse.jobs hj WHERE hj.id = h.head_id)
                           = ANY(p_tasks))
            ), candidates AS (
                -- A key's ready jobs within its allowance, the keyless ones, and the expired ones;
                -- a key with both ready and expired candidates is numbered again over both.
                SELECT u.id, u.rank, u.ckey,
                       row_number() OVER (PARTITION BY u.ckey ORDER BY u.rank, u.id) AS nth
                FROM (SELECT k.id, k.rank, k.ckey FROM keyed k WHERE k.nth <= k.allowance
                      UNION ALL SELECT l.id, l.rank, l.ckey FROM keyless l
                      UNION ALL SELECT x.id, x.rank, x.ckey FROM expired x) AS u
                WHERE NOT EXISTS (SELECT 1 FROM unknown x
                                  WHERE x.ckey = u.ckey AND (x.rank, x.id) <= (u.rank, u.id))
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
            -- Each head carries its job's budget, looked up here (budget_for says so, and the
            -- key_heads_budget trigger then does not run: a PL/pgSQL call a key, two for an
            -- upsert that updates).
            WITH moved AS (
                INSERT INTO workhorse.key_heads AS kh
                    (queue, ckey, head_rank, head_id, budget, budget_for)
                SELECT p_queue, m.ckey, m.rank, m.id,
                       (SELECT j.budget FROM workhorse.jobs j WHERE j.id = m.id), m.id
                FROM unnest(v_move_keys, v_move_ranks, v_move_ids) AS m(ckey, rank, id)
                WHERE m.id IS NOT NULL
                ON CONFLICT (queue, ckey) DO UPDATE
                    SET head_rank = excluded.head_rank, head_id = excluded.head_id,
                        budget = excluded.budget, budget_for = excluded.budget_for
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
        -- '', and per key), in buckets of 1/100 of the period, each stored at its end. Its
        -- instant is read once, so that the job it stamps started at it is one whose start_by
        -- (docs/design.md "Deadlines") is still ahead of it; once started, a job may start
        -- again (a retry) until its deadline only.
        v_start := clock_timestamp();
        RETURN QUERY
        WITH activated AS (
            UPDATE workhorse.jobs j
            SET status = 'active',
                attempts = j.attempts + 1,
                fence = nextval('workhorse.fence_seq'),
                lease_until = v_start + make_interval(secs => p_lease),
                started_at = v_start,
                start_by = j.deadline
            WHERE j.id = ANY(v_ids)
              AND (j.start_by IS NULL OR j.start_by > v_start)
              AND j.feature_level <= c_level
              AND (p_tasks IS NULL OR j.task = ANY(p_tasks))
              AND NOT (j.ckey = ANY(v_off_keys))  -- (no path above chooses one: a safety net)
              AND (v_budgeted OR j.budget IS NULL)
              -- A governed queue admitted by counting jobs (not in units) activates only jobs
              -- of one unit and one start: a job of another cost raised the queue's level in
              -- the commit that enqueued it, after this claim read the level, and is left for
              -- the next claim, which counts units.
              AND (v_units OR NOT v_governed OR (j.cost = 1 AND j.rate_cost = 1))
              AND (j.status = 'ready' OR (j.status = 'active' AND j.lease_until <= v_now))
            RETURNING j.*
        ), scopes AS (
            SELECT '' AS ckey, v_period AS period, max(a.started_at) AS at,
                   sum(a.rate_cost)::integer AS n
            FROM activated a
            WHERE v_period IS NOT NULL
            HAVING count(*) > 0
            UNION ALL
            -- A key's in buckets of its own rate's period: its row's, the set's default, else
            -- the per-key rate in force (a scalar probe per key: a join may be planned as a
            -- hash over every row of key_limits).
            SELECT k.ckey, k.period, max(k.started_at), sum(k.rate_cost)::integer
            FROM (SELECT a.ckey, a.started_at, a.rate_cost,
                         COALESCE((SELECT kl.rate_period FROM workhorse.key_limits kl
                                   WHERE v_key_limited AND kl.queue = p_queue
                                     AND kl.ckey = a.ckey),
                                  v_key_default_period, v_period_key) AS period
                  FROM activated a
                  WHERE a.ckey <> '') AS k
            WHERE k.period IS NOT NULL
            GROUP BY k.ckey, k.period
        ), recorded AS (
            INSERT INTO workhorse.rate_starts AS r (queue, ckey, bucket_end, n)
            SELECT p_queue, s.ckey,
                   to_timestamp(ceil(EXTRACT(epoch FROM s.at)::double precision
                                     / (s.period / 100)) * (s.period / 100)),
                   s.n
            FROM scopes s
            ON CONFLICT (queue, ckey, bucket_end) DO UPDATE SET n = r.n + excluded.n
        ), burst_scopes AS (
            SELECT '' AS ckey, max(a.started_at) AS at, sum(a.rate_cost)::integer AS n,
                   v_burst_window AS len
            FROM activated a
            WHERE v_burst_window IS NOT NULL
            HAVING count(*) > 0
            UNION ALL
            SELECT a.ckey, max(a.started_at), sum(a.rate_cost)::integer, v_burst_window_key
            FROM activated a
            WHERE v_burst_window_key IS NOT NULL AND a.ckey <> ''
            GROUP BY a.ckey
        ), burst_recorded AS (
            INSERT INTO workhorse.burst_starts AS r (queue, ckey, bucket_end, n)
            SELECT p_queue, s.ckey,
                   to_timestamp(ceil(EXTRACT(epoch FROM s.at)::double precision
                                     / (s.len / 100)) * (s.len / 100)),
                   s.n
            FROM burst_scopes s
            ON CONFLICT (queue, ckey, bucket_end) DO UPDATE SET n = r.n + excluded.n
        ), budget_scopes AS (
            -- The budgets' starts: span 0 in buckets of 1/100 of the rate's period, span 1 in
            -- buckets of 1/100 of the burst's window.
            SELECT a.budget, w.span, w.len, max(a.started_at) AS at,
                   sum(a.rate_cost)::integer AS n
            FROM activated a
            JOIN unnest(v_budget_names, v_budget_periods, v_budget_windows)
                AS b(budget, period, burst_window) ON b.budget = a.budget
            CROSS JOIN LATERAL (VALUES (0::smallint, b.period), (1::smallint, b.burst_window))
                AS w(span, len)
            WHERE w.len IS NOT NULL
            GROUP BY a.budget, w.span, w.len
        ), budget_recorded AS (
            INSERT INTO workhorse.budget_starts AS r (budget, span, bucket_end, n)
            SELECT s.budget, s.span,
                   to_timestamp(ceil(EXTRACT(epoch FROM s.at)::double precision
                                     / (s.len / 100)) * (s.len / 100)),
                   s.n
            FROM budget_scopes s
            ON CONFLICT (budget, span, bucket_end) DO UPDATE SET n = r.n + excluded.n
        )
        SELECT a.id, a.task, a.queue, a.ckey, a.priority, a.payload, a.attempts, a.max_attempts,
               a.fence, a.lease_until, a.enqueued_at, a.run_at, a.meta, a.started_at, a.rank,
               NULL::double precision, NULL::text,
               COALESCE(a.scheduled_for, CASE WHEN a.attempts = 1 THEN a.run_at END)
        FROM activated a
        ORDER BY a.rank, a.id;
        GET DIAGNOSTICS v_admitted = ROW_COUNT;
        IF v_units AND v_keyed THEN
            -- The choice read the heads but did not move them: set each touched key's again.
            PERFORM workhorse._refresh_heads_v1(p_queue, ARRAY(
                SELECT DISTINCT j.ckey FROM workhorse.jobs j
                WHERE j.id = ANY(v_ids) AND j.ckey <> ''));
        ELSIF v_keyed AND v_admitted < cardinality(v_ids) THEN
            -- A chosen job was not activated (it changed meanwhile, needs a newer level, or is
            -- another app's, enqueued since the probe):
            -- the heads moved past it, so set its key's head again from its ready jobs.
            PERFORM workhorse._refresh_heads_v1(p_queue, ARRAY(
                SELECT DISTINCT j.ckey FROM workhorse.jobs j
                WHERE j.id = ANY(v_ids) AND j.ckey <> '' AND j.status <> 'active'));
        END IF;
    END IF;

    -- Starts used up: say when the next one is allowed (the queue's, else the soonest of the
    -- first heads whose key is out of starts), so the worker sleeps instead of polling.
    v_next := NULL;
    IF v_units AND v_rate_blocked THEN
        v_next := GREATEST(
            CASE WHEN v_rate IS NULL THEN 0 ELSE workhorse._rate_next_start_v1(
                p_queue, '', v_rate, v_period, clock_timestamp()) END,
            CASE WHEN v_burst IS NULL THEN 0 ELSE workhorse._burst_next_start_v1(
                p_queue, '', v_burst, v_burst_window, clock_timestamp()) END);
    ELSIF v_units AND true = ANY(v_budget_stopped) AND v_admitted < v_limit THEN
        -- A budget's rate stopped the claim: the soonest moment a job of one of those budgets
        -- may start (both its windows allow one more unit).
        SELECT min(GREATEST(
                   workhorse._budget_next_start_v1(b.name, 0::smallint, b.period, b.rate, 1,
                                                   clock_timestamp()),
                   CASE WHEN b.burst_window IS NULL THEN 0
                        ELSE workhorse._budget_next_start_v1(b.name, 1::smallint, b.burst_window,
                                                             b.burst, 1, clock_timestamp())
                   END))
        INTO v_next
        FROM unnest(v_budget_names, v_budget_periods, v_budget_windows, v_budget_rates,
                    v_budget_bursts, v_budget_stopped)
             AS b(name, period, burst_window, rate, burst, stopped)
        WHERE b.stopped;
    ELSIF v_units AND v_rate IS NOT NULL THEN
        NULL;  -- not cut short by the queue's rate
    ELSIF v_rate IS NOT NULL AND v_used + v_admitted >= v_rate THEN
        v_next := workhorse._rate_next_start_v1(p_queue, '', v_rate, v_period, clock_timestamp());
    ELSIF v_rate_key IS NOT NULL AND v_admitted < v_room THEN
        -- Counted from now, not from the claim's start: the claim itself may have taken a while.
        SELECT min(workhorse._rate_next_start_v1(p_queue, h.ckey, v_rate_key, v_period_key,
                                                 clock_timestamp()))
        INTO v_next
        FROM (SELECT kh.ckey FROM workhorse.key_heads kh WHERE kh.queue = p_queue
              ORDER BY kh.queue, kh.head_rank, kh.head_id LIMIT v_room) AS h
        WHERE workhorse._rate_used_v1(p_queue, h.ckey, v_period_key, v_now) >= v_rate_key;
    END IF;
    IF v_budget_off IS NOT NULL AND v_admitted < v_limit THEN
        -- A budget of the queue is backed off: claim again when the first such backoff ends
        -- (or sooner, for a rate), not at every wake-up meanwhile.
        v_next := LEAST(COALESCE(v_next, 'Infinity'::double precision),
                        GREATEST(EXTRACT(epoch FROM v_budget_off - clock_timestamp())::double precision,
                                 0.001));
    END IF;
    IF v_next > 0 THEN
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::smallint,
            NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint, NULL::timestamptz,
            NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::timestamptz,
            NULL::integer, v_next, NULL::text, NULL::timestamptz;
    END IF;

    IF v_governed AND NOT v_units AND v_max IS NOT NULL AND v_active + v_admitted >= v_max THEN
        -- This claim took the last places: the queue is full now.
        RETURN QUERY SELECT NULL::bigint, NULL::text, p_queue, NULL::text, NULL::smallint,
            NULL::jsonb, NULL::integer, NULL::integer, NULL::bigint, NULL::timestamptz,
            NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::timestamptz,
            NULL::integer, NULL::double precision, 'full'::text, NULL::timestamptz;
    END IF;
    IF v_governed AND v_freed > v_plain_admitted + v_admitted THEN
        PERFORM workhorse._wake_v1(p_queue);
    END IF;
END
$$;
