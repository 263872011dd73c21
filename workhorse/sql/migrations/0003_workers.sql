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
