-- Finished jobs older than the given seconds, up to a batch, moved from jobs to job_history
-- (docs/design.md "History"); -1 while another mover or pruner holds the lock.
SELECT workhorse.move_to_history_v1(%s::integer, %s::double precision)
