SELECT id FROM workhorse.heartbeat_v1(%s::bigint[], %s::bigint[], %s::double precision[]) AS id
