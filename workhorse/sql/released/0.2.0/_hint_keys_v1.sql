-- "These keys may have a new head." Only queues with a per-key limit keep heads (_keyed_v1).
CREATE FUNCTION workhorse._hint_keys_v1(p_queue text, p_keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_keys IS NULL OR cardinality(p_keys) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO workhorse.key_hints (queue, ckey)
    SELECT p_queue, k
    FROM (SELECT DISTINCT k FROM unnest(p_keys) AS k WHERE k <> '') AS keys
    WHERE workhorse._keyed_v1(p_queue);
END
$$;
