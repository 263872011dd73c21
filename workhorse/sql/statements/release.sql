SELECT r.id, r.status FROM workhorse.release_v1(%b::bigint[], %b::bigint[], %s::text) AS r
