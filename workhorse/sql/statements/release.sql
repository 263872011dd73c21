SELECT r.id, r.status FROM workhorse.release_v2(%s::bigint[], %s::bigint[], %s::text) AS r
