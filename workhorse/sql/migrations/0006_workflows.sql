-- Workflows (issue #28, docs/design.md "Workflows"): Celery's canvas (chain, group, chord) and
-- `depends_on`, every member a job row from the start.
--
-- A member whose dependencies have not all succeeded is `waiting`: it holds no capacity and no
-- claim sees it (claim_v1 and claim_v2 take `ready` rows only). Release and failure propagation
-- happen in the database, in triggers on workhorse.jobs, so that they run in the very
-- transaction that records a member's end, whichever function records it (complete_v1,
-- fail_v1, snooze_v1, _record_successes_v1 riding on a claim, cancel_jobs_v1, retry_jobs_v1):
-- failures, cancels and retries in a row trigger, at once; releases in a deferred constraint
-- trigger, at commit, for all the transaction's successes together, their dependents locked in
-- (queue, id) order (so two completions never deadlock on shared dependents). A release is an
-- update of the dependent's `workflow_members` row under the dependent's row lock, so it
-- happens exactly once, and a crash before the commit undoes the success and the release
-- together. A job outside any workflow pays only the triggers' WHEN tests.
--
-- A member raises its queue's level to 2 (0.3.0's): a 0.2.0 worker claims nothing there, and
-- knows nothing of `waiting`. The member rows themselves stay level 1, because the completion
-- functions (complete_v1, fail_v1, snooze_v1, _record_successes_v1: level 1, frozen) leave a
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

\ir ../functions/_workflow_changed_v1.sql
\ir ../functions/_workflow_release_v1.sql
\ir ../functions/enqueue_workflow_v1.sql
\ir ../functions/cancel_jobs_v2.sql
\ir ../functions/prune_jobs_v2.sql

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
