SELECT h.id, h.cancel_requested
FROM workhorse.heartbeat_v1(%s::bigint[], %s::bigint[], %s::double precision[]) AS h
