-- Trigger: a key head carries its head job's budget (NULL: none), whoever writes the head (the
-- claims of every version, the refreshes and rebuilds), so that a claim can pass over the heads
-- of a full budget as one range of key_heads_budget_idx instead of looking at each. It runs only
-- where the writer did not set it: `budget_for` names the head whose budget `budget` is, so a
-- head moved by a writer that knows nothing of budgets (a claim of 0.2.0, a refresh) differs.
CREATE FUNCTION workhorse._key_head_budget_v1() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.budget := (SELECT j.budget FROM workhorse.jobs j WHERE j.id = NEW.head_id);
    NEW.budget_for := NEW.head_id;
    RETURN NEW;
END
$$;
