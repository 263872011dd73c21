SELECT workhorse.record_step_v1(%s::bigint, %s::bigint, %s::text, %s::text, %s::jsonb, %s::jsonb)
