SELECT version, name FROM workhorse.schema_version ORDER BY version
