-- A parent's children (docs/design.md "Children"): the first %(limit)s by step and id, through
-- jobs_parent_idx (parent_id, parent_step, id), for the dashboard's job page and `workhorse jobs
-- show`: a step of a thousand children reads no more than the page shows.
SELECT j.id, j.parent_step, j.task, j.status
FROM workhorse.jobs j
WHERE j.parent_id = %(id)s
ORDER BY j.parent_id, j.parent_step, j.id
LIMIT %(limit)s
