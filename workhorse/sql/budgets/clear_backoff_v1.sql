-- An operator ends backoffs before their time (docs/design.md "Back-pressure"): `p_scope`
-- 'queue' clears queue `p_name`'s own backoff and every key's of it, or only key `p_key`'s when
-- given; 'budget' clears budget `p_name`'s. The queue's control row keeps the stamp of what is
-- left (and goes when it holds nothing else), and the claimers of every queue the backoffs
-- held are woken, so that work resumes at once. Returns the backoffs cleared.
CREATE FUNCTION workhorse.clear_backoff_v1(p_scope text, p_name text, p_key text)
RETURNS TABLE (scope text, name text, ckey text, until timestamptz, by_job bigint)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_cleared workhorse.backoffs[];
BEGIN
    IF p_scope IS NULL OR p_scope NOT IN ('queue', 'budget') THEN
        RAISE EXCEPTION 'clear_backoff scope must be "queue" or "budget", got %', p_scope
            USING ERRCODE = 'WH005';
    END IF;
    IF p_key IS NOT NULL AND p_scope <> 'queue' THEN
        RAISE EXCEPTION 'a key names a backoff of a queue''s key, not of a budget'
            USING ERRCODE = 'WH005';
    END IF;
    IF p_scope = 'budget' THEN
        PERFORM pg_advisory_xact_lock(workhorse._budget_lock_id_v1(p_name));
        WITH gone AS (
            DELETE FROM workhorse.backoffs b
            WHERE b.scope = 'budget' AND b.name = p_name AND b.ckey = ''
            RETURNING b.*
        )
        SELECT array_agg(g) INTO v_cleared FROM gone g;
        PERFORM workhorse._wake_v1(bq.queue)
        FROM workhorse.budget_queues bq WHERE bq.budget = p_name AND v_cleared IS NOT NULL;
    ELSE
        PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_name));
        WITH gone AS (
            DELETE FROM workhorse.backoffs b
            WHERE b.scope IN ('queue', 'key') AND b.name = p_name
              AND (p_key IS NULL OR (b.scope = 'key' AND b.ckey = p_key))
            RETURNING b.*
        )
        SELECT array_agg(g) INTO v_cleared FROM gone g;
        UPDATE workhorse.queue_controls c
        SET backed_off_until = (SELECT max(b.until) FROM workhorse.backoffs b
                                WHERE b.scope IN ('queue', 'key') AND b.name = p_name)
        WHERE c.queue = p_name;
        DELETE FROM workhorse.queue_controls c
        WHERE c.queue = p_name AND NOT c.paused AND c.override_set_at IS NULL
          AND c.backed_off_until IS NULL;
        IF v_cleared IS NOT NULL THEN
            PERFORM workhorse._wake_v1(p_name);
        END IF;
    END IF;
    RETURN QUERY SELECT g.scope, g.name, NULLIF(g.ckey, ''), g.until, g.by_job
        FROM unnest(COALESCE(v_cleared, '{}')) AS g
        ORDER BY g.scope, g.ckey;
END
$$;
