SELECT queue, NULLIF(ckey, '') AS ckey, result
FROM workhorse.jobs
WHERE id >= %s AND queue = ANY(%s::text[]) AND status = 'succeeded'
