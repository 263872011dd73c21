-- Jobs, fences and the ready/active indexes the claim walks.
CREATE SEQUENCE workhorse.fence_seq AS bigint;

CREATE TABLE workhorse.jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task          text        NOT NULL,
    queue         text        NOT NULL,
    -- '' means keyless: a real value keeps the (queue, ckey, rank, id) index usable with equality.
    ckey          text        NOT NULL DEFAULT '',
    priority      smallint    NOT NULL DEFAULT 0,
    -- "priority DESC, id ASC" as one ascending keyset. STORED: PostgreSQL 18 makes generated
    -- columns virtual by default, and virtual ones cannot be indexed. integer, not smallint:
    -- the negation of priority -32768 does not fit in a smallint.
    rank          integer     GENERATED ALWAYS AS (-(priority::integer)) STORED,
    payload       jsonb       NOT NULL,
    status        text        NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL DEFAULT 3,
    on_failure    text        NOT NULL DEFAULT 'fail',
    run_at        timestamptz NOT NULL DEFAULT now(),
    enqueued_at   timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    finished_at   timestamptz,
    lease_until   timestamptz,
    fence         bigint,
    result        jsonb,
    error         jsonb,
    meta          jsonb       NOT NULL DEFAULT '{}'::jsonb,
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

-- Claims and completions leave dead entries at the front of the ready indexes, and every claim
-- walks them until vacuum runs: vacuum after a fixed number of changes, not a fraction of history.
ALTER TABLE workhorse.jobs SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_insert_scale_factor = 0.0, autovacuum_vacuum_insert_threshold = 50000);
