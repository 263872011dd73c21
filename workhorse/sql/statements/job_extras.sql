-- What the frozen list statements of 0.2.0 do not read, for these jobs: the progress of their
-- current (or last) attempt (a value written under an older fence reads as none, see
-- migrations/0002_0.3.0.sql, "progress") and the budget they name ("budgets" there). Only rows
-- with either.
SELECT id, CASE WHEN (progress ->> 'fence')::bigint = fence THEN progress END, progress_at, budget
FROM workhorse.jobs
WHERE id = ANY(%s::bigint[])
  AND ((progress IS NOT NULL AND (progress ->> 'fence')::bigint = fence) OR budget IS NOT NULL)
