-- Of these jobs that just reached a resting status, the parents suspended on their children
-- whose last child this was become `ready` (docs/design.md "Children"), in the transaction that
-- ends the child. Each parent's row is locked before its children are read: suspend_v1 holds it
-- while it looks at them, so whichever commits second sees the other's change.
CREATE FUNCTION workhorse._wake_parents_v1(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_parent bigint;
    v_queue text;
    v_key text;
BEGIN
    FOR v_parent IN
        SELECT DISTINCT c.parent_id FROM workhorse.jobs c
        WHERE c.id = ANY(p_ids) AND c.parent_id IS NOT NULL
        ORDER BY 1
    LOOP
        PERFORM 1 FROM workhorse.jobs p WHERE p.id = v_parent FOR NO KEY UPDATE;
        UPDATE workhorse.jobs p SET status = 'ready', suspended_on = NULL, wake_at = NULL
        WHERE p.id = v_parent AND p.status = 'suspended' AND p.suspended_on = 'children'
          AND NOT EXISTS (SELECT 1 FROM workhorse.jobs c
                          WHERE c.parent_id = v_parent
                            AND c.status NOT IN ('succeeded', 'failed', 'held', 'canceled',
                                                 'expired'))
        RETURNING p.queue, p.ckey INTO v_queue, v_key;
        IF FOUND THEN
            PERFORM workhorse._hint_keys_v2(v_queue, ARRAY[v_key]);
            PERFORM workhorse._wake_v1(v_queue);
        END IF;
    END LOOP;
END
$$;
