-- Capacity grants (0.3.0): claimers of a FIFO queue that has only a queue-wide limit no longer
-- wait for each other. Each claiming process holds a grant, a share of the queue's max_active
-- that only it admits into, under the queue's admission lock in shared mode; it takes the lock
-- exclusively only to get or grow its grant. functions/_rebalance_grants_v1.sql says why the
-- limit stays exact. The claim of this level is claim_v2; a queue's first grant raises its level
-- to 2, so that claim_v1 (level 1, which does not know grants) admits nothing there any more.
--
-- For an existing database: one new table, one new nullable column on jobs (no rewrite), and one
-- partial index on jobs that holds only active jobs claimed inside a grant (none yet: building it
-- reads the table once, under a lock that blocks writes to jobs meanwhile).

-- One row per claiming process and queue. `units` of the queue's `max_active` belong to the
-- holder until `expires_at` (renewed by its every claim, so a holder that died gives them back
-- within one lease); `stamp` is the version of the queue's rules the units were computed under
-- (_grant_stamp_v1: a grant whose stamp is not the one in force admits nothing); `wanted` is how
-- many jobs the holder would
-- run (its active jobs plus the places it asked to fill), from which the fair targets are
-- water-filled.
CREATE TABLE workhorse.capacity_grants (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue          text        NOT NULL,
    holder         text        NOT NULL,
    units          integer     NOT NULL CHECK (units >= 0),
    wanted         integer     NOT NULL CHECK (wanted >= 0),
    stamp          text        NOT NULL,
    expires_at     timestamptz NOT NULL,
    rebalanced_at  timestamptz NOT NULL,
    UNIQUE (queue, holder)
) WITH (
    -- Updated by every claim inside a grant (HOT: no indexed column changes), so vacuum often.
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);

-- The grant an active job was claimed into (NULL: claimed without one). Not a foreign key: a
-- grant that expires is deleted while its jobs may still run, and they then count as outside
-- every grant.
ALTER TABLE workhorse.jobs ADD COLUMN grant_id bigint;
-- A grant's active jobs, counted by every claim inside it: at most its units rows.
CREATE INDEX jobs_active_grant_idx ON workhorse.jobs (grant_id, lease_until)
    WHERE status = 'active' AND grant_id IS NOT NULL;

\ir ../functions/_grant_stamp_v1.sql
\ir ../functions/_grant_targets_v1.sql
\ir ../functions/_grant_standing_v1.sql
\ir ../functions/_rebalance_grants_v1.sql
\ir ../functions/claim_v2.sql
