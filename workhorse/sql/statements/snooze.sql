SELECT workhorse.snooze_v1(%s::bigint, %s::bigint, %s::double precision, %s::text)
