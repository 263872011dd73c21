-- Schedules: periodic tasks as desired state, fired by every supervisor of their app (no beat
-- process, no leader). A schedule's name is owned by one namespace, like a policy's queue.
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

\ir ../functions/sync_schedules_v1.sql
\ir ../functions/fire_schedules_v1.sql
