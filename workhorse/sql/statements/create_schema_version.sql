-- The migrations this database applied, each with the sha256 of its text (function files
-- included) as the package that applied it had it.
CREATE TABLE IF NOT EXISTS workhorse.schema_version (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
