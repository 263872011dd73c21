SELECT id FROM workhorse.cancel_jobs_v1(%s::bigint[], %s::text) AS id
