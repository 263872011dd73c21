-- The stamp of a queue's policy version, as capacity grants record it: the max_active in force,
-- and when the queue's policy and its control row (pause, override) last changed. Every sync,
-- pause, override or prune that changes them changes the stamp, and so does an override that
-- runs out (the limit in force moves), so a grant computed under one version of the rules never
-- admits under another, even one with the same limit: the other may have let claims outside the
-- grants admit into units the grant still counts as its own.
CREATE FUNCTION workhorse._grant_stamp_v1(p_queue text, p_max integer) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format('%s/%s/%s', p_max,
                  (SELECT p.updated_at FROM workhorse.policies p WHERE p.queue = p_queue),
                  (SELECT c.updated_at FROM workhorse.queue_controls c WHERE c.queue = p_queue))
$$;
