-- Desired state for one namespace's named budgets (sync_budgets_v1): one row per budget touched.
SELECT sync_action, sync_name
FROM workhorse.sync_budgets_v1(
    %s::text, %s::text[], %s::integer[], %s::integer[], %s::double precision[], %s::integer[],
    %s::boolean, %s::boolean[])
