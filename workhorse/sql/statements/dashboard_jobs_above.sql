-- The ids of the dashboard job search's matches in [lo, hi), oldest first, at most %(limit)s:
-- where the page of newer jobs above a page ends (one bounded window of the primary key).
SELECT id
FROM workhorse.jobs
WHERE id >= %(lo)s AND id < %(hi)s
  AND (%(queue)s::text IS NULL OR strpos(lower(queue), lower(%(queue)s::text)) > 0)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
  AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
ORDER BY id
LIMIT %(limit)s
