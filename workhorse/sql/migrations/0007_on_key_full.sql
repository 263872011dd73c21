-- on_key_full (issue #27, docs/design.md "Job keys"): what an enqueue does when the job's key is
-- full. 'queue' (the default) waits, as every 0.2.0 queue did; 'cancel_in_progress' makes the
-- newest job win (the key's older pending jobs are canceled and its oldest active ones asked to
-- cancel until the new one fits); 'cancel_newest' cancels the new job at once. Only an enqueue
-- acts on it (enqueue_v2, through _on_key_full_v1); claims and completions do not read it, so
-- it needs no feature level: a 0.2.0 worker claims and records such a queue's jobs as before.
--
-- For an existing database: one column on policies (a small table), and one partial index on
-- jobs over scheduled keyed jobs (built once, reading the table under a lock that blocks writes
-- to jobs meanwhile).
ALTER TABLE workhorse.policies
    ADD COLUMN on_key_full text NOT NULL DEFAULT 'queue'
        CHECK (on_key_full IN ('queue', 'cancel_in_progress', 'cancel_newest')),
    ADD CONSTRAINT policies_on_key_full_needs_max_active_per_key
        CHECK (on_key_full = 'queue' OR max_active_per_key IS NOT NULL);

-- A key's scheduled jobs (retries and delayed jobs count as pending): an enqueue for a full key
-- sums and cancels them by key, where jobs_scheduled_idx would read every scheduled job of the
-- queue.
CREATE INDEX jobs_scheduled_key_idx ON workhorse.jobs (queue, ckey, id)
    WHERE status = 'scheduled' AND ckey <> '';

\ir ../functions/_on_key_full_v1.sql
