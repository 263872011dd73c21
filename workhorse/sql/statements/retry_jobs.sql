SELECT id FROM workhorse.retry_jobs_v1(%s::bigint[]) AS id
