-- Tell listening workers that `p_queue` may have work. Delivered at commit, deduplicated per
-- transaction by PostgreSQL.
CREATE FUNCTION workhorse._wake_v1(p_queue text) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT pg_notify(workhorse.notification_channel_v1(), p_queue) $$;
