-- Attempt history (issue #32, docs/design.md "The dashboard in an incident") and registered tasks
-- (issue #24 item 6: health counts another app's jobs; the claim never takes them).
--
-- Every attempt that ends other than by a clean success is appended to `attempt_history` (at
-- most the last 20) by a row trigger, in the transaction that ends it. A trigger, not new
-- versions of the completion functions: it sees every way an attempt ends, including those
-- inside the claim (a lease reclaimed: "lost"; the sweep of an expired lease with no attempts
-- left) and those the 0.2.0 functions still make for older workers, without a new version of
-- complete, fail, snooze, release or claim. An AFTER trigger: a BEFORE row trigger would lock
-- every job row an UPDATE touches (one more WAL record for each claim, heartbeat and success).
-- Its WHEN clause is evaluated on the row in memory: a first-try success, a heartbeat and a
-- claim of a ready job never call the function, and the column stays NULL (no extra byte, no
-- extra row version) for a job that never failed. An attempt that did not succeed costs one more
-- row version (the function's own UPDATE of the row).
ALTER TABLE workhorse.jobs ADD COLUMN attempt_history jsonb;

\ir ../functions/_record_attempt_v1.sql

CREATE TRIGGER jobs_attempt_ended
    AFTER UPDATE ON workhorse.jobs
    FOR EACH ROW
    WHEN (OLD.status = 'active'
          AND (NEW.status NOT IN ('active', 'succeeded', 'ready')
               OR NEW.fence IS DISTINCT FROM OLD.fence))
    EXECUTE FUNCTION workhorse._record_attempt_v1();

-- The task names each supervisor's app declares (NULL: a supervisor of an older release that
-- did not say; health then counts none of its queues' jobs as unknown).
ALTER TABLE workhorse.workers ADD COLUMN tasks text[];

-- Ready jobs by task, so that a claim passes over another app's jobs without reading them
-- (claim_v2: one walk per task the worker's app declares, and a skip scan over the distinct
-- ready tasks of a queue that says whether it holds any).
CREATE INDEX jobs_ready_task_idx ON workhorse.jobs (queue, task, rank, id)
    WHERE status = 'ready';
