-- Every claim of a per-key or rate-limited queue deletes hints, moves heads and counts starts;
-- their dead rows would otherwise slow claims until autovacuum comes round. SKIP_LOCKED: a table
-- another supervisor (or autovacuum) is vacuuming right now is skipped, not waited for; the
-- housekeeping lock is transaction-scoped and VACUUM cannot run in a transaction, so two
-- supervisors may reach this at the same moment.
VACUUM (SKIP_LOCKED) workhorse.key_hints, workhorse.key_heads, workhorse.rate_starts
