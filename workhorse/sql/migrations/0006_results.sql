-- Results and control: cancel requests for running jobs, idempotency keys, and retention (a
-- job's expiry, fixed when it finishes, from the retention of the app that ran it).
ALTER TABLE workhorse.jobs
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN idempotency_key     text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    ADD COLUMN expires_at          timestamptz;

-- One job per (task, key) while it exists: concurrent enqueues of one key make exactly one.
CREATE UNIQUE INDEX jobs_idempotency_idx ON workhorse.jobs (task, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Retention: the pruner deletes in expiry order, in bounded batches.
CREATE INDEX jobs_expires_idx ON workhorse.jobs (expires_at) WHERE expires_at IS NOT NULL;

\ir ../functions/results_channel_v1.sql
\ir ../functions/_ended_v1.sql
\ir ../functions/listen_results_v1.sql
\ir ../functions/_expiry_v1.sql
\ir ../functions/_failed_status_v1.sql
\ir ../functions/prune_jobs_v1.sql
