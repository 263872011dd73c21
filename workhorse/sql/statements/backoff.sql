SELECT status, scope, name, ckey, until
FROM workhorse.backoff_v1(%s::bigint, %s::bigint, %s::double precision, %s::text, %s::text,
                          %s::boolean, %s::text)
