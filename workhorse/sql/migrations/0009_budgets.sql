-- Named budgets (issue #30, docs/design.md "Named budgets (one limit shared by several queues) and
-- rate bursts"), part 1: declaration, storage, sync, overrides and health. Admission in the
-- claim comes next (docs/budgets.md, "How the claim will use it", describes the design these
-- tables are shaped for); until then a job's budget is stored, listed and counted, and limits
-- nothing.
--
-- Feature levels: an enqueue of a job that names a budget raises its queue's level to 2
-- (queue_levels, as a cost other than 1 does), so a 0.2.0 claim (level 1) admits nothing from a
-- queue whose jobs name one: it cannot count a budget. A policy with a rate burst is stored at
-- level 2 for the same reason. The job row keeps level 1: completing, failing, snoozing or
-- releasing it needs nothing new (a budget's active units are derived from its active jobs,
-- never stored), so the released outcome functions record it as before.
--
-- For an existing database: one nullable column on jobs (no rewrite; its CHECK is validated by
-- one scan of jobs) and two partial indexes over the jobs that name a budget (small, as none
-- does before this migration, but each is built by one more scan of jobs, under a lock that
-- blocks writes to it meanwhile); new columns on policies and queue_controls (small tables);
-- four new tables. key_heads is left
-- as it is: the budget column and index the claim's walk needs (docs/budgets.md) come with that
-- claim, so that today's claims do not maintain an index nothing reads.

-- ---- the job's budget -------------------------------------------------------------------------
-- The budget a job names (at most one), declared or not: a name nobody declared imposes no limit.
ALTER TABLE workhorse.jobs
    ADD COLUMN budget text CHECK (length(budget) BETWEEN 1 AND 255);

-- A budget's capacity in use: its unexpired active jobs, at most max_active rows per budget
-- (the claim counts them under the budget's lock; health sums their cost).
CREATE INDEX jobs_budget_active_idx ON workhorse.jobs (budget, lease_until) INCLUDE (cost, queue)
    WHERE status = 'active' AND budget IS NOT NULL;
-- Ready work by budget (NULL: none) and queue, in admission order: the claim's streams of a
-- queue without key heads, one per budget its jobs name and one of the jobs that name none, so
-- that a full budget's backlog is never read (every ready job is here: the jobs that name no
-- budget are a stream too, and the claim cannot tell which queues hold them otherwise); health's
-- "queues with ready jobs naming it" (a skip-scan, one probe per queue); and "does this queue
-- still want the budget" for the turns between queues.
CREATE INDEX jobs_budget_ready_idx ON workhorse.jobs (budget, queue, rank, id)
    WHERE status = 'ready';

-- ---- rate bursts on queue policies --------------------------------------------------------------
-- rate_burst B (1 <= B <= N) beside rate_limit N/P: besides at most N units in any window P, at
-- most B units in any window of P*B/N (whole milliseconds, rounded down). A policy with a burst
-- is stored at level 2, so only the claim in units (_choose_units_v1) has to count it.
ALTER TABLE workhorse.policies
    ADD COLUMN rate_burst integer,
    ADD COLUMN rate_burst_per_key integer,
    ADD CONSTRAINT policies_rate_burst_check CHECK (rate_burst IS NULL
        OR (rate_limit IS NOT NULL AND rate_burst BETWEEN 1 AND rate_limit)),
    ADD CONSTRAINT policies_rate_burst_per_key_check CHECK (rate_burst_per_key IS NULL
        OR (rate_limit_per_key IS NOT NULL AND rate_burst_per_key BETWEEN 1 AND rate_limit_per_key));
-- An override's bursts: in force only while the row's override is (override_set_at set, not
-- expired), like its other fields; checked against the N in force by set_queue_control_v2.
ALTER TABLE workhorse.queue_controls
    ADD COLUMN rate_burst integer CHECK (rate_burst BETWEEN 1 AND 1000000),
    ADD COLUMN rate_burst_per_key integer CHECK (rate_burst_per_key BETWEEN 1 AND 1000000);
-- A queue's (ckey '') and its keys' starts in their bursts' windows, in rate_starts' buckets of
-- 1/100 of the window (rate_starts keeps the rate's window P): the claim of a queue whose policy
-- has a burst files and counts both. Housekeeping prunes it like rate_starts.
CREATE TABLE workhorse.burst_starts (
    queue       text        NOT NULL,
    ckey        text        NOT NULL,
    bucket_end  timestamptz NOT NULL,
    n           integer     NOT NULL,
    PRIMARY KEY (queue, ckey, bucket_end)
);
CREATE INDEX burst_starts_end_idx ON workhorse.burst_starts (bucket_end);
ALTER TABLE workhorse.burst_starts SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

-- ---- budgets ----------------------------------------------------------------------------------
-- Desired state, like policies: one namespace declares (owns, syncs, prunes) a budget; any app
-- may name it. max_active counts the `cost` units of its active jobs across every queue whose
-- jobs name it; the rate counts their `rate_cost` units; rate_burst as on a policy.
CREATE TABLE workhorse.budgets (
    name          text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 255),
    namespace     text        NOT NULL CHECK (length(namespace) BETWEEN 1 AND 255),
    max_active    integer     CHECK (max_active BETWEEN 1 AND 1000000),
    rate_limit    integer     CHECK (rate_limit BETWEEN 1 AND 1000000),
    rate_period   double precision CHECK (rate_period > 0 AND rate_period <= 31622400),
    rate_burst    integer,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT budgets_some_limit CHECK (max_active IS NOT NULL OR rate_limit IS NOT NULL),
    CONSTRAINT budgets_rate_pair CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT budgets_rate_burst_check CHECK (rate_burst IS NULL
        OR (rate_limit IS NOT NULL AND rate_burst BETWEEN 1 AND rate_limit))
);
CREATE INDEX budgets_namespace_idx ON workhorse.budgets (namespace);

-- An operator's override of a budget (never touched by a sync, kept when a sync prunes the
-- budget, as a queue's control is): the fields it replaces (NULL: not replaced) until it is
-- cleared or expires. A row is deleted when its override is cleared.
CREATE TABLE workhorse.budget_controls (
    name                 text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 255),
    max_active           integer     CHECK (max_active BETWEEN 1 AND 1000000),
    rate_limit           integer     CHECK (rate_limit BETWEEN 1 AND 1000000),
    rate_period          double precision CHECK (rate_period > 0 AND rate_period <= 31622400),
    rate_burst           integer     CHECK (rate_burst BETWEEN 1 AND 1000000),
    override_set_at      timestamptz NOT NULL DEFAULT now(),
    override_expires_at  timestamptz,
    CONSTRAINT budget_controls_rate_pair CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT budget_controls_some_field CHECK (max_active IS NOT NULL
        OR rate_limit IS NOT NULL OR rate_burst IS NOT NULL)
);

-- A budget's starts, in rate_starts' buckets (each stored at its end; a start counts until its
-- bucket's end is a whole window ago: exact, and at most 1% of the window late). `span` 0 is the
-- rate's window P (buckets of P/100), 1 the burst's window P*B/N (buckets of 1/100 of it): the
-- two are counted apart so that neither needs more than ~101 rows in its window. The claim
-- writes it (next session); housekeeping prunes it like rate_starts.
CREATE TABLE workhorse.budget_starts (
    budget      text        NOT NULL,
    span        smallint    NOT NULL CHECK (span IN (0, 1)),
    bucket_end  timestamptz NOT NULL,
    n           integer     NOT NULL,
    PRIMARY KEY (budget, span, bucket_end)
);
CREATE INDEX budget_starts_end_idx ON workhorse.budget_starts (bucket_end);
ALTER TABLE workhorse.budget_starts SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

-- The queues that have used a budget, written by the enqueue of a job naming it (ON CONFLICT DO
-- NOTHING: an existing row is not locked, so producers never queue behind each other). The
-- claim (next step) reads it to keep such queues off the ungoverned fast path, to give the
-- budget's freed places to its queues in turn (`last_turn`: when the queue last got one), and to
-- wake the budget's other queues when units free. One small row per pair ever used, kept: a
-- pair may still have scheduled jobs (which become ready without an enqueue), so pruning it
-- needs the claim's rules (next step).
CREATE TABLE workhorse.budget_queues (
    budget     text        NOT NULL,
    queue      text        NOT NULL,
    last_turn  timestamptz,
    -- When a claim of the queue last met a job of the budget it could not take (the budget
    -- full, out of rate, or the queue deferring to another): NULL once it got a place since.
    wanted_at  timestamptz,
    PRIMARY KEY (budget, queue)
);
CREATE INDEX budget_queues_queue_idx ON workhorse.budget_queues (queue, budget);
-- The queues waiting for a budget's places, oldest turn first: a claim reads only these.
CREATE INDEX budget_queues_wanting_idx ON workhorse.budget_queues (budget, last_turn)
    WHERE wanted_at IS NOT NULL;
ALTER TABLE workhorse.budget_queues SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

-- ---- a workflow's on_error job may name a budget -------------------------------------------------
ALTER TABLE workhorse.workflows ADD COLUMN on_error_budget text
    CHECK (length(on_error_budget) BETWEEN 1 AND 255);

-- ---- key heads by budget ----------------------------------------------------------------------
-- A head's job's budget, set by a trigger on every write of the head: a claim passes over the
-- heads of a full budget as one range (docs/design.md: a key whose head names a full budget is passed
-- over like a saturated key, its cost never growing with them). Every head of a database that
-- predates this migration heads a job without a budget: nothing to fill.
ALTER TABLE workhorse.key_heads ADD COLUMN budget text;
CREATE INDEX key_heads_budget_idx ON workhorse.key_heads (queue, budget, head_rank, head_id);
\ir ../functions/_key_head_budget_v1.sql
CREATE TRIGGER key_heads_budget BEFORE INSERT OR UPDATE OF head_id ON workhorse.key_heads
    FOR EACH ROW EXECUTE FUNCTION workhorse._key_head_budget_v1();

\ir ../functions/_budget_lock_id_v1.sql
\ir ../functions/_budget_starts_used_v1.sql
\ir ../functions/_budget_next_start_v1.sql
\ir ../functions/_burst_used_v1.sql
\ir ../functions/_burst_next_start_v1.sql
\ir ../functions/sync_budgets_v1.sql
\ir ../functions/set_budget_control_v1.sql
\ir ../functions/housekeeping_v2.sql
