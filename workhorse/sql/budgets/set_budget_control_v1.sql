-- An operator's override of a named budget (docs/design.md "Named budgets": overridable like a
-- queue). p_action 'override' replaces the fields given (NULL: keep what the override had) until
-- `clear_override` or until p_expires_in seconds pass (NULL: until cleared); 'clear_override'
-- deletes it. It may target any budget name, declared or not (an override of a budget nobody
-- declared limits it by the override's own fields, as the claim and health read it). A burst
-- must fit the N in force (the override's rate, else the declared one): WH002 otherwise, before
-- anything is written. Takes the budget's lock exclusively. Returns the control row (none after
-- a clear).
CREATE FUNCTION workhorse.set_budget_control_v1(
    p_name text, p_action text,
    p_max_active integer, p_rate_limit integer, p_rate_period double precision,
    p_rate_burst integer, p_expires_in double precision)
RETURNS SETOF workhorse.budget_controls
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_n integer;
BEGIN
    IF p_action NOT IN ('override', 'clear_override') THEN
        RAISE EXCEPTION 'unknown budget control %', p_action USING ERRCODE = 'WH005';
    END IF;
    IF p_action = 'override' AND p_max_active IS NULL AND p_rate_limit IS NULL
       AND p_rate_burst IS NULL THEN
        RAISE EXCEPTION 'a budget override needs at least one of max_active, rate_limit, '
                        'rate_burst' USING ERRCODE = 'WH002';
    END IF;
    PERFORM pg_advisory_xact_lock(workhorse._budget_lock_id_v1(p_name));
    IF p_action = 'clear_override' THEN
        DELETE FROM workhorse.budget_controls c WHERE c.name = p_name;
        RETURN;
    END IF;
    IF p_rate_burst IS NOT NULL THEN
        SELECT COALESCE(p_rate_limit, c.rate_limit, b.rate_limit) INTO v_n
        FROM (SELECT 1) AS one
        LEFT JOIN workhorse.budget_controls c ON c.name = p_name
        LEFT JOIN workhorse.budgets b ON b.name = p_name;
        IF v_n IS NULL OR p_rate_burst > v_n THEN
            RAISE EXCEPTION 'budget %: rate_burst % needs a rate limit of at least % starts in '
                            'force (it has %)', p_name, p_rate_burst, p_rate_burst,
                            COALESCE(v_n::text, 'none') USING ERRCODE = 'WH002';
        END IF;
    END IF;
    INSERT INTO workhorse.budget_controls AS c
        (name, max_active, rate_limit, rate_period, rate_burst, override_set_at,
         override_expires_at)
    VALUES (p_name, p_max_active, p_rate_limit, p_rate_period, p_rate_burst, now(),
            CASE WHEN p_expires_in IS NULL THEN NULL
                 ELSE now() + make_interval(secs => p_expires_in) END)
    ON CONFLICT (name) DO UPDATE
    SET max_active = COALESCE(excluded.max_active, c.max_active),
        rate_limit = COALESCE(excluded.rate_limit, c.rate_limit),
        rate_period = CASE WHEN excluded.rate_limit IS NOT NULL THEN excluded.rate_period
                           ELSE c.rate_period END,
        rate_burst = COALESCE(excluded.rate_burst, c.rate_burst),
        override_set_at = now(),
        override_expires_at = excluded.override_expires_at;
    RETURN QUERY SELECT * FROM workhorse.budget_controls c WHERE c.name = p_name;
END
$$;
