-- workhorse.pytest_plugin: one process at a time builds the test template (session-level: the
-- admin connection is a direct one, never through a pooler).
SELECT pg_advisory_lock(%s)
