-- Each capacity grant's fair target: `p_total` units shared out over the holders' wants by
-- water-filling (a holder never gets more than it wants; what it leaves goes to the others in
-- equal parts), in whole units, in the order of `p_wanted`. The targets sum to at most
-- `p_total`, and to exactly the lesser of `p_total` and the sum of the wants.
CREATE FUNCTION workhorse._grant_targets_v1(p_total integer, p_wanted integer[])
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_n integer := COALESCE(cardinality(p_wanted), 0);
    v_targets integer[] := array_fill(0, ARRAY[GREATEST(v_n, 1)]);
    v_left integer := GREATEST(p_total, 0);
    v_order integer[];
    v_i integer;
    v_give integer;
BEGIN
    IF v_n = 0 THEN
        RETURN '{}';
    END IF;
    -- Smallest wants first, so that what they leave is shared among the larger ones.
    SELECT array_agg(w.i ORDER BY w.wanted, w.i) INTO v_order
    FROM unnest(p_wanted) WITH ORDINALITY AS w(wanted, i);
    FOR v_k IN 1..v_n LOOP
        v_i := v_order[v_k];
        v_give := LEAST(GREATEST(p_wanted[v_i], 0), v_left / (v_n - v_k + 1));
        v_targets[v_i] := v_give;
        v_left := v_left - v_give;
    END LOOP;
    RETURN v_targets;
END
$$;
