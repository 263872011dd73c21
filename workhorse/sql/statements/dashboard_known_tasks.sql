-- Task names for the dashboard's suggestions (not a filter: the task filter matches a substring
-- of every job's task): those of schedules, and of the newest %(sample)s jobs.
SELECT DISTINCT t.task
FROM (SELECT s.task FROM workhorse.schedules s
      UNION ALL
      (SELECT j.task FROM workhorse.jobs j ORDER BY j.id DESC LIMIT %(sample)s)) AS t
ORDER BY t.task
LIMIT %(limit)s
