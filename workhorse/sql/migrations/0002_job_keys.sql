-- Job keys (issue #27): unique jobs and job_key (debounce, throttle), and enqueue_v2, which
-- writes them and says of each job whether the enqueue inserted it. Also claim_v2, the claim of
-- feature level 2 (0.3.0's), which the worker of this release calls.
--
-- Why job keys need no feature level (a deliberate deviation from docs/design.md's "a job key
-- raises the queue's level"): only enqueue_v2 ever reads or writes `job_key` and `unique_key`.
-- The claim, complete, fail, snooze, retry and cancel functions of 0.2.0 (*_v1) never touch
-- them, and the two unique indexes below are partial on the key columns alone, not on the
-- status: so no status change those functions make (a retry back to `scheduled`, a snooze,
-- `h.retry()` of a failed job, a lease reclaimed) can ever conflict in them. A key moves only
-- inside an enqueue, which clears the previous holder's key in the same transaction as it
-- gives the key to the new job, under the holder's row lock. A row with a key is otherwise an
-- ordinary level-1 row (a job_key update changes only its payload, meta, run_at, priority and
-- status between `scheduled` and `ready`, hinting and waking as a retry does), so a 0.2.0
-- worker claims and records it correctly beside a newer one.

-- The key a job was enqueued with (docs/design.md "Job keys"), scoped to its task: while the job
-- holds it, at most one job of the task has it. A newer job that takes the key over clears
-- it here, so an older job that runs on (a retry, a snooze) runs without it.
ALTER TABLE workhorse.jobs
    ADD COLUMN job_key text CHECK (length(job_key) BETWEEN 1 AND 255);
-- A unique job's identity: a digest of its `by` values, and its period's bucket when it has a
-- period. Cleared by the enqueue of an equal job once this one is no longer in that job's
-- `states`, so the index says which job an equal enqueue is a duplicate of.
ALTER TABLE workhorse.jobs
    ADD COLUMN unique_key text CHECK (length(unique_key) BETWEEN 1 AND 255);

-- One holder per (task, key): concurrent enqueues of one key make one job (the second waits
-- for the first's commit, then finds its job), as the idempotency index does.
CREATE UNIQUE INDEX jobs_job_key_idx ON workhorse.jobs (task, job_key)
    WHERE job_key IS NOT NULL;
CREATE UNIQUE INDEX jobs_unique_key_idx ON workhorse.jobs (task, unique_key)
    WHERE unique_key IS NOT NULL;

\ir ../functions/enqueue_v2.sql
\ir ../functions/claim_v2.sql
