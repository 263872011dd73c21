-- One supervisor at a time does the fleet's housekeeping. Transaction-scoped, so that it works
-- through PgBouncer in transaction mode (a session-level lock would be taken on one server
-- connection and released, or leaked, on another): take it in the housekeeping's transaction.
SELECT pg_try_advisory_xact_lock(%s)
