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

\ir ../functions/_keyed_v2.sql
\ir ../functions/sync_concurrency_policies_v2.sql
\ir ../functions/_choose_units_v1.sql
\ir ../functions/_hint_keys_v2.sql
\ir ../functions/_prepare_queue_v2.sql
\ir ../functions/_after_operator_change_v2.sql
\ir ../functions/retry_jobs_v2.sql
\ir ../functions/release_v2.sql
\ir ../functions/set_queue_control_v2.sql
\ir ../functions/sync_schedules_v2.sql
\ir ../functions/fire_schedules_v2.sql
