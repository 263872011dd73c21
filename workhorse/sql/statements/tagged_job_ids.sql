-- The ids of one tag's jobs in these statuses (all of them: a cancel or retry by tag), oldest
-- first, optionally of one queue.
SELECT t.job_id
FROM workhorse.job_tags t
JOIN workhorse.jobs j ON j.id = t.job_id
WHERE t.tag = %(tag)s::text
  AND j.status = ANY(%(statuses)s::text[])
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
ORDER BY t.job_id
