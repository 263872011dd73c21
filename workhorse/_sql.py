"""Loads the SQL files once. Nothing else reads them: every statement lives in `sql/`.

    sql/migrations/NNNN_name.sql  tables and indexes, applied in order; `\\ir ../functions/f.sql`
                                  lines apply a function file, as psql would
    sql/functions/NAME.sql        one SQL function per file, named after it, version included
    sql/statements/NAME.sql       one statement the Python sends, per file
    sql/demo/NAME.sql             the statements of `workhorse demo`, apart from the product's
    sql/schema.sql                the whole current schema; a test diffs a fresh install against it
    sql/released.json             what each release shipped: the sha256 of every file above
"""

from __future__ import annotations

import functools
import hashlib
import json
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


def checksum(text: str) -> str:
    """The sha256 (hex) a database records for a migration it applied: of its text with its
    function files applied in place, so that an edited function file changes it too."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def files() -> dict[str, bytes]:
    """Every migration, function and statement file, by its path under `sql/` (what a release
    ships and `released.json` records)."""
    found = {}
    for folder in ("migrations", "functions", "statements"):
        for entry in _root().joinpath(folder).iterdir():
            if entry.name.endswith(".sql"):
                found[f"{folder}/{entry.name}"] = entry.read_bytes()
    return found


def released() -> dict[str, dict[str, str]]:
    """`sql/released.json`: for each release, the sha256 of every file it shipped."""
    loaded: dict[str, dict[str, str]] = json.loads(_read("released.json"))
    return loaded


def function_files() -> dict[str, str]:
    """Every function file: name (without `.sql`) -> its text."""
    folder = _root().joinpath("functions")
    return {
        entry.name.removesuffix(".sql"): entry.read_text("utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    }


_VERSIONED = re.compile(r"^(\w+)_v(\d+)$")


def function_name(base: str) -> str:
    """The newest version of the SQL function `base` (as `claim` -> its file's name), for tests
    and benchmarks that call a function directly: Python never spells a version."""
    versions = [int(m.group(2)) for name in function_files()
                if (m := _VERSIONED.match(name)) and m.group(1) == base]
    if not versions:
        raise LookupError(f"no SQL function {base!r} in sql/functions/")
    return f"{base}_v{max(versions)}"


def schema() -> str:
    """The checked-in `sql/schema.sql`."""
    return _read("schema.sql")
