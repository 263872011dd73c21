SELECT h.id, h.cancel_requested
FROM workhorse.heartbeat_v1(%b::bigint[], %b::bigint[], %b::double precision[]) AS h
