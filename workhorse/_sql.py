"""Loads the SQL files once. Nothing else reads them: every statement lives in `sql/`.

    sql/migrations/NNNN_name.sql  tables and indexes, applied in order; `\\ir ../functions/f.sql`
                                  lines apply a function file, as psql would
    sql/functions/NAME.sql        one SQL function per file, named after it (claim_v1.sql)
    sql/statements/NAME.sql       one statement the Python sends, per file
    sql/demo/NAME.sql             the statements of `workhorse demo`, apart from the product's
    sql/schema.sql                the whole current schema; a test diffs a fresh install against it
"""

from __future__ import annotations

import functools
import posixpath
import re
from importlib import resources
from importlib.resources.abc import Traversable

from psycopg import sql

# `\ir path` (psql's include-relative), alone on its line.
_INCLUDE = re.compile(r"^\\ir\s+(\S+)\s*$", re.MULTILINE)


def _root() -> Traversable:
    return resources.files("workhorse").joinpath("sql")


def _read(relative: str) -> str:
    return _root().joinpath(*relative.split("/")).read_text("utf-8")


@functools.cache
def statement(name: str, folder: str = "statements") -> sql.SQL:
    """The statement in `sql/<folder>/<name>.sql`, ready to execute with its parameters."""
    text = _read(f"{folder}/{name}.sql")
    return sql.SQL(text.strip().rstrip(";"))


def _expand(text: str, folder: str) -> str:
    """Replace each `\\ir` line by the file it names (relative to `folder`)."""

    def include(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(folder, match.group(1)))
        if target.startswith(".."):
            raise ValueError(f"{match.group(1)!r} points outside sql/")
        return _read(target).rstrip() + "\n"

    return _INCLUDE.sub(include, text)


@functools.cache
def migrations() -> tuple[tuple[int, str, str], ...]:
    """(version, name, text) for every file in `sql/migrations/`, in version order; the text has
    its function files applied in place."""
    found = []
    for entry in _root().joinpath("migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, _expand(entry.read_text("utf-8"), "migrations")))
    found.sort()
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1][0]


def function_files() -> dict[str, str]:
    """Every function file: name (without `.sql`) -> its text."""
    folder = _root().joinpath("functions")
    return {
        entry.name.removesuffix(".sql"): entry.read_text("utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    }


def schema() -> str:
    """The checked-in `sql/schema.sql`."""
    return _read("schema.sql")
