-- Whether the queue keeps per-key heads: a per-key limit (concurrency or rate) is declared or
-- overridden. Enqueues hint keys, and claims walk heads, only for such queues.
CREATE FUNCTION workhorse._keyed_v1(p_queue text) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT EXISTS (SELECT 1 FROM workhorse.policies p
                   WHERE p.queue = p_queue
                     AND (p.max_active_per_key IS NOT NULL OR p.rate_limit_per_key IS NOT NULL))
        OR EXISTS (SELECT 1 FROM workhorse.queue_controls c
                   WHERE c.queue = p_queue
                     AND (c.max_active_per_key IS NOT NULL OR c.rate_limit_per_key IS NOT NULL))
$$;
