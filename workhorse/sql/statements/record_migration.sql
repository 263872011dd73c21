INSERT INTO workhorse.schema_version (version, name, checksum) VALUES (%s, %s, %s)
