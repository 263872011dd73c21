-- A job's attempts that did not succeed (attempt_history, oldest first, at most 20) and what the
-- row says of its latest attempt, from which a success is shown (it is not stored twice).
SELECT j.attempt_history, j.status, j.attempts, j.started_at, j.finished_at
FROM workhorse.jobs j
WHERE j.id = %s
