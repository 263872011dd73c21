SELECT workhorse.snooze_v2(%s::bigint, %s::bigint, %s::double precision, %s::text)
