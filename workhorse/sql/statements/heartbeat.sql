SELECT h.id, h.cancel_requested
FROM workhorse.heartbeat_v2(%s::bigint[], %s::bigint[], %s::double precision[]) AS h
