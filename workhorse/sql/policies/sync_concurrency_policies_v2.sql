-- Desired-state sync of one namespace's policies. Returns one row per queue touched, with what
-- happened to it: created, updated, unchanged or pruned. Rate limits come as (N, period seconds)
-- pairs, NULL for none. `p_on_key_full` is what an enqueue does for a full key ('queue',
-- 'cancel_in_progress' or 'cancel_newest'; NULL: 'queue'; _on_key_full_v1 acts on it).
-- `p_fairness` is 'fifo' or 'key' per queue (NULL: 'fifo'); a 'key'
-- policy is stored at feature level 2, so that a claim of level 1 admits nothing there, and its
-- queue keeps per-key heads (_keyed_v2). Pauses and overrides live in queue_controls and are
-- never touched here. `p_rate_bursts` / `p_rate_bursts_per_key` (NULL: none) are each rate's
-- burst B (1 <= B <= N, docs/design.md "Named budgets ... and rate bursts"); a policy with a burst is
-- stored at feature level 2 too (the claim of level 1 cannot enforce it).
CREATE FUNCTION workhorse.sync_concurrency_policies_v2(
    p_namespace text,
    p_queues text[],
    p_max_active integer[],
    p_max_active_per_key integer[],
    p_rate_limits integer[],
    p_rate_periods double precision[],
    p_rate_limits_per_key integer[],
    p_rate_periods_per_key double precision[],
    p_prune boolean,
    p_fairness text[] DEFAULT NULL,
    p_on_key_full text[] DEFAULT NULL,
    p_rate_bursts integer[] DEFAULT NULL,
    p_rate_bursts_per_key integer[] DEFAULT NULL
) RETURNS TABLE (sync_action text, sync_queue text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
    v_owner text;
    v_old workhorse.policies;
    v_max integer;
    v_per_key integer;
    v_rate integer;
    v_period double precision;
    v_rate_key integer;
    v_period_key double precision;
    v_fair text;
    v_full text;
    v_burst integer;
    v_burst_key integer;
    v_level smallint;
    v_was_keyed boolean;
    v_keyed boolean;
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
        PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(v_queue));
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

    FOR v_queue, v_max, v_per_key, v_rate, v_period, v_rate_key, v_period_key, v_fair, v_full,
        v_burst, v_burst_key IN
        SELECT u.q, u.m, u.k, u.r, u.p, u.rk, u.pk, COALESCE(u.f, 'fifo'), COALESCE(u.o, 'queue'),
               u.b, u.bk
        FROM unnest(p_queues, p_max_active, p_max_active_per_key, p_rate_limits,
                    p_rate_periods, p_rate_limits_per_key, p_rate_periods_per_key, p_fairness,
                    p_on_key_full, p_rate_bursts, p_rate_bursts_per_key)
             AS u(q, m, k, r, p, rk, pk, f, o, b, bk)
        WHERE u.q IS NOT NULL
        ORDER BY 1
    LOOP
        v_level := CASE WHEN v_fair = 'key' OR v_burst IS NOT NULL OR v_burst_key IS NOT NULL
                        THEN 2 ELSE 1 END;
        SELECT * INTO v_old FROM workhorse.policies p WHERE p.queue = v_queue;
        v_was_keyed := workhorse._keyed_v2(v_queue);
        v_keyed := v_per_key IS NOT NULL OR v_rate_key IS NOT NULL OR v_fair = 'key'
                   OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = v_queue
                              AND (c.max_active_per_key IS NOT NULL
                                   OR c.rate_limit_per_key IS NOT NULL))
                   OR EXISTS (SELECT 1 FROM workhorse.key_limit_sets s WHERE s.queue = v_queue);
        IF v_keyed AND NOT v_was_keyed THEN
            -- Wait out enqueues that read "no per-key limit", then build the heads they missed.
            PERFORM pg_advisory_xact_lock(workhorse._enqueue_gate_id_v1(v_queue));
        END IF;
        IF v_old.queue IS NULL THEN
            INSERT INTO workhorse.policies (queue, namespace, max_active, max_active_per_key,
                                            rate_limit, rate_period, rate_limit_per_key,
                                            rate_period_per_key, fairness, on_key_full,
                                            feature_level, rate_burst, rate_burst_per_key)
            VALUES (v_queue, p_namespace, v_max, v_per_key, v_rate, v_period, v_rate_key,
                    v_period_key, v_fair, v_full, v_level, v_burst, v_burst_key);
            sync_action := 'created';
        ELSIF (v_old.max_active, v_old.max_active_per_key, v_old.rate_limit, v_old.rate_period,
               v_old.rate_limit_per_key, v_old.rate_period_per_key, v_old.fairness,
               v_old.on_key_full, v_old.feature_level, v_old.rate_burst, v_old.rate_burst_per_key)
              IS NOT DISTINCT FROM (v_max, v_per_key, v_rate, v_period, v_rate_key, v_period_key,
                                    v_fair, v_full, v_level, v_burst, v_burst_key)
        THEN
            sync_action := 'unchanged';
        ELSE
            UPDATE workhorse.policies p
            SET max_active = v_max, max_active_per_key = v_per_key, rate_limit = v_rate,
                rate_period = v_period, rate_limit_per_key = v_rate_key,
                rate_period_per_key = v_period_key, fairness = v_fair, on_key_full = v_full,
                feature_level = v_level, rate_burst = v_burst,
                rate_burst_per_key = v_burst_key, updated_at = now()
            WHERE p.queue = v_queue;
            sync_action := 'updated';
        END IF;
        IF v_keyed AND NOT v_was_keyed THEN
            PERFORM workhorse._rebuild_heads_v1(v_queue);
        ELSIF v_was_keyed AND NOT v_keyed THEN
            PERFORM workhorse._drop_heads_v1(v_queue);
        END IF;
        IF sync_action <> 'unchanged' THEN
            PERFORM workhorse._wake_v1(v_queue);
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
            -- Per-key limits refine a policy: they go with it.
            DELETE FROM workhorse.key_limits k WHERE k.queue = v_queue;
            DELETE FROM workhorse.key_limit_sets s WHERE s.queue = v_queue;
            IF NOT workhorse._keyed_v2(v_queue) THEN
                PERFORM workhorse._drop_heads_v1(v_queue);
            END IF;
            PERFORM workhorse._wake_v1(v_queue);
            sync_action := 'pruned';
            sync_queue := v_queue;
            RETURN NEXT;
        END LOOP;
    END IF;
END
$$;
