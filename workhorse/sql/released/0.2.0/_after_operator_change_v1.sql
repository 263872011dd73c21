-- After an operator made jobs ready again (a retry, a cancel that freed a place): for each
-- queue (p_queues[i], p_keys[i] pairs), hint the keys that may have a new head and wake the
-- queue's claimers.
CREATE FUNCTION workhorse._after_operator_change_v1(p_queues text[], p_keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
    v_keys text[];
BEGIN
    FOR v_queue, v_keys IN
        SELECT c.queue, array_agg(DISTINCT c.ckey)
        FROM unnest(p_queues, p_keys) AS c(queue, ckey)
        GROUP BY c.queue
    LOOP
        PERFORM workhorse._hint_keys_v1(v_queue, v_keys);
        PERFORM workhorse._wake_v1(v_queue);
    END LOOP;
END
$$;
