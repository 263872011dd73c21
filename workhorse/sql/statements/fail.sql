SELECT workhorse.fail_v3(%s::bigint, %s::bigint, %s::text, %s::timestamptz, %s::text)
