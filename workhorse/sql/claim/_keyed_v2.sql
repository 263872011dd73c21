-- Whether the queue keeps per-key heads: a per-key limit (concurrency or rate) is declared or
-- overridden, its policy shares by key (fairness = 'key': its claim takes the heads of keys
-- with no active job in head order), or it has per-key limits as data (key_limit_sets).
-- Enqueues hint keys, and claims walk heads, for such queues.
CREATE FUNCTION workhorse._keyed_v2(p_queue text) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT EXISTS (SELECT 1 FROM workhorse.policies p
                   WHERE p.queue = p_queue
                     AND (p.max_active_per_key IS NOT NULL OR p.rate_limit_per_key IS NOT NULL
                          OR p.fairness = 'key'))
        OR EXISTS (SELECT 1 FROM workhorse.queue_controls c
                   WHERE c.queue = p_queue
                     AND (c.max_active_per_key IS NOT NULL OR c.rate_limit_per_key IS NOT NULL))
        OR EXISTS (SELECT 1 FROM workhorse.key_limit_sets s WHERE s.queue = p_queue)
$$;
