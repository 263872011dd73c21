-- Whether the queue uses a feature claim_v1 does not know (a rate limit, a pause, an override).
-- claim_v1 admits nothing from such a queue (invariant 5): during a rolling upgrade an older
-- worker must not admit past a limit it cannot see.
CREATE FUNCTION workhorse._unknown_to_v1_v1(p_queue text) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT EXISTS (SELECT 1 FROM workhorse.policies p
                   WHERE p.queue = p_queue
                     AND (p.rate_limit IS NOT NULL OR p.rate_limit_per_key IS NOT NULL))
        OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = p_queue)
$$;
