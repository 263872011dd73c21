-- What the frozen list statements of 0.2.0 do not read, for these jobs: the progress of their
-- current (or last) attempt (a value written under an older fence reads as none, see
-- migrations/0002_0.3.0.sql, "progress"), the budget they name ("budgets" there) and their tags
-- ("tags" there), their redrives ("dead letters" there) their bounds ("deadlines" there), and their
-- suspension and parent ("durable execution" there).
-- Only rows with any of them.
SELECT id, CASE WHEN (progress ->> 'fence')::bigint = fence THEN progress END, progress_at, budget,
       tags, redriven_at, redrive_count, deadline, start_by, suspended_on, wake_at, parent_id
FROM workhorse.jobs
WHERE id = ANY(%s::bigint[])
  AND ((progress IS NOT NULL AND (progress ->> 'fence')::bigint = fence) OR budget IS NOT NULL
       OR tags IS NOT NULL OR redriven_at IS NOT NULL OR start_by IS NOT NULL
       OR deadline IS NOT NULL OR suspended_on IS NOT NULL OR parent_id IS NOT NULL)
