-- Trigger: a key head carries its head job's budget (NULL: none), whoever writes the head (the
-- claims of every version, the refreshes and rebuilds), so that a claim can pass over the heads
-- of a full budget as one range of key_heads_budget_idx instead of looking at each.
CREATE FUNCTION workhorse._key_head_budget_v1() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.budget := (SELECT j.budget FROM workhorse.jobs j WHERE j.id = NEW.head_id);
    RETURN NEW;
END
$$;
