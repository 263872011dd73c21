-- One supervisor at a time vacuums the small admission tables. Session-level, because VACUUM
-- cannot run inside a transaction block; released by housekeeping_unlock.sql.
SELECT pg_try_advisory_lock(%s)
