-- Per-key limits of one queue as desired state (docs/design.md "Per-key limits"): the listed keys'
-- limits (`p_keys` with their `p_max_active`, `p_weights`, rates as (N, period seconds) pairs;
-- NULL: that field is not limited by the key) and, with `p_set_default`, the default for keys not
-- listed (all NULL: none). `p_prune` deletes the queue's other keys' rows. Returns one row per key
-- touched: created, updated, unchanged or pruned, and for the set itself (key ''): created, or
-- updated when its default changed.
--
-- The set refines the queue's policy: the queue must have one (InvalidPolicyError otherwise), owned
-- by `p_namespace` (PolicyConflictError otherwise; NULL: whichever namespace owns it, for an
-- operator). It runs under the queue's admission lock, so the next claim sees all of it; a queue
-- that kept no key heads before starts keeping them here (after the enqueues that read "no heads"
-- are done: the enqueue gate), and the queue goes to feature level 2, where a 0.2.0 claim, which
-- would not read the rows, admits nothing.
CREATE FUNCTION workhorse.set_key_limits_v1(
    p_namespace text, p_queue text, p_keys text[], p_max_active integer[], p_weights integer[],
    p_rate_limits integer[], p_rate_periods double precision[], p_prune boolean,
    p_set_default boolean, p_default_max_active integer, p_default_weight integer,
    p_default_rate_limit integer, p_default_rate_period double precision)
RETURNS TABLE (sync_action text, sync_key text)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_owner text;
    v_was_keyed boolean;
    v_had_set boolean;
    v_same_default boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
    SELECT p.namespace INTO v_owner FROM workhorse.policies p WHERE p.queue = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue % has no policy: per-key limits refine a policy, so declare one '
                        '(max_active, max_active_per_key or a rate limit) first', p_queue
            USING ERRCODE = 'WH002';
    END IF;
    IF p_namespace IS NOT NULL AND v_owner <> p_namespace THEN
        RAISE EXCEPTION 'queue % is owned by namespace %, not %', p_queue, v_owner, p_namespace
            USING ERRCODE = 'WH001';
    END IF;
    v_was_keyed := workhorse._keyed_v2(p_queue);
    IF NOT v_was_keyed THEN
        -- Wait out enqueues that read "no heads", then build the heads they missed (below).
        PERFORM pg_advisory_xact_lock(workhorse._enqueue_gate_id_v1(p_queue));
    END IF;

    v_had_set := EXISTS (SELECT 1 FROM workhorse.key_limit_sets s WHERE s.queue = p_queue);
    v_same_default := EXISTS (
        SELECT 1 FROM workhorse.key_limit_sets s
        WHERE s.queue = p_queue
          AND (s.default_max_active, s.default_weight, s.default_rate_limit,
               s.default_rate_period) IS NOT DISTINCT FROM
              (p_default_max_active, p_default_weight::smallint, p_default_rate_limit,
               p_default_rate_period));
    INSERT INTO workhorse.key_limit_sets AS s (queue, default_max_active, default_weight,
                                               default_rate_limit, default_rate_period)
    VALUES (p_queue, CASE WHEN p_set_default THEN p_default_max_active END,
            CASE WHEN p_set_default THEN p_default_weight END,
            CASE WHEN p_set_default THEN p_default_rate_limit END,
            CASE WHEN p_set_default THEN p_default_rate_period END)
    ON CONFLICT (queue) DO UPDATE
    SET default_max_active = CASE WHEN p_set_default THEN excluded.default_max_active
                                  ELSE s.default_max_active END,
        default_weight = CASE WHEN p_set_default THEN excluded.default_weight
                              ELSE s.default_weight END,
        default_rate_limit = CASE WHEN p_set_default THEN excluded.default_rate_limit
                                  ELSE s.default_rate_limit END,
        default_rate_period = CASE WHEN p_set_default THEN excluded.default_rate_period
                                   ELSE s.default_rate_period END,
        updated_at = now();
    -- The set itself, as key '': created, or its default updated.
    IF NOT v_had_set THEN
        sync_action := 'created'; sync_key := ''; RETURN NEXT;
    ELSIF p_set_default AND NOT v_same_default THEN
        sync_action := 'updated'; sync_key := ''; RETURN NEXT;
    END IF;

    RETURN QUERY
    DELETE FROM workhorse.key_limits k
    WHERE p_prune AND k.queue = p_queue AND NOT (k.ckey = ANY(p_keys))
    RETURNING 'pruned'::text, k.ckey;

    RETURN QUERY
    WITH wanted AS (
        SELECT u.ckey, u.max_active, u.weight::smallint AS weight, u.rate_limit, u.rate_period
        FROM unnest(p_keys, p_max_active, p_weights, p_rate_limits, p_rate_periods)
             AS u(ckey, max_active, weight, rate_limit, rate_period)
    ), written AS (
        INSERT INTO workhorse.key_limits AS k (queue, ckey, max_active, weight, rate_limit,
                                               rate_period)
        SELECT p_queue, w.ckey, w.max_active, w.weight, w.rate_limit, w.rate_period
        FROM wanted w
        ON CONFLICT (queue, ckey) DO UPDATE
        SET max_active = excluded.max_active, weight = excluded.weight,
            rate_limit = excluded.rate_limit, rate_period = excluded.rate_period,
            updated_at = now()
        WHERE (k.max_active, k.weight, k.rate_limit, k.rate_period) IS DISTINCT FROM
              (excluded.max_active, excluded.weight, excluded.rate_limit, excluded.rate_period)
        RETURNING k.ckey, k.xmax = 0 AS inserted
    )
    SELECT CASE WHEN d.ckey IS NULL THEN 'unchanged'
                WHEN d.inserted THEN 'created' ELSE 'updated' END,
           w.ckey
    FROM wanted w
    LEFT JOIN written d ON d.ckey = w.ckey
    ORDER BY w.ckey;

    INSERT INTO workhorse.queue_levels AS lv (queue, feature_level) VALUES (p_queue, 2)
    ON CONFLICT (queue) DO UPDATE SET feature_level = GREATEST(lv.feature_level, 2);
    IF NOT v_was_keyed THEN
        PERFORM workhorse._rebuild_heads_v1(p_queue);
    END IF;
    PERFORM workhorse._wake_v1(p_queue);
END
$$;
