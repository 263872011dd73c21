SELECT w.workflow_id, w.ids, w.missing FROM workhorse.enqueue_workflow_v1(
    %b::text[], %b::text[], %b::text[], %b::smallint[], %b::text[],
    %b::timestamptz[], %b::double precision[], %b::integer[], %b::text[], %b::text[],
    %b::text[], %b::integer[], %b::integer[], %b::bigint[], %b::integer[], %b::boolean[],
    %b::integer[], %b::text, %b::text, %b::text, %b::text, %b::smallint, %b::text,
    %b::integer, %b::text, %b::integer[], %b::integer[], %b::smallint[], %b::text[],
    %b::integer, %b::integer, %b::smallint, %b::text[], %b::text, %b::text[], %b::text) AS w
