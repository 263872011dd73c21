-- The audit log, newest first (docs/design.md "Dead letters"), optionally of one action.
SELECT id, at, action, os_user, application_name, db_user, filters, job_count, job_ids, reason
FROM workhorse.audit_log
WHERE (%(action)s::text IS NULL OR action = %(action)s::text)
ORDER BY id DESC
LIMIT %(limit)s
