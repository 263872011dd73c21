"""Loads the SQL files once. Nothing else reads them: every statement lives in `sql/`."""

from __future__ import annotations

import functools
from importlib import resources

from psycopg import sql


@functools.cache
def statement(name: str) -> sql.SQL:
    """The statement in `sql/<name>.sql`, ready to execute with positional parameters."""
    text = resources.files("workhorse").joinpath("sql", f"{name}.sql").read_text("utf-8")
    return sql.SQL(text.strip().rstrip(";"))


@functools.cache
def migrations() -> tuple[tuple[int, str, str], ...]:
    """(version, name, text) for every file in `sql/migrations/`, in version order."""
    folder = resources.files("workhorse").joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text("utf-8")))
    found.sort()
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1][0]
