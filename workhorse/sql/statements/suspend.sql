SELECT workhorse.suspend_v1(%s::bigint, %s::bigint, %s::text, %s::text, %s::text,
                            %s::timestamptz, %s::text, %s::text)
