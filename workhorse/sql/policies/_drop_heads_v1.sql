-- Forget a queue's per-key heads and hints: its per-key limits are gone (a sync removed them,
-- or the override that set them expired). Its claims then walk the rows, not the heads.
CREATE FUNCTION workhorse._drop_heads_v1(p_queue text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM workhorse.key_hints WHERE queue = p_queue;
    DELETE FROM workhorse.key_heads WHERE queue = p_queue;
$$;
