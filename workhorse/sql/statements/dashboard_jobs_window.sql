-- The dashboard's job search within one window of ids [lo, hi): the id and status of the newest
-- matches, at most %(cap)s, in one walk down the primary key (bounded by the window whatever the
-- filters). The caller takes its page from the first ones and counts the rest by status, so
-- that the page and its count cost one read. Queue and task match a case-insensitive substring
-- (the caller trims it); key and status match exactly; NULL means any.
SELECT id, status
FROM workhorse.jobs
WHERE id >= %(lo)s AND id < %(hi)s
  AND (%(queue)s::text IS NULL OR strpos(lower(queue), lower(%(queue)s::text)) > 0)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
  AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
ORDER BY id DESC
LIMIT %(cap)s
