-- Operator controls on one queue, as set_queue_control_v1 sets them (p_action 'pause', 'resume',
-- 'override' or 'clear_override'; the queue's admission lock taken exclusively; the control row
-- returned), keeping the key heads of a fair queue (fairness = 'key'): when the change turns the
-- queue's per-key limits off, set_queue_control_v1 drops its heads, and the fair claim needs them,
-- so they are built again at once, under the same lock.
CREATE FUNCTION workhorse.set_queue_control_v2(
    p_queue text, p_action text,
    p_max_active integer, p_max_active_per_key integer,
    p_rate_limit integer, p_rate_period double precision,
    p_rate_limit_per_key integer, p_rate_period_per_key double precision,
    p_expires_in double precision)
RETURNS SETOF workhorse.queue_controls
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_row workhorse.queue_controls;
    v_rows workhorse.queue_controls[] := '{}';
BEGIN
    FOR v_row IN
        SELECT * FROM workhorse.set_queue_control_v1(
            p_queue, p_action, p_max_active, p_max_active_per_key, p_rate_limit, p_rate_period,
            p_rate_limit_per_key, p_rate_period_per_key, p_expires_in)
    LOOP
        v_rows := v_rows || v_row;
    END LOOP;
    IF workhorse._keyed_v2(p_queue) AND NOT workhorse._keyed_v1(p_queue) THEN
        -- Fair and no per-key limit now: the heads may have been dropped just now.
        PERFORM workhorse._rebuild_heads_v1(p_queue);
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_rows);
END
$$;
