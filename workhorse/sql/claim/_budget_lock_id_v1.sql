-- The advisory lock of a named budget: taken exclusively by a sync or an override that changes
-- it, and (next session) by every claim, complete-and-claim, heartbeat and release that touches
-- it, always after the queue locks and in budget-name order (docs/budgets.md), so nothing
-- deadlocks. Another seed than the queue locks', so that a budget and a queue of one name are
-- two locks.
CREATE FUNCTION workhorse._budget_lock_id_v1(p_budget text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT hashtextextended(p_budget, 7048) $$;
