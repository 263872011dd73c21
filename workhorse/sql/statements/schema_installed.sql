-- Whether the schema's version table exists yet (a brand-new database has none).
SELECT to_regclass('workhorse.schema_version') IS NOT NULL
