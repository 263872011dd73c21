CREATE FUNCTION workhorse._drop_heads_v1(p_queue text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM workhorse.key_hints WHERE queue = p_queue;
    DELETE FROM workhorse.key_heads WHERE queue = p_queue;
$$;
