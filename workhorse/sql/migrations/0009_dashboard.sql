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
