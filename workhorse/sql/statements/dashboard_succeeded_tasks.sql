-- The task names of succeeded jobs, in order, found by a skip scan of jobs_succeeded_task_idx
-- (one probe per distinct name, however long the history), at most %(cap)s + 1 of them (more
-- means: too many names to list; the caller then searches as before). `matches`: the name
-- contains %(task)s case-insensitively. The dashboard's job search turns its task substring
-- into the succeeded names it matches with this, so that each window reads its succeeded
-- matches by (task, id) instead of lower()ing every row of the window.
WITH RECURSIVE names(task, n) AS (
    (SELECT j.task, 1 FROM workhorse.jobs j WHERE j.status = 'succeeded' ORDER BY j.task LIMIT 1)
    UNION ALL
    SELECT (SELECT j.task FROM workhorse.jobs j
            WHERE j.status = 'succeeded' AND j.task > s.task ORDER BY j.task LIMIT 1), s.n + 1
    FROM names s WHERE s.task IS NOT NULL AND s.n <= %(cap)s
)
SELECT n.task, strpos(lower(n.task), lower(%(task)s::text)) > 0 AS matches
FROM names n
WHERE n.task IS NOT NULL
ORDER BY n.task
