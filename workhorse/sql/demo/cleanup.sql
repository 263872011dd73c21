-- The demo leaves nothing behind in a database it did not create: its jobs (this run's, by id)
-- and its queues' per-key bookkeeping. Its policies go through a sync of its namespace.
WITH jobs AS (
    DELETE FROM workhorse.jobs WHERE id >= %(first_id)s AND queue = ANY(%(queues)s::text[])
    RETURNING 1
), heads AS (
    DELETE FROM workhorse.key_heads WHERE queue = ANY(%(queues)s::text[]) RETURNING 1
), hints AS (
    DELETE FROM workhorse.key_hints WHERE queue = ANY(%(queues)s::text[]) RETURNING 1
)
SELECT (SELECT count(*) FROM jobs)::integer
