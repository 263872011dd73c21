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

    FOR v_queue, v_max, v_per_key IN
        SELECT * FROM unnest(p_queues, p_max_active, p_max_active_per_key) ORDER BY 1
    LOOP
        SELECT * INTO v_old FROM workhorse.policies p WHERE p.queue = v_queue;
        v_was_per_key := FOUND AND v_old.max_active_per_key IS NOT NULL;
        IF v_per_key IS NOT NULL AND NOT v_was_per_key THEN
            -- Wait out enqueues that read "no per-key policy", then build the heads they missed.
            PERFORM pg_advisory_xact_lock(workhorse._enqueue_gate_id_v1(v_queue));
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
            PERFORM workhorse._rebuild_heads_v1(v_queue);
        ELSIF v_per_key IS NULL AND v_was_per_key THEN
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
            PERFORM workhorse._drop_heads_v1(v_queue);
            PERFORM workhorse._wake_v1(v_queue);
            sync_action := 'pruned';
            sync_queue := v_queue;
            RETURN NEXT;
        END LOOP;
    END IF;
END
$$;
