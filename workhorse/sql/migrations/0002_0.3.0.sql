-- workhorse 0.3.0: everything 0.3.0 adds to 0.2.0's schema (0001_baseline.sql), in the order it
-- happened: the tables, columns and indexes of each feature first, then every function 0.3.0's
-- wheel calls that 0.2.0 did not ship (each from its subsystem's folder), then the triggers that
-- run them. The functions only 0.2.0's workers call stay as 0001 made them (sql/released/0.2.0/),
-- and 0.2.0's workers keep calling them beside this release's. Nothing is dropped: every function
-- 0001 made is still called by 0.2.0 (supported beside 0.3.0) or by 0.3.0 itself.
--
-- The development migrations 0002 to 0009 that came before this one are squashed here: a database
-- that applied them records another 0002 and is refused (SchemaVersionError), as any database
-- whose applied migration differs from the package's.

-- ==== job keys ==================================================================================
-- Job keys (issue #27): unique jobs and job_key (debounce, throttle), and enqueue_v2, which
-- writes them and says of each job whether the enqueue inserted it.
--
-- Why job keys need no feature level (docs/design.md "Job keys"): only enqueue_v2 ever reads or writes `job_key` and `unique_key`.
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

-- ==== fair share and cost =======================================================================
-- Fair share and job cost (issue #26, docs/design.md "Fair share and job cost", invariants 9 and 10).
--
-- A job's `cost` is the units of max_active and max_active_per_key it occupies while active, its
-- `rate_cost` the starts it counts against the rate limits, its `weight` the weight of its key
-- when its key's head is compared on a fairness="key" queue. All three default to 1, which is
-- what every job of 0.2.0 was: a row written by a 0.2.0 enqueue is an ordinary cost-1 row.
--
-- Feature levels: an enqueue of a job with cost or rate_cost other than 1 raises its queue's
-- level to 2 (queue_levels), and a fairness="key" policy is stored at level 2, so a 0.2.0 claim
-- (level 1) admits nothing from such a queue. The job row itself stays at level 1: completing,
-- failing, snoozing or releasing it needs nothing new (active units are derived from the active
-- jobs by the claim, never stored), so the released outcome functions record it as before.
ALTER TABLE workhorse.jobs
    ADD COLUMN cost integer NOT NULL DEFAULT 1 CHECK (cost BETWEEN 1 AND 1000000),
    ADD COLUMN rate_cost integer NOT NULL DEFAULT 1 CHECK (rate_cost BETWEEN 1 AND 1000000),
    ADD COLUMN weight smallint NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000);

-- "fifo" (today's order, the default) or "key" (a freed place goes to the key with the smallest
-- active cost per weight). "key" needs max_active.
ALTER TABLE workhorse.policies
    ADD COLUMN fairness text NOT NULL DEFAULT 'fifo' CHECK (fairness IN ('fifo', 'key')),
    ADD CONSTRAINT policies_fairness_needs_max_active
        CHECK (fairness = 'fifo' OR max_active IS NOT NULL);

-- A schedule's jobs get its cost, rate_cost and weight (the task's, resolved with the
-- schedule's arguments when it is declared): stored on the schedule by sync_schedules_v2, set on
-- each fired job by fire_schedules_v2. A 0.2.0 supervisor still fires with fire_schedules_v1,
-- whose jobs cost 1 (it does not know costs); a 0.2.0 sync keeps a stored schedule's costs.
ALTER TABLE workhorse.schedules
    ADD COLUMN cost integer NOT NULL DEFAULT 1 CHECK (cost BETWEEN 1 AND 1000000),
    ADD COLUMN rate_cost integer NOT NULL DEFAULT 1 CHECK (rate_cost BETWEEN 1 AND 1000000),
    ADD COLUMN weight smallint NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000);

-- ==== progress ==================================================================================
-- Progress from a running handler (issue #27, docs/design.md "Job keys: ... progress").
--
-- `progress` is the latest value a handler reported, as the slot last wrote it:
-- {"done": n, "total": n|null, "message": text|null, "fence": the claim's fence, "seq": the
-- handler's call count}. `progress_at` is the database-clock time of that write.
--
-- A new attempt starts with no progress without any change to the claim: readers show the value
-- only while its "fence" equals the job's fence (the claim gives every attempt a new fence, and
-- complete, fail and snooze keep it), so a value from an older attempt reads as none. "seq"
-- orders the writes of one attempt: the slot's periodic write and the flush before an outcome
-- may race, and an older value never replaces a newer one.
--
-- Only write_progress.sql writes these columns (no function of an older release reads them), so
-- they need no feature level: a 0.2.0 worker ignores them.
ALTER TABLE workhorse.jobs
    ADD COLUMN progress jsonb,
    ADD COLUMN progress_at timestamptz;

-- ==== attempt history ===========================================================================
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

-- The task names each supervisor's app declares (NULL: a supervisor of an older release that
-- did not say; health then counts none of its queues' jobs as unknown).
ALTER TABLE workhorse.workers ADD COLUMN tasks text[];

-- Ready jobs by task, so that a claim passes over another app's jobs without reading them
-- (claim_v2: one walk per task the worker's app declares, and a skip scan over the distinct
-- ready tasks of a queue that says whether it holds any).
CREATE INDEX jobs_ready_task_idx ON workhorse.jobs (queue, task, rank, id)
    WHERE status = 'ready';

-- ==== workflows =================================================================================
-- Workflows (issue #28, docs/design.md "Workflows"): Celery's canvas (chain, group, chord) and
-- `depends_on`, every member a job row from the start.
--
-- A member whose dependencies have not all succeeded is `waiting`: it holds no capacity and no
-- claim sees it (claim_v1 and claim_v2 take `ready` rows only). Release and failure propagation
-- happen in the database, in triggers on workhorse.jobs, so that they run in the very
-- transaction that records a member's end, whichever function of whichever release records it
-- (complete, fail, snooze, successes riding on a claim, cancel, retry):
-- failures, cancels and retries in a row trigger, at once; releases in a deferred constraint
-- trigger, at commit, for all the transaction's successes together, their dependents locked in
-- (queue, id) order (so two completions never deadlock on shared dependents). A release is an
-- update of the dependent's `workflow_members` row under the dependent's row lock, so it
-- happens exactly once, and a crash before the commit undoes the success and the release
-- together. A job outside any workflow pays only the triggers' WHEN tests.
--
-- A member raises its queue's level to 2 (0.3.0's): a 0.2.0 worker claims nothing there, and
-- knows nothing of `waiting`. The member rows themselves stay level 1, because the completion
-- functions (complete, fail, snooze and _record_successes, v1 and v2: level 1) leave a
-- higher-level row alone; the queue's level is what keeps the old claim away.

ALTER TABLE workhorse.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE workhorse.jobs ADD CONSTRAINT jobs_status_check CHECK (status IN
    ('waiting', 'scheduled', 'ready', 'active', 'succeeded', 'failed', 'held', 'canceled'));

-- The workflow a job is a member of (NULL: none), set at insertion and never changed.
ALTER TABLE workhorse.jobs ADD COLUMN workflow_id bigint;
-- A job outside any workflow that a `depends_on` names: the trigger fires on its ends too.
ALTER TABLE workhorse.jobs ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;
-- Waiting members, counted by queue wherever statuses are counted.
CREATE INDEX jobs_waiting_idx ON workhorse.jobs (queue) WHERE status = 'waiting';
CREATE INDEX jobs_workflow_idx ON workhorse.jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;
-- A workflow's latest expiry, NULL first (a member unfinished, held or kept for ever): one probe
-- tells the pruner whether the workflow may go (prune_jobs_v2).
CREATE INDEX jobs_workflow_expires_idx ON workhorse.jobs (workflow_id, expires_at DESC NULLS FIRST)
    WHERE workflow_id IS NOT NULL;

-- One row per canvas. `result_ids`: the members whose results make the canvas's result (a
-- chain's last member, a group's members in order), `result_kind` 'one' or 'list'. `on_error_*`:
-- the signature to enqueue once, at the first failure of a member, with the failed member's id
-- as its first argument; `on_error_job` the job it became; `on_error_cost`, `_rate_cost` and
-- `_weight` its units (docs/design.md "Fair share and job cost").
CREATE TABLE workhorse.workflows (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at       timestamptz NOT NULL DEFAULT now(),
    result_ids       bigint[]    NOT NULL,
    result_kind      text        NOT NULL CHECK (result_kind IN ('one', 'list')),
    on_error_task    text,
    on_error_queue   text,
    on_error_ckey    text,
    on_error_priority smallint,
    on_error_payload jsonb,
    on_error_max_attempts integer,
    on_error_on_failure text,
    on_error_cost    integer     NOT NULL DEFAULT 1,
    on_error_rate_cost integer   NOT NULL DEFAULT 1,
    on_error_weight  smallint    NOT NULL DEFAULT 1,
    on_error_job     bigint
);

-- A member's release state: how many of its dependencies have not succeeded yet (the release
-- is the update that brings it to 0), how a parent's result reaches it ('none'; 'one': the
-- passing parent's result as first argument; 'list': the passing parents' results in position
-- order, as one list), its delay or time once released, how often it was released (1 at
-- most: what the tests count), and its task's retention (JSON: status -> seconds kept), which
-- fixes the expiry of a member that the database ends itself (canceled for a failed
-- dependency, failed with PayloadError at release), as the worker's outcome would.
CREATE TABLE workhorse.workflow_members (
    job_id       bigint           PRIMARY KEY,
    workflow_id  bigint           NOT NULL,
    pending      integer          NOT NULL CHECK (pending >= 0),
    mode         text             NOT NULL CHECK (mode IN ('none', 'one', 'list')),
    delay        double precision,
    run_at       timestamptz,
    releases     integer          NOT NULL DEFAULT 0,
    retention    jsonb            NOT NULL DEFAULT '{}'
);
CREATE INDEX workflow_members_workflow_idx ON workhorse.workflow_members (workflow_id);

-- A dependency: `job_id` runs after `parent_id` succeeded; `passes`: the parent's result is
-- passed (canvas edges), not for `depends_on`; `position` orders a chord's results.
CREATE TABLE workhorse.job_deps (
    job_id     bigint  NOT NULL,
    parent_id  bigint  NOT NULL,
    position   integer NOT NULL,
    passes     boolean NOT NULL,
    PRIMARY KEY (job_id, parent_id)
);
-- A release looks up the dependents of the member that just succeeded.
CREATE INDEX job_deps_parent_idx ON workhorse.job_deps (parent_id);

-- ==== on key full ===============================================================================
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

-- ==== dashboard task index ======================================================================
-- The dashboard's task filter over a long history (issue #32, docs/design.md "The dashboard in an
-- incident"; benchmarks/README.md "The dashboard's pages").
--
-- A task substring matched the succeeded history only through a window of the primary key,
-- 100,000 rows read and lower()ed per window, and an older page of a rare task reads three
-- windows (its page, where the newer page starts, the count of the newest window): 200-330 ms.
-- With this index the search first turns the substring into the succeeded task names it
-- matches (a skip scan: one probe per distinct name, statements/dashboard_succeeded_tasks.sql)
-- and reads each window's succeeded matches by (task, id) ranges; the other statuses keep their
-- own partial indexes.
--
-- Partial (succeeded only), so it costs one index entry per job, written by the update that
-- completes it: an enqueue, a claim and a heartbeat do not touch it (their rows are not
-- succeeded), and a failed, held or canceled job never enters it. The queue and the key are
-- included, so that the dashboard's queue and key filters are checked in the index (an
-- index-only scan) rather than in each matching row.
CREATE INDEX jobs_succeeded_task_idx ON workhorse.jobs (task, id) INCLUDE (queue, ckey)
    WHERE status = 'succeeded';

-- ==== budgets ===================================================================================
-- Named budgets (issue #30, docs/design.md "Named budgets (one limit shared by several queues) and
-- rate bursts"): declaration, storage, sync, overrides, health, and admission in the claim
-- (_choose_units_v1 counts a budget under its lock; docs/budgets.md).
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
-- four new tables; a column, an index and a trigger on key_heads (the head's budget, which the
-- claim's walk passes over as one range when the budget is full).

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
    -- Back-pressure halves its effective max_active (docs/design.md "Back-pressure").
    adaptive      boolean     NOT NULL DEFAULT false CHECK (NOT adaptive OR max_active IS NOT NULL),
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
-- writes it; housekeeping prunes it like rate_starts.
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
-- claim reads it to keep such queues off the ungoverned fast path, to give the
-- budget's freed places to its queues in turn (`last_turn`: when the queue last got one), and to
-- wake the budget's other queues when units free. One small row per pair ever used, kept: a
-- pair may still have scheduled jobs (which become ready without an enqueue), so pruning it
-- needs the claim's rules.
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
ALTER TABLE workhorse.key_heads ADD COLUMN budget text, ADD COLUMN budget_for bigint;
CREATE INDEX key_heads_budget_idx ON workhorse.key_heads (queue, budget, head_rank, head_id);

-- ---- result waiters -------------------------------------------------------------------------
-- The sessions that LISTEN for results (listen_results_v2 registers its own, and drops those of
-- sessions that are gone): an outcome sends its results NOTIFY only while one is registered
-- (_ended_v2), since every NOTIFY costs its commit PostgreSQL's notification lock and wakes
-- every listening session of the database (issue #40).
CREATE TABLE workhorse.result_listeners (
    backend_pid integer PRIMARY KEY,
    since timestamptz NOT NULL DEFAULT now()
);

-- ==== tags ======================================================================================
-- Tags (issue #43, docs/design.md "Tags"): labels an operator finds a
-- customer's jobs by ("order-1234", "tenant:acme"), set at enqueue and never changed after
-- (except by a job_key replace, which takes the newest call's options).
--
-- The row keeps its tags in the order given (`Job.tags`); the lookup is a table of its own,
-- (tag, job_id), written by the enqueue in the same transaction. Not an index on `jobs`: every
-- index of `jobs` is opened, and its predicate set up, by every statement that updates a job
-- (each claim and outcome), whatever the row; and "the newest 50 jobs of a tag" is a backward
-- walk of this primary key, where an array index would read every job of the tag to sort them.
-- No feature level: the claim and the outcomes never read tags, so a 0.2.0 worker runs a tagged
-- job as any other. Pruning removes a job's rows here with the job (prune_jobs_v2); a 0.2.0
-- pruner leaves them behind, pointing at no job, which every reader joins away.
ALTER TABLE workhorse.jobs ADD COLUMN tags text[];
CREATE TABLE workhorse.job_tags (
    tag    text   NOT NULL CHECK (length(tag) BETWEEN 1 AND 100),
    job_id bigint NOT NULL,
    PRIMARY KEY (tag, job_id)
);
-- A schedule's jobs get its tags (its task's, resolved by the app at sync), and a workflow's
-- on_error job the tags its signature and the workflow give it.
ALTER TABLE workhorse.schedules ADD COLUMN tags text[];
ALTER TABLE workhorse.workflows ADD COLUMN on_error_tags text[];

-- ==== deadlines =================================================================================
-- Deadlines (issue #43, docs/design.md "Deadlines"): `expires=` (a job not started by then ends
-- `expired` without running) and `deadline=` (no attempt starts after it). A job keeps
-- `deadline` and `start_by`, the moment after which no claim may start it: the earlier of the
-- two while it has not started, its deadline once it has (the activation sets it so). The claim
-- never starts a job at or past its start_by (its activation says so, at the instant it stamps
-- as started_at), and it first ends the queue's jobs that passed it (`_expire_jobs_v1`:
-- ready, scheduled, or active under an expired lease), as housekeeping does for every queue.
--
-- Feature level: a job with either raises its queue's level to 2, so that a 0.2.0 claim, which
-- knows nothing of deadlines, admits nothing there. The new status `expired` is a resting one:
-- it holds no capacity, and a workflow member's dependents are canceled by it as by a cancel.
ALTER TABLE workhorse.jobs
    ADD COLUMN start_by timestamptz,
    ADD COLUMN deadline timestamptz;
ALTER TABLE workhorse.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE workhorse.jobs ADD CONSTRAINT jobs_status_check CHECK (status IN
    ('waiting', 'scheduled', 'ready', 'active', 'succeeded', 'failed', 'held', 'canceled',
     'expired'));
-- The claim's probe and the sweep: a queue's jobs that may still start, by their start_by.
CREATE INDEX jobs_start_by_idx ON workhorse.jobs (queue, start_by)
    WHERE start_by IS NOT NULL AND status IN ('ready', 'scheduled', 'active');
-- Health counts `expired` through the index that counts the other resting statuses but
-- `succeeded` (a superset of 0.2.0's predicate, so 0.2.0's statements still use it).
DROP INDEX workhorse.jobs_held_failed_idx;
CREATE INDEX jobs_held_failed_idx ON workhorse.jobs (status, queue, id)
    WHERE status IN ('held', 'failed', 'canceled', 'expired');

-- ==== dead letters ==============================================================================
-- Dead letters (issue #43, docs/design.md "Dead letters"): jobs that ended `failed` or `held`,
-- listed, redriven (new attempts of the same jobs, released in their queue's admission order no
-- faster than a rate) and purged by an operator; every redrive and purge is written to
-- audit_log. A redrive is recorded on the row (`redriven_at`, `redrive_count`) and in its
-- attempt_history (an entry of outcome "redriven": from which status, by whom, why, and its
-- audit row). No CHECK on the new columns: every statement that updates a job evaluates every
-- CHECK of `jobs`, and no statement but the redrive writes them. No feature level: a redriven
-- job is an ordinary ready or scheduled job to every release's claim.
ALTER TABLE workhorse.jobs
    ADD COLUMN redriven_at timestamptz,
    ADD COLUMN redrive_count integer NOT NULL DEFAULT 0;
CREATE TABLE workhorse.audit_log (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    action           text        NOT NULL CHECK (action IN ('redrive', 'purge')),
    -- Who: the operating-system user the client says it runs as, the session's application_name
    -- and the database role.
    os_user          text        CHECK (length(os_user) <= 255),
    application_name text,
    db_user          text        NOT NULL DEFAULT current_user,
    filters          jsonb       NOT NULL,
    job_count        integer     NOT NULL,
    job_ids          bigint[]    NOT NULL,
    reason           text        CHECK (length(reason) BETWEEN 1 AND 1000)
);

-- ==== durable execution =========================================================================
-- Durable execution (issue #42, docs/design.md "Durable execution"): a job records named steps
-- (`job_steps`) under its fence, and may suspend: status `suspended`, its lease ended, its
-- place and units free, its attempt given back, until its cause wakes it (`suspended_on`:
-- "sleep" or a wait's timeout at `wake_at`, "signal" when a signal it waits for commits,
-- "children" when its last child ends), in the transaction that commits the cause. A timer is
-- woken by the claim's housekeeping of its queue, as a scheduled job falls due.
--
-- Feature level: a job that records a step or suspends is at level 2 (a 0.2.0 claim never takes
-- it: it would not know its steps), and so are its children (a 0.2.0 outcome would not wake
-- their parent). Such jobs stay in `jobs` until pruned (`durable`: the history mover leaves
-- them, so that a parent reads its children and a job its steps in one place); their steps and
-- signals go with them when pruned.
ALTER TABLE workhorse.jobs
    ADD COLUMN suspended_on text,
    ADD COLUMN wake_at timestamptz,
    ADD COLUMN parent_id bigint,
    ADD COLUMN parent_step text,
    ADD COLUMN durable boolean NOT NULL DEFAULT false;
ALTER TABLE workhorse.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE workhorse.jobs ADD CONSTRAINT jobs_status_check CHECK (status IN
    ('waiting', 'scheduled', 'ready', 'active', 'succeeded', 'failed', 'held', 'canceled',
     'expired', 'suspended'));
-- The claim's timer probe and health's counts: a queue's suspended jobs by their wake time.
CREATE INDEX jobs_suspended_idx ON workhorse.jobs (queue, wake_at) WHERE status = 'suspended';
-- Whether the jobs that end are children: probes of an index of children only, at every job's
-- end (_ended_v2).
CREATE INDEX jobs_child_idx ON workhorse.jobs (id) WHERE parent_id IS NOT NULL;
-- A parent's children.
CREATE INDEX jobs_parent_idx ON workhorse.jobs (parent_id, parent_step, id)
    WHERE parent_id IS NOT NULL;
-- A step of a job: recorded (`recorded_at` set: its result or its error stands, and a later run
-- returns it without calling the step again), or pending (a suspension point not yet satisfied:
-- the sleep's end or the wait's timeout in `wake_at`, the signal it waits for).
CREATE TABLE workhorse.job_steps (
    job_id      bigint      NOT NULL,
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    kind        text        NOT NULL CHECK (kind IN ('run', 'sleep', 'wait', 'child', 'children')),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    recorded_at timestamptz,
    wake_at     timestamptz,
    signal      text,
    result      jsonb,
    error       jsonb,
    fence       bigint      NOT NULL,
    PRIMARY KEY (job_id, name)
);
-- Signals sent to a job: kept until a wait consumes them (oldest first); a keyed one is stored
-- once per (job, name, key).
CREATE TABLE workhorse.job_signals (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL,
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    signal_key  text        CHECK (length(signal_key) BETWEEN 1 AND 255),
    payload     jsonb,
    sent_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    consumed_at timestamptz,
    consumed_by text
);
CREATE UNIQUE INDEX job_signals_key_idx ON workhorse.job_signals (job_id, name, signal_key)
    WHERE signal_key IS NOT NULL;
CREATE INDEX job_signals_job_idx ON workhorse.job_signals (job_id, name, id);

-- ==== history ===================================================================================
-- History that stays cheap (issue #43, docs/design.md "History"). A job that ended `succeeded`
-- or `expired` more than an hour ago moves from `jobs` to `job_history` (move_to_history_v1, in
-- batches, beside the pruner), so that the claim's table holds the live work, the last hour of
-- outcomes and the jobs an operator may still act on (failed, held, canceled). Jobs whose
-- identity `jobs` enforces stay there until pruned: an idempotency, unique or job key (their
-- unique indexes are on `jobs`), a workflow member or a job with dependents (the workflow's
-- statements and pruning read them there).
--
-- History is partitioned by the UTC day of `finished_at`, one partition a day, created by the
-- mover as it needs them, so that pruning a day is a partition drop: no dead rows, nothing for
-- vacuum, nothing on `jobs`. Same columns, in the same order, as `jobs` (LIKE: no identity, no
-- generated column, no CHECK, which the rows met on `jobs`); a test keeps the two in step.
-- No feature level: a 0.2.0 worker never reads a finished job but through its handle, which
-- reads `jobs` only, and it prunes `jobs` only.
CREATE TABLE workhorse.job_history (LIKE workhorse.jobs) PARTITION BY RANGE (finished_at);
-- By id (a handle, the dashboard's job page); in finish order (export, whole days); by expiry
-- (a day's latest, which decides its drop).
CREATE INDEX job_history_id_idx ON workhorse.job_history (id);
CREATE INDEX job_history_finished_idx ON workhorse.job_history (finished_at, id);
CREATE INDEX job_history_expires_idx ON workhorse.job_history (expires_at);
-- A moved job's tag rows, partitioned by the same day as the job, so that a day's drop takes
-- them too: job_tags' lookup for history. "The newest 50 of a tag" is a backward walk of each
-- day's (tag, job_id), merged, and each job read in its own day (finished_at prunes the
-- partitions); an array index on job_history would read every job of the tag to sort them.
CREATE TABLE workhorse.job_history_tags (
    tag         text        NOT NULL,
    job_id      bigint      NOT NULL,
    finished_at timestamptz NOT NULL
) PARTITION BY RANGE (finished_at);
CREATE INDEX job_history_tags_tag_idx ON workhorse.job_history_tags (tag, job_id);
-- The mover's walk: exactly the rows it may move, oldest first, so that failed, held and keyed
-- rows never stand in front of it.
CREATE INDEX jobs_history_due_idx ON workhorse.jobs (finished_at)
    WHERE status IN ('succeeded', 'expired') AND workflow_id IS NULL AND NOT has_dependents
      AND idempotency_key IS NULL AND unique_key IS NULL AND job_key IS NULL AND NOT durable;
-- Finished jobs of the live table in finish order: an export's live side and
-- `prune_jobs --older-than` read a range of it, where both were a scan of all of `jobs` (a
-- minute or more at a few million rows). One entry a finished job, written by its outcome.
CREATE INDEX jobs_finished_idx ON workhorse.jobs (finished_at, id) WHERE finished_at IS NOT NULL;
-- Every job, live or history, for the reads that find a job wherever it is.
CREATE VIEW workhorse.all_jobs AS
    SELECT * FROM workhorse.jobs
    UNION ALL
    SELECT * FROM workhorse.job_history;

-- ==== back-pressure =============================================================================
-- Back-pressure from a handler (issue #41, docs/design.md "Back-pressure"): `raise Backoff(...)`
-- stops new starts of a queue, of one key of a queue, or of a named budget, fleet-wide, until
-- `until`. One row per scope and target, replaced by a later backoff of the same target (which
-- keeps the later `until`); cleared by an operator or dropped by housekeeping once past.
-- `by_job` is the job that raised it (no foreign key: the job may be pruned before the row).
CREATE TABLE workhorse.backoffs (
    scope       text             NOT NULL CHECK (scope IN ('queue', 'key', 'budget')),
    name        text             NOT NULL,  -- the queue (scopes queue and key), or the budget
    ckey        text             NOT NULL DEFAULT '' CHECK ((scope = 'key') = (ckey <> '')),
    until       timestamptz      NOT NULL,
    by_job      bigint,
    set_at      timestamptz      NOT NULL,
    retry_after double precision NOT NULL CHECK (retry_after > 0 AND retry_after <= 86400),
    -- An adaptive budget's effective max_active as its last backoff halved it; it grows back by
    -- one unit per `retry_after` once a quiet `retry_after` has passed since `until` (the row is
    -- kept until it is back at the limit).
    adaptive_max integer CHECK (adaptive_max >= 1),
    PRIMARY KEY (scope, name, ckey)
);
-- A queue or key backoff also stamps the queue's control row with the latest `until` of the
-- queue's own and its keys' backoffs: the claim already reads that row (a queue with one is
-- governed, so its claims serialize and each sees a backoff once it commits), and reads
-- `backoffs` only while the stamp is ahead. A control row that holds only a past stamp is
-- dropped by the next operator change or by housekeeping.
ALTER TABLE workhorse.queue_controls ADD COLUMN backed_off_until timestamptz;

-- ==== holds =====================================================================================
-- Holds outside tasks (issue #41 item 3, docs/design.md "Holds"): a process that is not a task (a
-- web request, another framework's activity) takes units of a named budget through the same
-- admission as a claim and keeps them while its lease is renewed. The claim counts a budget's
-- unexpired holds beside its active jobs; a dead holder's units come back when its lease ends,
-- and housekeeping deletes the row. `holder` is the holder's application_name, `pid` its OS
-- process id, `hold_key` a label of the holder's choice (a tenant), shown in listings.
CREATE TABLE workhorse.budget_holds (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    budget      text        NOT NULL CHECK (length(budget) BETWEEN 1 AND 255),
    units       integer     NOT NULL CHECK (units BETWEEN 1 AND 1000000),
    hold_key    text        CHECK (length(hold_key) BETWEEN 1 AND 255),
    lease_until timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL,
    holder      text        NOT NULL,
    pid         integer     NOT NULL
);
-- A budget's unexpired holds, summed by every claim of its queues: an index-only range.
CREATE INDEX budget_holds_budget_idx ON workhorse.budget_holds (budget, lease_until)
    INCLUDE (units);
ALTER TABLE workhorse.budget_holds SET (autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

-- ==== per-key limits ============================================================================
-- Per-key limits as data (issue #41 item 2, docs/design.md "Per-key limits"): limits of named keys
-- of one queue, and a default for the keys not listed, refining the queue's policy (a set is owned
-- by the namespace that owns the policy and goes with it). A key's `max_active` replaces the
-- per-key concurrency in force for that key, its `weight` the default weight of its jobs on a
-- fair queue, its rate (N per period) the per-key rate in force. A sync that prunes the policy
-- deletes its set and rows (no foreign keys: none of the schema's tables has one, and the sync
-- already holds the queue's lock). The claim reads a key's row only for the keys it looks at (one
-- probe of the primary key each), so its cost does not grow with the number of rows. A queue with
-- a set keeps key heads and is at feature level 2 (queue_levels): a 0.2.0 claim would not read
-- the rows, so it admits nothing there.
CREATE TABLE workhorse.key_limit_sets (
    queue               text PRIMARY KEY,
    default_max_active  integer CHECK (default_max_active BETWEEN 1 AND 1000000),
    default_weight      smallint CHECK (default_weight BETWEEN 1 AND 1000),
    default_rate_limit  integer CHECK (default_rate_limit BETWEEN 1 AND 1000000),
    default_rate_period double precision
        CHECK (default_rate_period > 0 AND default_rate_period <= 31622400),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT key_limit_sets_rate_pair
        CHECK ((default_rate_limit IS NULL) = (default_rate_period IS NULL))
);
CREATE TABLE workhorse.key_limits (
    queue       text NOT NULL,
    ckey        text NOT NULL CHECK (length(ckey) BETWEEN 1 AND 255),
    max_active  integer CHECK (max_active BETWEEN 1 AND 1000000),
    weight      smallint CHECK (weight BETWEEN 1 AND 1000),
    rate_limit  integer CHECK (rate_limit BETWEEN 1 AND 1000000),
    rate_period double precision CHECK (rate_period > 0 AND rate_period <= 31622400),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, ckey),
    CONSTRAINT key_limits_rate_pair CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT key_limits_some_limit
        CHECK (max_active IS NOT NULL OR weight IS NOT NULL OR rate_limit IS NOT NULL)
);

-- ==== functions =================================================================================
-- The outcomes' results notice, only to registered waiters (0.2.0's bodies notify always).
\ir ../claim/_ended_v2.sql
\ir ../claim/_record_successes_v2.sql
\ir ../outcomes/complete_v2.sql
\ir ../outcomes/fail_v2.sql
\ir ../outcomes/snooze_v2.sql
\ir ../outcomes/listen_results_v2.sql

-- The worker's commit barrier (statements/commit_barrier.sql): a setval always writes WAL, so
-- its synchronous commit flushes every claim committed asynchronously before it (claim_v2's
-- `p_async_commit`). Its value means nothing.
CREATE SEQUENCE workhorse.commit_barrier_seq AS integer;

-- The claim of level 2 and every helper it calls (sql/claim/claim_v2.sql says what it does).
\ir ../claim/_keyed_v2.sql
\ir ../claim/_hint_keys_v2.sql
\ir ../claim/_prepare_queue_v2.sql
\ir ../claim/_budget_lock_id_v1.sql
\ir ../claim/_adaptive_max_v1.sql
\ir ../claim/_budget_starts_used_v1.sql
\ir ../claim/_budget_next_start_v1.sql
\ir ../claim/_burst_used_v1.sql
\ir ../claim/_burst_next_start_v1.sql
\ir ../claim/_choose_units_v1.sql
\ir ../claim/_unknown_ready_v1.sql
\ir ../claim/_expire_jobs_v1.sql
\ir ../claim/claim_v2.sql
-- Outcomes an operator or a worker records.
\ir ../outcomes/_after_operator_change_v2.sql
\ir ../outcomes/release_v2.sql
\ir ../outcomes/retry_jobs_v2.sql
\ir ../outcomes/cancel_jobs_v2.sql
\ir ../outcomes/_record_attempt_v1.sql
\ir ../outcomes/_dead_jobs_v1.sql
\ir ../outcomes/redrive_v1.sql
\ir ../outcomes/purge_dead_v1.sql
-- The enqueue.
\ir ../enqueue/_on_key_full_v1.sql
\ir ../enqueue/enqueue_v2.sql
-- Policies and operator controls on queues.
\ir ../policies/sync_concurrency_policies_v2.sql
\ir ../policies/set_queue_control_v2.sql
\ir ../policies/set_key_limits_v1.sql
\ir ../policies/clear_key_limits_v1.sql
-- Named budgets.
\ir ../budgets/sync_budgets_v1.sql
\ir ../budgets/set_budget_control_v1.sql
\ir ../budgets/_key_head_budget_v1.sql
\ir ../budgets/backoff_v1.sql
\ir ../budgets/clear_backoff_v1.sql
\ir ../budgets/hold_budget_v1.sql
\ir ../budgets/renew_holds_v1.sql
\ir ../budgets/release_hold_v1.sql
-- Schedules.
\ir ../schedules/sync_schedules_v2.sql
\ir ../schedules/fire_schedules_v2.sql
-- Workflows.
\ir ../workflows/_workflow_changed_v1.sql
\ir ../workflows/_workflow_release_v1.sql
\ir ../workflows/enqueue_workflow_v1.sql
-- Housekeeping.
\ir ../housekeeping/housekeeping_v2.sql
\ir ../housekeeping/_history_partition_v1.sql
\ir ../housekeeping/move_to_history_v1.sql
\ir ../housekeeping/_prune_history_v1.sql
\ir ../housekeeping/_prune_durable_v1.sql
\ir ../housekeeping/_prunable_child_v1.sql
\ir ../housekeeping/prune_jobs_v2.sql
-- Durable execution.
\ir ../claim/_durable_level_v1.sql
\ir ../claim/_wake_parents_v1.sql
\ir ../durable/record_step_v1.sql
\ir ../durable/suspend_v1.sql
\ir ../durable/wait_signal_v1.sql
\ir ../durable/signal_v1.sql
\ir ../durable/adopt_children_v1.sql

-- ==== triggers ==================================================================================
CREATE TRIGGER jobs_attempt_ended
    AFTER UPDATE ON workhorse.jobs
    FOR EACH ROW
    WHEN (OLD.status = 'active'
          AND (NEW.status NOT IN ('active', 'succeeded', 'ready', 'suspended')
               OR NEW.fence IS DISTINCT FROM OLD.fence))
    EXECUTE FUNCTION workhorse._record_attempt_v1();

CREATE TRIGGER jobs_workflow_trg
    AFTER UPDATE OF status ON workhorse.jobs
    FOR EACH ROW
    WHEN ((NEW.workflow_id IS NOT NULL OR NEW.has_dependents)
          AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION workhorse._workflow_changed_v1();

-- The release, at commit (see _workflow_release_v1.sql): deferred, so that it sees every success
-- of the transaction and locks their dependents in one order. Named after jobs_workflow_trg on
-- purpose: the triggers of one event fire in name order, so a transaction that sets it
-- IMMEDIATE still has each success noted before the release that takes it (it then releases at
-- the end of each statement, and loses the one lock order across its statements).
CREATE CONSTRAINT TRIGGER jobs_workflow_trg_release
    AFTER UPDATE OF status ON workhorse.jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.status = 'succeeded' AND OLD.status IS DISTINCT FROM 'succeeded'
          AND (NEW.workflow_id IS NOT NULL OR NEW.has_dependents))
    EXECUTE FUNCTION workhorse._workflow_release_v1();

-- (Only where the writer did not say the head's budget itself: claim_v2's head moves do, and a
-- PL/pgSQL trigger call a moved key, twice for an upsert that updates, was a fifth of a keyed
-- claim's moves; writers of 0.2.0 and the refreshes leave budget_for behind, so it fires.)
CREATE TRIGGER key_heads_budget BEFORE INSERT OR UPDATE OF head_id ON workhorse.key_heads
    FOR EACH ROW WHEN (NEW.budget_for IS DISTINCT FROM NEW.head_id)
    EXECUTE FUNCTION workhorse._key_head_budget_v1();
