SELECT id FROM workhorse.cancel_jobs_v2(%s::bigint[], %s::text) AS id
