-- A hold outside tasks (docs/design.md "Holds"): take `p_units` units of budget `p_budget` now,
-- through the admission a claim uses, or say why not. Under the budget's lock (the lock every
-- claim that counts the budget takes, after its queue's), with the limits in force (an
-- unexpired override's fields over the declared ones): granted only when the budget is not
-- backed off, its free units (max_active less its unexpired active jobs' cost and its unexpired
-- holds' units; an adaptive budget's effective max_active) cover `p_units`, and its rate and
-- burst allow one more start (a hold counts one start, as a job of rate cost 1). A budget nobody
-- declared or overrode limits nothing: granted.
--
-- Returns one row: the hold's id and lease end when granted; else NULLs and `retry_in`, the
-- seconds until a clock lets it (a backoff's end, a rate's next start), NULL when only a release
-- of units can (the caller polls, or waits for the budget's queues' wake-ups). A hold that can
-- never fit the declared max_active raises WH005 (InvalidOptionsError), as does bad input.
CREATE FUNCTION workhorse.hold_budget_v1(
    p_budget text, p_units integer, p_lease double precision, p_key text, p_holder text,
    p_pid integer)
RETURNS TABLE (hold_id bigint, lease_until timestamptz, retry_in double precision)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
    v_limits record;
    v_off timestamptz;
    v_used bigint;
    v_window double precision;
    v_wait double precision := 0;
    v_id bigint;
    v_until timestamptz;
BEGIN
    IF p_units IS NULL OR p_units < 1 OR p_units > 1000000 THEN
        RAISE EXCEPTION 'a hold takes 1 to 1000000 units, got %', p_units USING ERRCODE = 'WH005';
    END IF;
    IF p_lease IS NULL OR NOT (p_lease > 0 AND p_lease <= 86400) THEN
        RAISE EXCEPTION 'a hold''s lease must be more than 0 and at most 86400 seconds, got %',
            p_lease USING ERRCODE = 'WH005';
    END IF;
    PERFORM pg_advisory_xact_lock(workhorse._budget_lock_id_v1(p_budget));
    v_now := clock_timestamp();

    SELECT b.until INTO v_off FROM workhorse.backoffs b
    WHERE b.scope = 'budget' AND b.name = p_budget AND b.ckey = '' AND b.until > v_now;
    IF FOUND THEN
        RETURN QUERY SELECT NULL::bigint, NULL::timestamptz,
            GREATEST(EXTRACT(epoch FROM v_off - v_now)::double precision, 0.001);
        RETURN;
    END IF;

    SELECT workhorse._adaptive_max_v1(
               COALESCE(o.max_active, bd.max_active),
               CASE WHEN bd.adaptive THEN bo.adaptive_max END, bo.until, bo.retry_after, v_now)
               AS max_active,
           COALESCE(o.rate_limit, bd.rate_limit) AS rate,
           CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_period ELSE bd.rate_period END AS period,
           COALESCE(o.rate_burst, bd.rate_burst) AS burst,
           bd.max_active AS decl_max
    INTO v_limits
    FROM (SELECT p_budget AS name) AS n
    LEFT JOIN workhorse.budgets bd ON bd.name = n.name
    LEFT JOIN workhorse.budget_controls o
        ON o.name = n.name AND (o.override_expires_at IS NULL OR o.override_expires_at > v_now)
    LEFT JOIN workhorse.backoffs bo ON bo.scope = 'budget' AND bo.name = n.name AND bo.ckey = '';
    IF v_limits.decl_max IS NOT NULL AND p_units > v_limits.decl_max THEN
        RAISE EXCEPTION 'a hold of % units can never fit budget %, whose max_active is %',
            p_units, p_budget, v_limits.decl_max USING ERRCODE = 'WH005';
    END IF;

    IF v_limits.max_active IS NOT NULL AND v_limits.max_active
           - (SELECT COALESCE(sum(j.cost), 0) FROM workhorse.jobs j
              WHERE j.budget = p_budget AND j.status = 'active' AND j.lease_until > v_now)
           - (SELECT COALESCE(sum(h.units), 0) FROM workhorse.budget_holds h
              WHERE h.budget = p_budget AND h.lease_until > v_now) < p_units THEN
        RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, NULL::double precision;
        RETURN;
    END IF;
    IF v_limits.rate IS NOT NULL THEN
        v_used := workhorse._budget_starts_used_v1(p_budget, 0::smallint, v_limits.period, v_now);
        IF v_used + 1 > v_limits.rate THEN
            v_wait := workhorse._budget_next_start_v1(p_budget, 0::smallint, v_limits.period,
                                                      v_limits.rate, 1, v_now);
        END IF;
        IF v_limits.burst IS NOT NULL THEN
            v_window := floor(v_limits.period * LEAST(v_limits.burst, v_limits.rate)
                              / v_limits.rate * 1000) / 1000;
            IF workhorse._budget_starts_used_v1(p_budget, 1::smallint, v_window, v_now) + 1
               > LEAST(v_limits.burst, v_limits.rate) THEN
                v_wait := GREATEST(v_wait, workhorse._budget_next_start_v1(
                    p_budget, 1::smallint, v_window, LEAST(v_limits.burst, v_limits.rate), 1,
                    v_now));
            END IF;
        END IF;
        IF v_wait > 0 THEN
            RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, v_wait;
            RETURN;
        END IF;
    END IF;

    v_until := clock_timestamp() + make_interval(secs => p_lease);
    INSERT INTO workhorse.budget_holds (budget, units, hold_key, lease_until, acquired_at,
                                        holder, pid)
    VALUES (p_budget, p_units, p_key, v_until, v_now, p_holder, p_pid)
    RETURNING id INTO v_id;
    IF v_limits.rate IS NOT NULL THEN
        -- The start, filed as the claim files its jobs' (buckets of 1/100 of each window).
        INSERT INTO workhorse.budget_starts AS r (budget, span, bucket_end, n)
        SELECT p_budget, w.span,
               to_timestamp(ceil(EXTRACT(epoch FROM v_now)::double precision / (w.len / 100))
                            * (w.len / 100)),
               1
        FROM (VALUES (0::smallint, v_limits.period), (1::smallint, v_window)) AS w(span, len)
        WHERE w.len IS NOT NULL
        ON CONFLICT (budget, span, bucket_end) DO UPDATE SET n = r.n + excluded.n;
    END IF;
    RETURN QUERY SELECT v_id, v_until, NULL::double precision;
END
$$;
