SELECT e.id, e.duplicate FROM workhorse.enqueue_v2(
    %b::text[], %b::text[], %b::text[], %b::smallint[], %b::text[],
    %b::timestamptz[], %b::double precision[], %b::integer[], %b::text[], %b::text[],
    %b::text[], NULL, %b::text[], %b::double precision[], %b::text[], %b::text[],
    %b::text[], %b::integer[], %b::integer[], %b::smallint[], %b::text[], %b::text[],
    %b::timestamptz[], %b::double precision[], %b::timestamptz[], %b::double precision[]) AS e
