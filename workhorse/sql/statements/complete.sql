SELECT c.id, c.fence, c.status
FROM workhorse.complete_v3(%s::bigint[], %s::bigint[], %s::text[], %s::integer[], %s::text[]) AS c
