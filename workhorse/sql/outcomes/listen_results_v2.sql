-- LISTEN on the results channel, for this session (it takes effect when the call commits), and
-- register the session in result_listeners, without which no outcome sends a results NOTIFY
-- (_ended_v2). Registrations of sessions that are gone are dropped here. A waiter's first look
-- at its jobs comes after this call committed, so an outcome that committed before it is seen by
-- that look, and one that read "no listener" before it and committed after it is seen by the
-- waiter's poll (_results.py): a registration only ever costs the first waits a poll interval.
-- A 0.2.0 waiter (listen_results_v1) registers nothing and hears this release's outcomes by its
-- poll while the two run side by side.
CREATE FUNCTION workhorse.listen_results_v2() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    EXECUTE format('LISTEN %I', workhorse.results_channel_v1());
    DELETE FROM workhorse.result_listeners r
    WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.backend_pid);
    INSERT INTO workhorse.result_listeners (backend_pid) VALUES (pg_backend_pid())
    ON CONFLICT (backend_pid) DO UPDATE SET since = now();
END
$$;
