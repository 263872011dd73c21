-- Purge dead letters, or (dry run) say which (docs/design.md "Dead letters").
SELECT p.job_id, p.audit_id FROM workhorse.purge_dead_v1(
    %(queue)s::text, %(task)s::text, %(tag)s::text, %(error_type)s::text,
    %(since)s::timestamptz, %(ids)s::bigint[], %(dry_run)s::boolean, %(os_user)s::text,
    %(reason)s::text, %(filters)s::jsonb) AS p
