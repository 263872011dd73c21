SELECT workhorse.prune_jobs_v2(%s::integer, %s::double precision, %s::text[])
