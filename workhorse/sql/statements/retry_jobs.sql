SELECT id FROM workhorse.retry_jobs_v2(%s::bigint[]) AS id
