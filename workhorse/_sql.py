"""Loads the SQL files once. Nothing else reads them: every statement lives in `sql/`.

    sql/migrations/NNNN_name.sql  tables and indexes, applied in order (one migration per release);
                                  `\\ir ../claim/f.sql` lines apply a function file, as psql would
    sql/<subsystem>/NAME.sql      the live functions, one per file, named after it, version
                                  included, one folder per subsystem: claim/ (the claim and every
                                  helper it calls), enqueue/, outcomes/, policies/, budgets/,
                                  schedules/, workflows/, housekeeping/, durable/
    sql/released/X.Y.Z/NAME.sql   bodies only release X.Y.Z's workers call (applied only by the
                                  migrations; no live function calls them)
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


# The folders of the live functions, one per subsystem.
SUBSYSTEMS = ("claim", "enqueue", "outcomes", "policies", "budgets", "schedules", "workflows",
              "housekeeping", "durable")
# Bodies only an older release's workers call, by release: `released/0.2.0/`.
RELEASED = "released"


def _sql_files(folder: str) -> dict[str, Traversable]:
    """The `.sql` files of `sql/<folder>/`, by their path under `sql/`."""
    directory = _root().joinpath(*folder.split("/"))
    if not directory.is_dir():
        return {}
    return {f"{folder}/{entry.name}": entry for entry in directory.iterdir()
            if entry.name.endswith(".sql")}


def _function_folders() -> list[str]:
    released = [f"{RELEASED}/{entry.name}" for entry in _root().joinpath(RELEASED).iterdir()
                if entry.is_dir()]
    return [*SUBSYSTEMS, *sorted(released)]


@functools.cache
def function_paths() -> dict[str, str]:
    """Every function file, live or released: name (without `.sql`) -> its path under `sql/`."""
    found: dict[str, str] = {}
    for folder in _function_folders():
        for path in _sql_files(folder):
            name = posixpath.basename(path).removesuffix(".sql")
            if name in found:
                raise ValueError(f"two files define {name}: {found[name]} and {path}")
            found[name] = path
    return found


def is_live(path: str) -> bool:
    """Whether the function file at `path` (under `sql/`) is live code (not a released body)."""
    return path.split("/", 1)[0] in SUBSYSTEMS


def files() -> dict[str, bytes]:
    """Every migration, function and statement file, by its path under `sql/` (what a release
    ships; `released.json` records them)."""
    found = {}
    for folder in ("migrations", *_function_folders(), "statements"):
        for path, entry in _sql_files(folder).items():
            found[path] = entry.read_bytes()
    return found


def released() -> dict[str, dict[str, str]]:
    """`sql/released.json`: for each release, the sha256 of every file it shipped (a function
    file as `functions/NAME.sql`, wherever it lives now)."""
    loaded: dict[str, dict[str, str]] = json.loads(_read("released.json"))
    return loaded


def function_files(live_only: bool = False) -> dict[str, str]:
    """Every function file (only the live ones with `live_only`): name (without `.sql`) -> its
    text."""
    return {name: _read(path) for name, path in function_paths().items()
            if not live_only or is_live(path)}


_VERSIONED = re.compile(r"^(\w+)_v(\d+)$")


def function_name(base: str) -> str:
    """The newest live version of the SQL function `base` (as `claim` -> its file's name), for
    tests and benchmarks that call a function directly: Python never spells a version."""
    versions = [int(m.group(2)) for name, path in function_paths().items()
                if is_live(path) and (m := _VERSIONED.match(name)) and m.group(1) == base]
    if not versions:
        raise LookupError(f"no live SQL function {base!r} in sql/{{{','.join(SUBSYSTEMS)}}}/")
    return f"{base}_v{max(versions)}"


def schema() -> str:
    """The checked-in `sql/schema.sql`."""
    return _read("schema.sql")
