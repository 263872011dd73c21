-- Redrive dead letters, or (dry run) say which and when (docs/design.md "Dead letters").
SELECT r.job_id, r.job_queue, r.release_at, r.audit_id FROM workhorse.redrive_v1(
    %(queue)s::text, %(task)s::text, %(tag)s::text, %(error_type)s::text,
    %(since)s::timestamptz, %(ids)s::bigint[], %(rate_n)s::integer,
    %(rate_period)s::double precision, %(dry_run)s::boolean, %(os_user)s::text,
    %(reason)s::text, %(filters)s::jsonb) AS r
