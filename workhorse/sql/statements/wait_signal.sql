SELECT w.found, w.payload FROM workhorse.wait_signal_v1(%s::bigint, %s::bigint, %s::text, %s::text) AS w
