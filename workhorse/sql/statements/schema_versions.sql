-- The recorded migrations. A table without checksums was made by workhorse 0.1, before the first
-- release: its rows come back with a NULL checksum, and the caller refuses them.
SELECT v.version, v.name, (to_jsonb(v) ->> 'checksum') AS checksum
FROM workhorse.schema_version v
ORDER BY v.version
