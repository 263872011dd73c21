SELECT e.id FROM workhorse.enqueue_v1(
    %s::text[], %s::text[], %s::text[], %s::smallint[], %s::text[],
    %s::timestamptz[], %s::double precision[], %s::integer[], %s::text[], %s::text[],
    %s::text[]) AS e
