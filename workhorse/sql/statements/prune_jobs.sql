SELECT workhorse.prune_jobs_v1(%s::integer, %s::double precision, %s::text[])
