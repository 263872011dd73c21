-- The progress of these jobs' current (or last) attempt: a value written under an older fence
-- belongs to an older attempt and reads as none (see migrations/0002_0.3.0.sql, "progress").
SELECT id, progress, progress_at
FROM workhorse.jobs
WHERE id = ANY(%s::bigint[]) AND progress IS NOT NULL
  AND (progress ->> 'fence')::bigint = fence
