-- A hold's end (docs/design.md "Holds"): its row goes, and when its lease was still running
-- (its units were counted) the claimers of the budget's queues are woken to use them. Returns
-- whether the hold was still held (false: its lease had run out, or it was released already).
CREATE FUNCTION workhorse.release_hold_v1(p_id bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_budget text;
    v_held boolean;
BEGIN
    DELETE FROM workhorse.budget_holds h WHERE h.id = p_id
    RETURNING h.budget, h.lease_until > clock_timestamp() INTO v_budget, v_held;
    IF v_held THEN
        PERFORM workhorse._wake_v1(bq.queue)
        FROM workhorse.budget_queues bq WHERE bq.budget = v_budget;
    END IF;
    RETURN COALESCE(v_held, false);
END
$$;
