SELECT workhorse.signal_v1(%s::bigint, %s::text, %s::jsonb, %s::text)
