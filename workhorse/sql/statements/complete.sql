SELECT c.id, c.fence, c.status
FROM workhorse.complete_v2(%b::bigint[], %b::bigint[], %b::text[], %b::integer[], %b::text[]) AS c
