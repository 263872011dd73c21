-- Desired schedules of one namespace, with cost, rate_cost and weight (docs/design.md "Fair share
-- and job cost") and the tags of their jobs.
SELECT sync_action, sync_name
FROM workhorse.sync_schedules_v2(
    %s::text, %s::text[], %s::text[], %s::text[], %s::interval[], %s::text[], %s::text[],
    %s::text[], %s::text[], %s::text[], %s::smallint[], %s::integer[], %s::text[], %s::text[],
    %s::timestamptz[], %s::boolean, %s::integer[], %s::integer[], %s::smallint[], %s::text[])
