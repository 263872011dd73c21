SELECT workhorse.fail_v2(%s::bigint, %s::bigint, %s::text, %s::timestamptz, %s::text)
