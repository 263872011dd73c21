-- The one name of the results channel. Its payload is a comma-separated list of job ids that
-- reached a resting status (succeeded, failed, held, canceled): what JobHandle.get/wait wait for.
CREATE FUNCTION workhorse.results_channel_v1() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 'workhorse_results'::text $$;
