"""The schema: its version, and installing or bringing it forward."""

from __future__ import annotations

from .. import _sql
from .._driver import Operation, Rows
from ..errors import (
    SchemaVersionError,
)

SCHEMA_LOCK = 0x776F726B686F7273  # "workhors": serializes concurrent schema installs


def schema_version() -> Operation[int]:
    """The version the database's schema is at (0: not installed)."""
    rows = yield _sql.statement("schema_installed"), ()
    if not rows[0][0]:
        return 0
    rows = yield _sql.statement("schema_versions"), ()
    return int(rows[-1][0]) if rows else 0


_RESET = ("drop the `workhorse` schema (DROP SCHEMA workhorse CASCADE, which deletes every "
          "job, policy and schedule in it) and install again")


def _check_recorded(recorded: Rows) -> None:
    """Every recorded migration must be the package's own: the same name and the same
    checksum. A table without checksums was made by workhorse 0.1, which had no release."""
    ours = {version: (name, _sql.checksum(text)) for version, name, text in _sql.migrations()}
    for version, name, checksum in recorded:
        if checksum is None:
            raise SchemaVersionError(
                "this database's workhorse schema was installed by workhorse 0.1, before the "
                f"first release, and cannot be brought forward: {_RESET}"
            )
        if version not in ours:
            continue  # newer than this package: refused by the caller
        our_name, our_checksum = ours[version]
        if name != our_name or checksum != our_checksum:
            raise SchemaVersionError(
                f"the database applied schema migration {version} as {name!r} with checksum "
                f"{checksum[:12]}, but this workhorse ships {our_name!r} with checksum "
                f"{our_checksum[:12]}: the migration was changed after it was applied (a "
                f"development build?); {_RESET}"
            )


def install_schema() -> Operation[int]:
    """Bring the schema to the latest version; returns the version found before. Refuses a
    database whose applied migrations differ from this package's, or that is newer."""
    latest = _sql.latest_version()
    rows = yield _sql.statement("schema_installed"), ()
    if rows[0][0]:
        recorded = yield _sql.statement("schema_versions"), ()
        if recorded and recorded[-1][0] == latest:
            _check_recorded(recorded)
            return int(latest)
    yield _sql.statement("schema_install_lock"), (SCHEMA_LOCK,)
    yield _sql.statement("create_schema"), ()
    yield _sql.statement("create_schema_version"), ()
    recorded = yield _sql.statement("schema_versions"), ()
    current = int(recorded[-1][0]) if recorded else 0
    _check_recorded(recorded)
    if current > latest:
        raise SchemaVersionError(
            f"the database schema is at version {current}, newer than this workhorse "
            f"(version {latest}); upgrade workhorse"
        )
    for version, name, text in _sql.migrations():
        if version > current:
            yield text, None
            yield _sql.statement("record_migration"), (version, name, _sql.checksum(text))
    return current

