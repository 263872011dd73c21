"""Which databases a verb talks to (docs/design.md "Several databases"): the `--database NAME`
option, the one database a change goes to, and the reading of several side by side.

A read verb reads every database `databases()` names (or the one `--database` chose); with one,
it reads as it always did, and its errors end it as always. With several, a database that
cannot be reached (or read) is said in one line on stderr, the verb prints what the others
gave, and `Reading.finish` ends it with exit code 1. A change goes to the database `--database`
names, else `default`.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import click
import psycopg

from .. import database
from .._text import literal
from ..errors import WorkhorseError, first_line
from ._base import OneLineBadParameter, connect_to, databases, error_console

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# Where the `--database` a verb was given is kept (the context tree's shared `meta`).
CHOSEN = "workhorse.database"
# A database of several is given this long to answer before it is said unreachable.
CONNECT_TIMEOUT = 10

READ_HELP = ("Read only this database of WORKHORSE_DATABASES (default: every one it names, "
             "side by side).")
CHANGE_HELP = "The database of WORKHORSE_DATABASES to act on (default: `default`)."


def _choose(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Keep `--database NAME` for the verb (checked when the verb asks for its databases, so
    that parsing a command line never needs them)."""
    if value is not None:
        ctx.meta[CHOSEN] = value
    return value


def _named(ctx: click.Context, only: str | None) -> dict[str, str]:
    """`databases(ctx, only)`; a name that is not one of them fails in one line (exit 2),
    naming those there are."""
    try:
        return databases(ctx.find_root(), only)
    except click.BadParameter as exc:
        raise OneLineBadParameter(exc.message, param_hint=["--database"]) from None


def database_option(*, change: bool = False) -> Callable[[F], F]:
    """The `--database NAME` option: which database a read verb reads (default: every one), or
    with `change` which one a change goes to (default: `default`)."""

    def decorate(fn: F) -> F:
        return click.option("--database", default=None, metavar="NAME", expose_value=False,
                            callback=_choose, help=CHANGE_HELP if change else READ_HELP)(fn)

    return decorate


def chosen(ctx: click.Context) -> str | None:
    """The database `--database` named (None: none was named)."""
    value = ctx.meta.get(CHOSEN)
    return value if isinstance(value, str) else None


def change_target(ctx: click.Context) -> tuple[str, str]:
    """(name, URL) of the database a change goes to: `--database`'s, else `default` (the
    `--database-url` one, else WORKHORSE_DATABASES' own `default`, else the usual rule's)."""
    name = chosen(ctx) or database.DEFAULT_DATABASE
    return name, _named(ctx, name)[name]


@contextmanager
def connect_change(ctx: click.Context) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the database a change goes to (`change_target`)."""
    with connect_to(change_target(ctx)[1]) as conn:
        yield conn


def change_note(ctx: click.Context) -> str:
    """" in database NAME" (the one a change went to) for a refusal's message when there are
    several databases, "" with one: "no job was canceled" says where it looked."""
    if len(_named(ctx, None)) < 2:
        return ""
    return f" in database {change_target(ctx)[0]}"


class Reading:
    """The databases one read verb reads: `urls` (name -> URL, `default` first) and, when
    there are several, those that could not be read (`unread`)."""

    def __init__(self, ctx: click.Context) -> None:
        self.ctx = ctx
        self.urls = _named(ctx, chosen(ctx))
        self.unread: list[str] = []

    @property
    def several(self) -> bool:
        """Whether the verb shows several databases side by side (a `database` column)."""
        return len(self.urls) > 1

    def name(self, name: str) -> str | None:
        """`name` when the verb shows several databases, else None (nothing names it)."""
        return name if self.several else None

    def fail(self, name: str, exc: BaseException) -> None:
        """Say in one line on stderr that database `name` could not be read."""
        if name not in self.unread:
            self.unread.append(name)
        if (self.ctx.find_root().obj or {}).get("verbose"):
            traceback.print_exception(exc)
        error_console.print(literal(f"error: database {name}: {first_line(exc)}", "bold red"),
                            soft_wrap=True)

    @contextmanager
    def _connect(self, url: str) -> Iterator[psycopg.Connection[Any]]:
        # The connection first, with a timeout (a server that does not answer is said after
        # it, not after the system's), then the schema, as connect_to does.
        with database.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            database.ensure_schema(url)
            yield conn

    def each(self, read: Callable[[psycopg.Connection[Any]], T]) -> list[tuple[str, T]]:
        """`read` of each database, in order, as (name, what it read). With one database an
        error ends the verb as always; with several, a database whose read fails is said
        (`fail`) and left out, and when none could be read the verb ends there (exit 1)."""
        if not self.several:
            [(name, url)] = self.urls.items()
            with connect_to(url) as conn:
                return [(name, read(conn))]
        found = []
        for name, url in self.urls.items():
            if name in self.unread:
                continue
            try:
                with self._connect(url) as conn:
                    found.append((name, read(conn)))
            except (WorkhorseError, psycopg.Error) as exc:
                self.fail(name, exc)
        if not found:
            self.finish()  # none could be read: nothing to print
        return found

    @contextmanager
    def connections(self) -> Iterator[list[tuple[str, psycopg.Connection[Any]]]]:
        """A connection to each database kept open (`workhorse top`); with several, one that
        cannot be reached is said and left out."""
        with ExitStack() as stack:
            if not self.several:
                [(name, url)] = self.urls.items()
                yield [(name, stack.enter_context(connect_to(url)))]
                return
            opened = []
            for name, url in self.urls.items():
                try:
                    opened.append((name, stack.enter_context(self._connect(url))))
                except (WorkhorseError, psycopg.Error) as exc:
                    self.fail(name, exc)
            yield opened

    def unread_note(self) -> str:
        """" (database eu could not be read)" for a message that would otherwise claim too
        much, "" when every database was read."""
        if not self.unread:
            return ""
        return (f" (database{'s' if len(self.unread) > 1 else ''} {', '.join(self.unread)} "
                "could not be read)")

    def finish(self) -> None:
        """Exit 1 when some database could not be read (each said on stderr already)."""
        if self.unread:
            self.ctx.exit(1)
