-- Sent from another session than the listener's: a NOTIFY from the listener's own session could
-- reach it through the very server connection PgBouncer happens to lend it, and prove nothing.
SELECT pg_notify('workhorse_listen_probe', %s)
