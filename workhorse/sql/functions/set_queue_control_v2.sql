-- Operator controls on one queue, as set_queue_control_v1 sets them (p_action 'pause', 'resume',
-- 'override' or 'clear_override'; the queue's admission lock taken exclusively; the control row
-- returned), keeping the key heads of a fair queue (fairness = 'key'): when the change turns the
-- queue's per-key limits off, set_queue_control_v1 drops its heads, and the fair claim needs them,
-- so they are built again at once, under the same lock.
--
-- An override may also set the rate bursts (`p_rate_burst`, `p_rate_burst_per_key`; NULL: keep
-- the override's), alone or beside other fields; each must fit the N in force for its rate (the
-- override's, else the policy's): WH002 otherwise, and the statement writes nothing. A clear
-- removes them with the rest. They are in force only while the row's override is (a pause-only
-- row keeps none). The claim enforces them next (docs/budgets.md).
CREATE FUNCTION workhorse.set_queue_control_v2(
    p_queue text, p_action text,
    p_max_active integer, p_max_active_per_key integer,
    p_rate_limit integer, p_rate_period double precision,
    p_rate_limit_per_key integer, p_rate_period_per_key double precision,
    p_expires_in double precision,
    p_rate_burst integer DEFAULT NULL, p_rate_burst_per_key integer DEFAULT NULL)
RETURNS SETOF workhorse.queue_controls
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_row workhorse.queue_controls;
    v_rows workhorse.queue_controls[] := '{}';
    v_bursts_only boolean := p_action = 'override' AND p_max_active IS NULL
        AND p_max_active_per_key IS NULL AND p_rate_limit IS NULL AND p_rate_limit_per_key IS NULL
        AND (p_rate_burst IS NOT NULL OR p_rate_burst_per_key IS NOT NULL);
    v_n integer;
    v_n_key integer;
BEGIN
    IF v_bursts_only THEN
        -- set_queue_control_v1 refuses an override of no field it knows: set it here.
        PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
        INSERT INTO workhorse.queue_controls AS c (queue) VALUES (p_queue)
        ON CONFLICT (queue) DO NOTHING;
        UPDATE workhorse.queue_controls c
        SET override_set_at = now(),
            override_expires_at = CASE WHEN p_expires_in IS NULL THEN NULL
                                       ELSE now() + make_interval(secs => p_expires_in) END,
            updated_at = now()
        WHERE c.queue = p_queue;
        PERFORM workhorse._wake_v1(p_queue);
    ELSE
        FOR v_row IN
            SELECT * FROM workhorse.set_queue_control_v1(
                p_queue, p_action, p_max_active, p_max_active_per_key, p_rate_limit,
                p_rate_period, p_rate_limit_per_key, p_rate_period_per_key, p_expires_in)
        LOOP
            v_rows := v_rows || v_row;
        END LOOP;
    END IF;
    IF p_action = 'clear_override' THEN
        UPDATE workhorse.queue_controls c SET rate_burst = NULL, rate_burst_per_key = NULL
        WHERE c.queue = p_queue AND (c.rate_burst IS NOT NULL OR c.rate_burst_per_key IS NOT NULL);
    ELSIF p_action = 'override' THEN
        UPDATE workhorse.queue_controls c
        SET rate_burst = COALESCE(p_rate_burst, c.rate_burst),
            rate_burst_per_key = COALESCE(p_rate_burst_per_key, c.rate_burst_per_key)
        WHERE c.queue = p_queue
        RETURNING COALESCE(c.rate_limit, (SELECT p.rate_limit FROM workhorse.policies p
                                          WHERE p.queue = p_queue)),
                  COALESCE(c.rate_limit_per_key, (SELECT p.rate_limit_per_key
                                                  FROM workhorse.policies p
                                                  WHERE p.queue = p_queue)),
                  c.rate_burst, c.rate_burst_per_key
        INTO v_n, v_n_key, p_rate_burst, p_rate_burst_per_key;
        IF p_rate_burst IS NOT NULL AND (v_n IS NULL OR p_rate_burst > v_n) THEN
            RAISE EXCEPTION 'queue %: rate_burst % needs a rate_limit of at least % in force '
                            '(it has %)', p_queue, p_rate_burst, p_rate_burst,
                            COALESCE(v_n::text, 'none') USING ERRCODE = 'WH002';
        END IF;
        IF p_rate_burst_per_key IS NOT NULL AND (v_n_key IS NULL OR p_rate_burst_per_key > v_n_key)
        THEN
            RAISE EXCEPTION 'queue %: rate_burst_per_key % needs a rate_limit_per_key of at '
                            'least % in force (it has %)', p_queue, p_rate_burst_per_key,
                            p_rate_burst_per_key, COALESCE(v_n_key::text, 'none')
                            USING ERRCODE = 'WH002';
        END IF;
    END IF;
    IF v_bursts_only OR p_action IN ('override', 'clear_override') THEN
        v_rows := ARRAY(SELECT c FROM workhorse.queue_controls c WHERE c.queue = p_queue);
    END IF;
    IF workhorse._keyed_v2(p_queue) AND NOT workhorse._keyed_v1(p_queue) THEN
        -- Fair and no per-key limit now: the heads may have been dropped just now.
        PERFORM workhorse._rebuild_heads_v1(p_queue);
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_rows);
END
$$;
