-- Serializes concurrent installs; released when the installing transaction ends.
SELECT pg_advisory_xact_lock(%s)
