CREATE TABLE IF NOT EXISTS workhorse.schema_version (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
