-- Rebuild a queue's heads from its ready jobs: O(backlog), run only when per-key limits turn on.
CREATE FUNCTION workhorse._rebuild_heads_v1(p_queue text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    DELETE FROM workhorse.key_hints WHERE queue = p_queue;
    DELETE FROM workhorse.key_heads WHERE queue = p_queue;
    INSERT INTO workhorse.key_heads (queue, ckey, head_rank, head_id)
    SELECT DISTINCT ON (j.ckey) j.queue, j.ckey, j.rank, j.id
    FROM workhorse.jobs j
    WHERE j.queue = p_queue AND j.status = 'ready' AND j.ckey <> ''
    ORDER BY j.ckey, j.rank, j.id;
END
$$;
