SELECT m.job_id, m.releases, m.pending
FROM workhorse.workflow_members m
WHERE m.workflow_id = %s
ORDER BY m.job_id
