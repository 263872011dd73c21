SELECT e.id FROM workhorse.enqueue_v1(
    %b::text[], %b::text[], %b::text[], %b::smallint[], %b::text[],
    %b::timestamptz[], %b::double precision[], %b::integer[], %b::text[], %b::text[],
    %b::text[]) AS e
