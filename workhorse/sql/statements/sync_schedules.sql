SELECT sync_action, sync_name
FROM workhorse.sync_schedules_v1(
    %s::text, %s::text[], %s::text[], %s::text[], %s::interval[], %s::text[], %s::text[],
    %s::text[], %s::text[], %s::text[], %s::smallint[], %s::integer[], %s::text[], %s::text[],
    %s::timestamptz[], %s::boolean)
