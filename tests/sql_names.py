"""The SQL function a statement calls, read from the statement's own text.

Tests never spell a versioned function name (docs/design.md "Releases and SQL versioning"): the name
a worker really calls changes with each version, and a test that names an old one checks nothing.
`called_function("claim")` is the function `sql/statements/claim.sql` calls, whatever its version is
today.
"""

from __future__ import annotations

import re

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
    """The text of `sql/functions/<name>.sql`."""
    return _sql.function_files()[name]
