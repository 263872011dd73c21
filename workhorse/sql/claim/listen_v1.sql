-- LISTEN on the wake-up channel, for this session (it takes effect when the call commits).
CREATE FUNCTION workhorse.listen_v1() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    EXECUTE format('LISTEN %I', workhorse.notification_channel_v1());
END
$$;
