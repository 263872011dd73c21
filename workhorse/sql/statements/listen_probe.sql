-- The LISTEN probe's private channel: a session LISTENs here, another session NOTIFYs a random
-- token (notify_probe.sql), and the token must come back. Behind PgBouncer in transaction mode
-- LISTEN "succeeds" but nothing ever arrives: then wake-ups poll instead.
LISTEN workhorse_listen_probe
