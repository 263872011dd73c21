SELECT r.id, r.status FROM workhorse.release_v1(%s::bigint[], %s::bigint[], %s::text) AS r
