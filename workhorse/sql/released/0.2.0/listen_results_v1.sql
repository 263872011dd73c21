-- LISTEN on the results channel, for this session (it takes effect when the call commits).
CREATE FUNCTION workhorse.listen_results_v1() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    EXECUTE format('LISTEN %I', workhorse.results_channel_v1());
END
$$;
