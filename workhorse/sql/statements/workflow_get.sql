SELECT w.id, w.result_ids, w.result_kind, w.on_error_job, w.created_at
FROM workhorse.workflows w
WHERE w.id = %s
