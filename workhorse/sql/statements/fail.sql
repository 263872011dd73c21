SELECT workhorse.fail_v1(%s::bigint, %s::bigint, %s::text, %s::timestamptz, %s::text)
