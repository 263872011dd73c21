SELECT scope, name, ckey, until, by_job FROM workhorse.clear_backoff_v1(%s::text, %s::text, %s::text)
