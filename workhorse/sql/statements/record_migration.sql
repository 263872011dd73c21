INSERT INTO workhorse.schema_version (version, name) VALUES (%s, %s)
