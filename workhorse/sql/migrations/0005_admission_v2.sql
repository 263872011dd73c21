-- Admission v2: rate limits in the policies, pause and overrides in queue_controls, and the
-- start log that makes rate limits exact (rate_starts).

-- A rate limit is N starts per period (seconds), queue-wide and per key; both halves or neither.
ALTER TABLE workhorse.policies
    ADD COLUMN rate_limit           integer          CHECK (rate_limit BETWEEN 1 AND 1000000),
    ADD COLUMN rate_period          double precision CHECK (rate_period > 0 AND rate_period <= 31622400),
    ADD COLUMN rate_limit_per_key   integer          CHECK (rate_limit_per_key BETWEEN 1 AND 1000000),
    ADD COLUMN rate_period_per_key  double precision
        CHECK (rate_period_per_key > 0 AND rate_period_per_key <= 31622400),
    ADD CONSTRAINT policies_rate_pair CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    ADD CONSTRAINT policies_rate_per_key_pair
        CHECK ((rate_limit_per_key IS NULL) = (rate_period_per_key IS NULL)),
    DROP CONSTRAINT policies_some_limit,
    ADD CONSTRAINT policies_some_limit CHECK (max_active IS NOT NULL
        OR max_active_per_key IS NOT NULL OR rate_limit IS NOT NULL
        OR rate_limit_per_key IS NOT NULL);

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
ALTER TABLE workhorse.rate_starts SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

\ir ../functions/_keyed_v1.sql
\ir ../functions/_unknown_to_v1_v1.sql
\ir ../functions/_limits_v2.sql
\ir ../functions/_rate_used_v2.sql
\ir ../functions/_rate_next_start_v2.sql
\ir ../functions/_activate_v2.sql
\ir ../functions/claim_v2.sql
\ir ../functions/set_queue_control_v1.sql
\ir ../functions/housekeeping_v1.sql
