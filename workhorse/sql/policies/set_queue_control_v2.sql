-- Operator controls on one queue, governed or not: p_action is 'pause', 'resume', 'override'
-- (the fields given replace the policy's until cleared or until p_expires_in seconds pass;
-- fields left NULL keep any earlier override of theirs) or 'clear_override'.
-- Takes the queue's admission lock exclusively, like a sync: claims in flight finish first, and
-- none admits under the old rules after this commits. A sync never touches these rows.
-- Returns the queue's control row afterwards (no row when nothing is left to control).
--
-- Key heads follow _keyed_v2: a change that makes the queue keep heads (a per-key limit
-- overridden where none was) builds them, after waiting out the enqueues that read "no heads"
-- (the enqueue gate); one that leaves nothing keeping them (no per-key limit, no fair share) drops
-- them. A fair queue (fairness = 'key') keeps its heads whatever its per-key limits.
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
    v_was_keyed boolean;
    v_keyed boolean;
    v_n integer;
    v_n_key integer;
    v_burst integer;
    v_burst_per_key integer;
BEGIN
    IF p_action NOT IN ('pause', 'resume', 'override', 'clear_override') THEN
        RAISE EXCEPTION 'unknown queue control %', p_action USING ERRCODE = 'WH005';
    END IF;
    IF p_action = 'override' AND p_max_active IS NULL AND p_max_active_per_key IS NULL
       AND p_rate_limit IS NULL AND p_rate_limit_per_key IS NULL
       AND p_rate_burst IS NULL AND p_rate_burst_per_key IS NULL THEN
        RAISE EXCEPTION 'an override needs at least one field' USING ERRCODE = 'WH002';
    END IF;
    PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
    v_was_keyed := workhorse._keyed_v2(p_queue);
    IF p_action = 'override' AND NOT v_was_keyed
       AND (p_max_active_per_key IS NOT NULL OR p_rate_limit_per_key IS NOT NULL) THEN
        -- Wait out enqueues that read "no per-key limit"; the heads are built below.
        PERFORM pg_advisory_xact_lock(workhorse._enqueue_gate_id_v1(p_queue));
    END IF;

    INSERT INTO workhorse.queue_controls AS c (queue) VALUES (p_queue)
    ON CONFLICT (queue) DO NOTHING;
    IF p_action = 'pause' THEN
        UPDATE workhorse.queue_controls c
        SET paused = true, paused_at = COALESCE(c.paused_at, now()), updated_at = now()
        WHERE c.queue = p_queue;
    ELSIF p_action = 'resume' THEN
        UPDATE workhorse.queue_controls c
        SET paused = false, paused_at = NULL, updated_at = now()
        WHERE c.queue = p_queue;
    ELSIF p_action = 'override' THEN
        UPDATE workhorse.queue_controls c
        SET max_active = COALESCE(p_max_active, c.max_active),
            max_active_per_key = COALESCE(p_max_active_per_key, c.max_active_per_key),
            rate_limit = COALESCE(p_rate_limit, c.rate_limit),
            rate_period = CASE WHEN p_rate_limit IS NOT NULL THEN p_rate_period
                               ELSE c.rate_period END,
            rate_limit_per_key = COALESCE(p_rate_limit_per_key, c.rate_limit_per_key),
            rate_period_per_key = CASE WHEN p_rate_limit_per_key IS NOT NULL
                                       THEN p_rate_period_per_key
                                       ELSE c.rate_period_per_key END,
            rate_burst = COALESCE(p_rate_burst, c.rate_burst),
            rate_burst_per_key = COALESCE(p_rate_burst_per_key, c.rate_burst_per_key),
            override_set_at = now(),
            override_expires_at = CASE WHEN p_expires_in IS NULL THEN NULL
                                       ELSE now() + make_interval(secs => p_expires_in) END,
            updated_at = now()
        WHERE c.queue = p_queue
        RETURNING COALESCE(c.rate_limit, (SELECT p.rate_limit FROM workhorse.policies p
                                          WHERE p.queue = p_queue)),
                  COALESCE(c.rate_limit_per_key, (SELECT p.rate_limit_per_key
                                                  FROM workhorse.policies p
                                                  WHERE p.queue = p_queue)),
                  c.rate_burst, c.rate_burst_per_key
        INTO v_n, v_n_key, v_burst, v_burst_per_key;
        IF v_burst IS NOT NULL AND (v_n IS NULL OR v_burst > v_n) THEN
            RAISE EXCEPTION 'queue %: rate_burst % needs a rate_limit of at least % in force '
                            '(it has %)', p_queue, v_burst, v_burst,
                            COALESCE(v_n::text, 'none') USING ERRCODE = 'WH002';
        END IF;
        IF v_burst_per_key IS NOT NULL AND (v_n_key IS NULL OR v_burst_per_key > v_n_key) THEN
            RAISE EXCEPTION 'queue %: rate_burst_per_key % needs a rate_limit_per_key of at '
                            'least % in force (it has %)', p_queue, v_burst_per_key,
                            v_burst_per_key, COALESCE(v_n_key::text, 'none')
                            USING ERRCODE = 'WH002';
        END IF;
    ELSE
        UPDATE workhorse.queue_controls c
        SET max_active = NULL, max_active_per_key = NULL, rate_limit = NULL, rate_period = NULL,
            rate_limit_per_key = NULL, rate_period_per_key = NULL, rate_burst = NULL,
            rate_burst_per_key = NULL, override_set_at = NULL, override_expires_at = NULL,
            updated_at = now()
        WHERE c.queue = p_queue;
    END IF;
    DELETE FROM workhorse.queue_controls c
    WHERE c.queue = p_queue AND NOT c.paused AND c.override_set_at IS NULL
      AND (c.backed_off_until IS NULL OR c.backed_off_until <= now());  -- a backoff's stamp

    v_keyed := workhorse._keyed_v2(p_queue);
    IF v_keyed AND NOT v_was_keyed THEN
        PERFORM workhorse._rebuild_heads_v1(p_queue);
    ELSIF v_was_keyed AND NOT v_keyed THEN
        PERFORM workhorse._drop_heads_v1(p_queue);
    END IF;
    PERFORM workhorse._wake_v1(p_queue);
    RETURN QUERY SELECT * FROM workhorse.queue_controls c WHERE c.queue = p_queue;
END
$$;
