"""The SQL function a statement calls, read from the statement's own text.

Tests never spell a versioned function name (docs/design.md "Releases and SQL versioning"): the name
a worker really calls changes with each version, and a test that names an old one checks nothing.
`called_function("claim")` is the function `sql/statements/claim.sql` calls, whatever its version is
today.
"""

from __future__ import annotations

import re
from pathlib import Path

from psycopg import sql

from workhorse import _sql

_CALL = re.compile(r"\bworkhorse\.(\w+)\s*\(")


def called_functions(statement: str) -> list[str]:
    """Every `workhorse.<function>(` the statement calls, in order, without repeats."""
    text = _sql.statement(statement).as_string()
    names = list(dict.fromkeys(_CALL.findall(text)))
    assert names, f"statements/{statement}.sql calls no workhorse function"
    return names


def called_function(statement: str) -> str:
    """The one function the statement calls (its first, if it calls several)."""
    return called_functions(statement)[0]


def function_text(name: str) -> str:
    """The text of the function file `<name>.sql` (live, or a released body)."""
    return _sql.function_files()[name]


# The statements a 0.2.0 wheel sends, kept as fixtures for the rolling-upgrade tests: a worker of
# that release still runs them beside this one (docs/design.md "Releases and SQL versioning").
RELEASED_STATEMENTS = Path(__file__).parent / "fixtures" / "released"


def released_statement(name: str, release: str = "0.2.0") -> sql.SQL:
    """The statement `name` exactly as `release`'s wheel sends it."""
    text = (RELEASED_STATEMENTS / release / "statements" / f"{name}.sql").read_text("utf-8")
    return sql.SQL(text.strip().rstrip(";"))


def released_called_function(name: str, release: str = "0.2.0") -> str:
    """The function `release`'s statement `name` calls (its first)."""
    names = _CALL.findall(released_statement(name, release).as_string())
    assert names, f"{release} statements/{name}.sql calls no workhorse function"
    return names[0]
