-- Desired-state sync of one namespace's named budgets (docs/design.md "Named budgets"). Returns one
-- row per budget touched, with what happened to it: created, updated, unchanged or pruned. A rate
-- comes as (N, period seconds), NULL for none; `p_rate_bursts` is B (1 <= B <= N) or NULL.
-- A budget another namespace owns raises WH001 (PolicyConflictError) before anything is written.
-- Overrides live in budget_controls and are never touched here; the jobs that name a pruned
-- budget keep its name (a budget that does not exist imposes no limit).
--
-- Locks: each budget this call may touch, exclusively and in name order, before anything is
-- read, so two syncs racing for one new budget serialize and the second sees the first's row.
-- An app's sync takes its queues' locks first (sync_concurrency_policies_v2) and its budgets'
-- after, in the same transaction: the order every claim will take them in.
CREATE FUNCTION workhorse.sync_budgets_v1(
    p_namespace text,
    p_names text[],
    p_max_active integer[],
    p_rate_limits integer[],
    p_rate_periods double precision[],
    p_rate_bursts integer[],
    p_prune boolean,
    p_adaptive boolean[] DEFAULT NULL
) RETURNS TABLE (sync_action text, sync_name text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_name text;
    v_owner text;
    v_old workhorse.budgets;
    v_max integer;
    v_rate integer;
    v_period double precision;
    v_burst integer;
    v_adaptive boolean;
BEGIN
    FOR v_name IN
        SELECT n FROM unnest(p_names) AS n
        UNION
        SELECT b.name FROM workhorse.budgets b WHERE b.namespace = p_namespace AND p_prune
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(workhorse._budget_lock_id_v1(v_name));
    END LOOP;

    SELECT b.name, b.namespace INTO v_name, v_owner
    FROM workhorse.budgets b
    WHERE b.name = ANY(p_names) AND b.namespace <> p_namespace
    ORDER BY b.name
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'budget % is owned by namespace %, not %', v_name, v_owner, p_namespace
            USING ERRCODE = 'WH001';
    END IF;

    FOR v_name, v_max, v_rate, v_period, v_burst, v_adaptive IN
        SELECT u.n, u.m, u.r, u.p, u.b, COALESCE(u.a, false)
        FROM unnest(p_names, p_max_active, p_rate_limits, p_rate_periods, p_rate_bursts,
                    COALESCE(p_adaptive, '{}'::boolean[]))
             AS u(n, m, r, p, b, a)
        WHERE u.n IS NOT NULL
        ORDER BY 1
    LOOP
        SELECT * INTO v_old FROM workhorse.budgets b WHERE b.name = v_name;
        IF v_old.name IS NULL THEN
            INSERT INTO workhorse.budgets (name, namespace, max_active, rate_limit, rate_period,
                                           rate_burst, adaptive)
            VALUES (v_name, p_namespace, v_max, v_rate, v_period, v_burst, v_adaptive);
            sync_action := 'created';
        ELSIF (v_old.max_active, v_old.rate_limit, v_old.rate_period, v_old.rate_burst,
               v_old.adaptive)
              IS NOT DISTINCT FROM (v_max, v_rate, v_period, v_burst, v_adaptive) THEN
            sync_action := 'unchanged';
        ELSE
            UPDATE workhorse.budgets b
            SET max_active = v_max, rate_limit = v_rate, rate_period = v_period,
                rate_burst = v_burst, adaptive = v_adaptive, updated_at = now()
            WHERE b.name = v_name;
            sync_action := 'updated';
        END IF;
        sync_name := v_name;
        RETURN NEXT;
    END LOOP;

    IF p_prune THEN
        FOR v_name IN
            DELETE FROM workhorse.budgets b
            WHERE b.namespace = p_namespace AND NOT (b.name = ANY(p_names))
            RETURNING b.name
        LOOP
            sync_action := 'pruned';
            sync_name := v_name;
            RETURN NEXT;
        END LOOP;
    END IF;
END
$$;
