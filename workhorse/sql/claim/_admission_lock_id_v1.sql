-- The queue's admission lock (a 64-bit advisory lock, so unrelated queues practically never
-- collide): fast-path claims share it; governed claims and policy changes hold it exclusively,
-- so an install waits for in-flight fast-path claims and then counts them.
-- Every claim version must take this same lock, or old and new workers would not exclude each
-- other: a later claim version calls this function, it never defines its own.
CREATE FUNCTION workhorse._admission_lock_id_v1(p_queue text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT hashtextextended(p_queue, 7046) $$;
