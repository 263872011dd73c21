-- Concurrency policies (desired state per namespace) and the per-key head machinery.
CREATE TABLE workhorse.policies (
    queue               text PRIMARY KEY,
    namespace           text        NOT NULL,
    max_active          integer     CHECK (max_active >= 1),
    max_active_per_key  integer     CHECK (max_active_per_key >= 1),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT policies_some_limit CHECK (max_active IS NOT NULL OR max_active_per_key IS NOT NULL),
    CONSTRAINT policies_per_key_le_queue CHECK (
        max_active IS NULL OR max_active_per_key IS NULL OR max_active_per_key <= max_active)
);
CREATE INDEX policies_namespace_idx ON workhorse.policies (namespace);

-- Each key of a per-key-governed queue is a virtual queue; its head is its best ready job.
-- The claim walks heads in admission order and passes over saturated keys, so its cost depends on
-- the number of saturated keys, never on how deep their backlog is.
CREATE TABLE workhorse.key_heads (
    queue      text     NOT NULL,
    ckey       text     NOT NULL,
    head_rank  integer  NOT NULL,
    head_id    bigint   NOT NULL,
    PRIMARY KEY (queue, ckey)
);
CREATE INDEX key_heads_order_idx ON workhorse.key_heads (queue, head_rank, head_id);

-- Append-only: an enqueue says "this key may have a new head" without locking a shared row.
-- The next claim drains the queue's hints and refreshes those heads.
CREATE TABLE workhorse.key_hints (
    queue  text NOT NULL,
    ckey   text NOT NULL
);
CREATE INDEX key_hints_queue_idx ON workhorse.key_hints (queue);

ALTER TABLE workhorse.key_heads SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
ALTER TABLE workhorse.key_hints SET (
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
