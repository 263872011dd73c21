-- The baseline of workhorse 0.2.0, the first release: every table, index and function of the
-- SQL API at version 1. Each function lives in its own file under functions/, named after it;
-- `\ir` applies it here, as psql would. From 0.2.0 on a released file never changes: a new
-- behaviour is a new version beside the old (claim_v2.sql), applied by a new migration, so that
-- workers still running the old code keep calling exactly what they were written against; a
-- version no released code calls is dropped by a migration one release later.
--
-- Feature levels: every job and every queue carries the level of the features it uses (0.2.0's
-- are level 1). A claim or outcome function of level L admits nothing from a queue above L and
-- touches no job above L, so the workers of an older release run safely beside newer ones.

-- ---- jobs -------------------------------------------------------------------------------------
CREATE SEQUENCE workhorse.fence_seq AS bigint;

CREATE TABLE workhorse.jobs (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task                 text        NOT NULL,
    queue                text        NOT NULL,
    -- '' means keyless: a real value keeps the (queue, ckey, rank, id) index usable with equality.
    ckey                 text        NOT NULL DEFAULT '',
    priority             smallint    NOT NULL DEFAULT 0,
    -- "priority DESC, id ASC" as one ascending keyset. STORED: PostgreSQL 18 makes generated
    -- columns virtual by default, and virtual ones cannot be indexed. integer, not smallint:
    -- the negation of priority -32768 does not fit in a smallint.
    rank                 integer     GENERATED ALWAYS AS (-(priority::integer)) STORED,
    payload              jsonb       NOT NULL,
    status               text        NOT NULL,
    attempts             integer     NOT NULL DEFAULT 0,
    max_attempts         integer     NOT NULL DEFAULT 3,
    on_failure           text        NOT NULL DEFAULT 'fail',
    run_at               timestamptz NOT NULL DEFAULT now(),
    enqueued_at          timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    finished_at          timestamptz,
    lease_until          timestamptz,
    fence                bigint,
    result               jsonb,
    error                jsonb,
    meta                 jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- An operator asked to cancel the running job: its handler is told, and it ends `canceled`.
    cancel_requested_at  timestamptz,
    idempotency_key      text        CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    -- When retention prunes the finished job, fixed when it finishes from the app that ran it.
    expires_at           timestamptz,
    -- The occurrence a job fired by a schedule stands for.
    scheduled_for        timestamptz,
    -- The feature level this job needs of the code that claims and records it.
    feature_level        smallint    NOT NULL DEFAULT 1 CHECK (feature_level >= 1),
    CONSTRAINT jobs_status_check CHECK (status IN
        ('scheduled', 'ready', 'active', 'succeeded', 'failed', 'held', 'canceled')),
    CONSTRAINT jobs_on_failure_check CHECK (on_failure IN ('fail', 'hold')),
    CONSTRAINT jobs_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000)
);

-- Queue-order walk for the fast path and for queues with only a queue-wide limit.
CREATE INDEX jobs_ready_idx ON workhorse.jobs (queue, rank, id) WHERE status = 'ready';
-- Per-key heads and keyless work: one key's ready jobs in admission order.
CREATE INDEX jobs_ready_key_idx ON workhorse.jobs (queue, ckey, rank, id) WHERE status = 'ready';
-- Capacity in use, and expired leases to reclaim; at most max_active unexpired rows per queue.
CREATE INDEX jobs_active_idx ON workhorse.jobs (queue, lease_until) INCLUDE (ckey)
    WHERE status = 'active';
CREATE INDEX jobs_scheduled_idx ON workhorse.jobs (queue, run_at) WHERE status = 'scheduled';
-- Operators list held and failed jobs; both stay small next to succeeded history.
CREATE INDEX jobs_held_failed_idx ON workhorse.jobs (status, queue, id)
    WHERE status IN ('held', 'failed', 'canceled');
-- One job per (task, key) while it exists: concurrent enqueues of one key make exactly one.
CREATE UNIQUE INDEX jobs_idempotency_idx ON workhorse.jobs (task, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Retention: the pruner deletes in expiry order, in bounded batches.
CREATE INDEX jobs_expires_idx ON workhorse.jobs (expires_at) WHERE expires_at IS NOT NULL;

-- Claims and completions leave dead entries at the front of the ready indexes, and every claim
-- walks them until vacuum runs: vacuum after a fixed number of changes, not a fraction of history.
ALTER TABLE workhorse.jobs SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_insert_scale_factor = 0.0, autovacuum_vacuum_insert_threshold = 50000);

-- ---- admission --------------------------------------------------------------------------------
-- Concurrency policies and rate limits: desired state per namespace. A rate limit is N starts
-- per period (seconds), queue-wide and per key; both halves or neither.
CREATE TABLE workhorse.policies (
    queue                text PRIMARY KEY,
    namespace            text        NOT NULL,
    max_active           integer     CHECK (max_active >= 1),
    max_active_per_key   integer     CHECK (max_active_per_key >= 1),
    rate_limit           integer     CHECK (rate_limit BETWEEN 1 AND 1000000),
    rate_period          double precision CHECK (rate_period > 0 AND rate_period <= 31622400),
    rate_limit_per_key   integer     CHECK (rate_limit_per_key BETWEEN 1 AND 1000000),
    rate_period_per_key  double precision
        CHECK (rate_period_per_key > 0 AND rate_period_per_key <= 31622400),
    -- The feature level the policy's own fields need (all of 0.2.0's are level 1).
    feature_level        smallint    NOT NULL DEFAULT 1 CHECK (feature_level >= 1),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT policies_some_limit CHECK (max_active IS NOT NULL
        OR max_active_per_key IS NOT NULL OR rate_limit IS NOT NULL
        OR rate_limit_per_key IS NOT NULL),
    CONSTRAINT policies_per_key_le_queue CHECK (
        max_active IS NULL OR max_active_per_key IS NULL OR max_active_per_key <= max_active),
    CONSTRAINT policies_rate_pair CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT policies_rate_per_key_pair
        CHECK ((rate_limit_per_key IS NULL) = (rate_period_per_key IS NULL))
);
CREATE INDEX policies_namespace_idx ON workhorse.policies (namespace);

-- The highest feature level a queue's jobs have used, raised by the enqueue that uses it (in the
-- enqueuing transaction, so a claimer sees the level no later than the job). No row: level 1.
CREATE TABLE workhorse.queue_levels (
    queue          text     PRIMARY KEY,
    feature_level  smallint NOT NULL CHECK (feature_level >= 1)
);

-- Operator controls, on any queue, governed or not, and never touched by a sync: a pause, and an
-- override of the policy's fields (NULL: that field is not overridden) until it expires or is
-- cleared. A row with neither is deleted.
CREATE TABLE workhorse.queue_controls (
    queue                text PRIMARY KEY,
    paused               boolean     NOT NULL DEFAULT false,
    paused_at            timestamptz,
    max_active           integer     CHECK (max_active BETWEEN 1 AND 1000000),
    max_active_per_key   integer     CHECK (max_active_per_key BETWEEN 1 AND 1000000),
    rate_limit           integer     CHECK (rate_limit BETWEEN 1 AND 1000000),
    rate_period          double precision CHECK (rate_period > 0 AND rate_period <= 31622400),
    rate_limit_per_key   integer     CHECK (rate_limit_per_key BETWEEN 1 AND 1000000),
    rate_period_per_key  double precision
        CHECK (rate_period_per_key > 0 AND rate_period_per_key <= 31622400),
    override_set_at      timestamptz,
    override_expires_at  timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_controls_rate_pair CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT queue_controls_rate_per_key_pair
        CHECK ((rate_limit_per_key IS NULL) = (rate_period_per_key IS NULL))
);

-- Each key of a per-key-governed queue is a virtual queue; its head is its best ready job.
-- The claim walks heads in admission order and passes over saturated keys, so its cost depends on
-- the number of saturated keys, never on how deep their backlog is.
CREATE TABLE workhorse.key_heads (
    queue      text     NOT NULL,
    ckey       text     NOT NULL,
    head_rank  integer  NOT NULL,
    head_id    bigint   NOT NULL,
    PRIMARY KEY (queue, ckey)
);
CREATE INDEX key_heads_order_idx ON workhorse.key_heads (queue, head_rank, head_id);

-- Append-only: an enqueue says "this key may have a new head" without locking a shared row.
-- The next claim drains the queue's hints and refreshes those heads.
CREATE TABLE workhorse.key_hints (
    queue  text NOT NULL,
    ckey   text NOT NULL
);
CREATE INDEX key_hints_queue_idx ON workhorse.key_hints (queue);

-- Claims started, counted per scope (ckey '' is the queue as a whole) in buckets of 1/100 of the
-- period, each stored at its end: a start counts until its bucket's end is a whole period ago,
-- which is never earlier than the start itself (exact: never more than N in any window) and at
-- most 1% of the period later (work-conserving). At most ~101 rows per scope are in a window.
CREATE TABLE workhorse.rate_starts (
    queue       text        NOT NULL,
    ckey        text        NOT NULL,
    bucket_end  timestamptz NOT NULL,
    n           integer     NOT NULL,
    PRIMARY KEY (queue, ckey, bucket_end)
);
-- Pruning of buckets older than the longest period in force.
CREATE INDEX rate_starts_end_idx ON workhorse.rate_starts (bucket_end);

ALTER TABLE workhorse.key_heads SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
ALTER TABLE workhorse.key_hints SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
ALTER TABLE workhorse.rate_starts SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

-- ---- workers and the dashboard's history ------------------------------------------------------
-- One row per running worker supervisor: inserted at start, touched every few seconds with its
-- counters (`stats`), deleted on a clean exit. A row whose last_seen is old belongs to a dead one.
CREATE TABLE workhorse.workers (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app         text        NOT NULL,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    slots       integer     NOT NULL,
    queues      text[]      NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    stats       jsonb       NOT NULL DEFAULT '{}'::jsonb
);

-- The dashboard's throughput history: per minute, what the fleet's supervisors counted (each adds
-- its own deltas every registry tick). Fleet-wide, not per queue: a supervisor's counters are
-- totals over its queues. It lives in PostgreSQL so that a dashboard restart loses nothing; rows
-- older than a day are pruned by the writers.
CREATE TABLE workhorse.throughput (
    minute     timestamptz PRIMARY KEY,
    claimed    bigint NOT NULL DEFAULT 0,
    succeeded  bigint NOT NULL DEFAULT 0,
    failed     bigint NOT NULL DEFAULT 0,
    retried    bigint NOT NULL DEFAULT 0,
    held       bigint NOT NULL DEFAULT 0,
    canceled   bigint NOT NULL DEFAULT 0
);

-- ---- schedules --------------------------------------------------------------------------------
-- Periodic tasks as desired state, fired by every supervisor of their app (no beat process, no
-- leader). A schedule's name is owned by one namespace, like a policy's queue.
CREATE TABLE workhorse.schedules (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 255),
    namespace      text        NOT NULL CHECK (length(namespace) BETWEEN 1 AND 255),
    task           text        NOT NULL CHECK (length(task) BETWEEN 1 AND 255),
    -- Exactly one expression: a 5-field cron in `tz`, or an interval on the epoch grid k*every.
    cron           text,
    every_interval interval,
    tz             text        NOT NULL DEFAULT 'UTC',
    args           jsonb       NOT NULL DEFAULT '[]'::jsonb,
    kwargs         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- What each job is enqueued with (the task's own options, resolved when the app synced).
    queue          text        NOT NULL CHECK (length(queue) BETWEEN 1 AND 255),
    ckey           text,
    priority       smallint    NOT NULL DEFAULT 0,
    max_attempts   integer     NOT NULL DEFAULT 3,
    on_failure     text        NOT NULL DEFAULT 'fail',
    catch_up       text        NOT NULL DEFAULT 'latest',
    -- The first occurrence not yet handled; a firing pass moves it past PostgreSQL's now().
    next_run_at    timestamptz NOT NULL,
    last_run_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_expression_check CHECK ((cron IS NULL) <> (every_interval IS NULL)),
    CONSTRAINT schedules_every_check CHECK (every_interval IS NULL
                                            OR every_interval >= interval '1 second'),
    CONSTRAINT schedules_catch_up_check CHECK (catch_up IN ('latest', 'all', 'skip')),
    CONSTRAINT schedules_on_failure_check CHECK (on_failure IN ('fail', 'hold')),
    CONSTRAINT schedules_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000)
);

-- A firing pass reads only the due schedules of its namespace: its cost follows what is due,
-- not how many schedules exist.
CREATE INDEX schedules_due_idx ON workhorse.schedules (namespace, next_run_at);
-- Each firing moves a pointer, leaving a dead entry where the due read starts (an every="1s"
-- schedule, one a second): vacuum after a fixed number of changes, not a fraction of the table.
ALTER TABLE workhorse.schedules SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

-- The occurrences fired: exactly one job per (schedule, occurrence), decided by this key however
-- many supervisors fire at once. Kept for an hour behind each schedule's latest occurrence, and
-- deleted with their schedule by the sync that prunes it (no foreign key: a firing pass already
-- holds its schedule's row).
CREATE TABLE workhorse.schedule_runs (
    schedule_id bigint      NOT NULL,
    occurrence  timestamptz NOT NULL,
    fired_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, occurrence)
);
ALTER TABLE workhorse.schedule_runs SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

-- ---- functions, helpers before their callers --------------------------------------------------
\ir ../claim/_admission_lock_id_v1.sql
\ir ../enqueue/_enqueue_gate_id_v1.sql
\ir ../claim/notification_channel_v1.sql
\ir ../claim/_wake_v1.sql
\ir ../claim/listen_v1.sql
\ir ../claim/results_channel_v1.sql
\ir ../released/0.2.0/listen_results_v1.sql
\ir ../released/0.2.0/_ended_v1.sql
\ir ../claim/_expiry_v1.sql
\ir ../outcomes/_failed_status_v1.sql
\ir ../released/0.2.0/_keyed_v1.sql
\ir ../released/0.2.0/_hint_keys_v1.sql
\ir ../claim/_refresh_heads_v1.sql
\ir ../policies/_rebuild_heads_v1.sql
\ir ../policies/_drop_heads_v1.sql
\ir ../claim/_limits_v1.sql
\ir ../claim/_rate_used_v1.sql
\ir ../claim/_rate_next_start_v1.sql
\ir ../released/0.2.0/_prepare_queue_v1.sql
\ir ../released/0.2.0/_record_successes_v1.sql
\ir ../released/0.2.0/_after_operator_change_v1.sql
\ir ../released/0.2.0/enqueue_v1.sql
\ir ../released/0.2.0/claim_v1.sql
\ir ../released/0.2.0/complete_v1.sql
\ir ../released/0.2.0/fail_v1.sql
\ir ../released/0.2.0/snooze_v1.sql
\ir ../released/0.2.0/release_v1.sql
\ir ../outcomes/heartbeat_v1.sql
\ir ../released/0.2.0/sync_concurrency_policies_v1.sql
\ir ../released/0.2.0/set_queue_control_v1.sql
\ir ../released/0.2.0/housekeeping_v1.sql
\ir ../released/0.2.0/retry_jobs_v1.sql
\ir ../released/0.2.0/cancel_jobs_v1.sql
\ir ../released/0.2.0/prune_jobs_v1.sql
\ir ../released/0.2.0/sync_schedules_v1.sql
\ir ../released/0.2.0/fire_schedules_v1.sql
