-- The one name of the wake-up channel. Its payload is a queue name: "this queue may have work"
-- (an enqueue, a due job, freed governed capacity, a policy change). Nothing else spells it:
-- senders call _wake_v1, listeners call listen_v1.
CREATE FUNCTION workhorse.notification_channel_v1() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 'workhorse_jobs'::text $$;
