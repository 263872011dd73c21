-- Delete per-key limits of one queue (docs/design.md "Per-key limits"): the rows of `p_keys`, or
-- with NULL the whole set (the default with it). Ownership as in set_key_limits_v1 (`p_namespace`
-- NULL: an operator). Returns the keys whose rows went ('' stands for the set itself). A queue
-- that keeps heads only for the set stops keeping them; its level stays 2 (levels never go back).
CREATE FUNCTION workhorse.clear_key_limits_v1(p_namespace text, p_queue text, p_keys text[])
RETURNS TABLE (sync_action text, sync_key text)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_owner text;
BEGIN
    PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
    SELECT p.namespace INTO v_owner FROM workhorse.policies p WHERE p.queue = p_queue;
    IF FOUND AND p_namespace IS NOT NULL AND v_owner <> p_namespace THEN
        RAISE EXCEPTION 'queue % is owned by namespace %, not %', p_queue, v_owner, p_namespace
            USING ERRCODE = 'WH001';
    END IF;
    IF p_keys IS NULL THEN
        RETURN QUERY
        DELETE FROM workhorse.key_limits k WHERE k.queue = p_queue
        RETURNING 'pruned'::text, k.ckey;
        RETURN QUERY
        DELETE FROM workhorse.key_limit_sets s WHERE s.queue = p_queue
        RETURNING 'pruned'::text, ''::text;
        IF NOT workhorse._keyed_v2(p_queue) THEN
            PERFORM workhorse._drop_heads_v1(p_queue);
        END IF;
    ELSE
        RETURN QUERY
        DELETE FROM workhorse.key_limits k WHERE k.queue = p_queue AND k.ckey = ANY(p_keys)
        RETURNING 'pruned'::text, k.ckey;
    END IF;
    PERFORM workhorse._wake_v1(p_queue);
END
$$;
