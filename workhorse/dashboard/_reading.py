"""A request's way to the dashboard's databases (docs/design.md "Several databases"): which
database a parameter names, which ones a list page reads, and reading one or each of them, each
database's part of a page apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from .. import database
from ..errors import first_line
from ..types import shown
from . import _data
from ._render import Dashboard
from ._security import Refused
from ._sources import Unreachable

T = TypeVar("T")


class Reading:
    """A request's way to its dashboard's databases, in a worker thread: `one` reads or acts on
    one database, `each` reads several, each its part of the page. With one database a failure
    is the request's (503, as it always was); with several, a database that cannot be reached
    is its part's `down`, while the others' parts are read."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard

    @property
    def multi(self) -> bool:
        return self.dashboard.multi

    @property
    def names(self) -> list[str]:
        return self.dashboard.names

    def name(self, sent: Any) -> str:
        """The database that a query parameter or form field `database` names; when it names
        none, `default` (as `app.get_job(id)` reads it), or the dashboard's only database.
        Refused 404 for a name the dashboard does not have."""
        if sent is None or (isinstance(sent, str) and not sent.strip()):
            if database.DEFAULT_DATABASE in self.dashboard.sources or not self.names:
                return database.DEFAULT_DATABASE
            return self.names[0]
        if not isinstance(sent, str) or sent.strip() not in self.dashboard.sources:
            raise Refused(404, f"no database {shown(sent)} (the databases: "
                               f"{', '.join(self.names)})")
        return sent.strip()

    def label(self, name: str) -> str | None:
        """`name` on the page: None with one database (no column, no parameter)."""
        return name if self.multi else None

    def listed(self, sent: Any) -> tuple[list[str], str | None]:
        """The databases a list page reads (`database=` chooses one; else every one), and the
        one chosen (None: every one; always None with one database)."""
        if sent is None or (isinstance(sent, str) and not sent.strip()):
            return self.names, None
        name = self.name(sent)
        return [name], self.label(name)

    def one(self, name: str, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`fn` on a connection to database `name`; Refused 503 when it cannot be reached."""
        try:
            with self.dashboard.sources[name].connection() as conn:
                return fn(conn)
        except Unreachable as exc:
            raise Refused(503, f"{exc} (the other databases are shown as usual)") from None

    def each(self, names: list[str], fn: Callable[[psycopg.Connection[Any]], T]
             ) -> list[_data.Part[T]]:
        """`fn` on each of these databases, in order: each one's part of the page."""
        if not self.multi:
            return [_data.Part(None, self.one(name, fn)) for name in names]
        parts: list[_data.Part[T]] = []
        for name in names:
            try:
                with self.dashboard.sources[name].connection() as conn:
                    parts.append(_data.Part(name, fn(conn)))
            except Unreachable as exc:
                parts.append(_data.Part(name, down=f"cannot be reached: {exc.reason}"))
            except psycopg.Error as exc:  # its schema, a timeout: the others still show
                parts.append(_data.Part(name, down=f"could not be read: {first_line(exc)}"))
        return parts


def parts_context(parts: list[_data.Part[Any]], chosen_db: str | None) -> dict[str, Any]:
    """A list page's parts, the databases that could not be read, and the filter chosen."""
    return {"parts": parts, "chosen_db": chosen_db,
            "down": [(p.database, p.down) for p in parts if p.down]}
