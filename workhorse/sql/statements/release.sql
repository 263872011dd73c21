SELECT r.id, r.status FROM workhorse.release_v2(%b::bigint[], %b::bigint[], %s::text) AS r
