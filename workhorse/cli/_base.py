"""What every verb shares: the `workhorse` group and its global options, the consoles, the
duration parameters, JSON output, error handling, and the connection to the database."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import PurePath
from typing import Any, TypeVar

import click
import psycopg
from rich.console import Console

from .. import database
from .._durations import parse_duration, parse_lease
from .._text import literal
from ..errors import WorkhorseError, first_line

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
error_console = Console(stderr=True)


def _widen_for_pipes() -> None:
    """Off a terminal nothing wraps at 80 columns: a name that fits no screen still comes out
    on one line, whole, for grep and scripts (COLUMNS, when set, still wins)."""
    for target in (console, error_console):
        if not target.is_terminal and "COLUMNS" not in os.environ:
            target.width = 1_000_000


class OneLineBadParameter(click.BadParameter):
    """A bad value, said in one line (exit 2): the usage block would only bury it."""

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", file=file or sys.stderr)


class Duration(click.ParamType):
    """`<number>[ms|s|m|h|d]`; a bare number means seconds; at most 366 days."""

    name = "duration"

    @staticmethod
    def parse(value: str) -> float:
        return parse_duration(value)

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            return self.parse(value)
        except ValueError as exc:
            raise OneLineBadParameter(str(exc), ctx, param) from None


DURATION = Duration()


class Lease(Duration):
    """A duration between 1 s and 24 h."""

    name = "lease"

    @staticmethod
    def parse(value: str) -> float:
        return parse_lease(value)


LEASE = Lease()


def json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PurePath):  # `db status --json`: the home and the data directory
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def print_json(value: Any) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif isinstance(value, list):
        value = [
            dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v
            for v in value
        ]
    click.echo(json.dumps(value, default=json_default, indent=2))


def fail(message: str) -> None:
    error_console.print(literal(f"error: {message}", "bold red"), soft_wrap=True)
    sys.exit(1)


def handle_errors(fn: F) -> F:
    """Workhorse and database errors end the command with one clear line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (WorkhorseError, psycopg.Error) as exc:
            ctx = click.get_current_context(silent=True)
            if ctx is not None and (ctx.find_root().obj or {}).get("verbose"):
                traceback.print_exception(exc)  # -v/--verbose: the whole story, then the line
            if isinstance(exc, WorkhorseError):
                fail(str(exc))
            fail(f"database error: {first_line(exc)}")

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--database-url",
    default=None,
    metavar="DSN",
    # Not `envvar=`: the environment comes below an App's own database_url (and Django's), by
    # the one rule of database.resolve_url, which reads it in its place.
    help="PostgreSQL URL; wins over everything. Default: APP's own database_url, else "
         "Django's database (under workhorse.contrib.django), else $WORKHORSE_DATABASE_URL, "
         "else the embedded server.",
)
@click.option("-v", "--verbose", is_flag=True,
              help="Print full tracebacks instead of one line.")
@click.version_option(package_name="workhorse")
@click.pass_context
def main(ctx: click.Context, database_url: str | None, verbose: bool) -> None:
    """workhorse: Python tasks on PostgreSQL, with fleet-wide concurrency budgets.

    Limits are declared next to the code (`@app.task(max_active=..., max_active_per_key=...)`),
    stored in PostgreSQL by `workhorse sync`, and enforced inside every claim, however many
    workers run.
    """
    ctx.obj = {"database_url": database_url, "verbose": verbose}
    _widen_for_pipes()


def resolved_url(ctx: click.Context) -> str:
    return database.resolve_url(ctx.obj.get("database_url"))


def databases(ctx: click.Context, only: str | None = None) -> dict[str, str]:
    """The databases a verb reads (docs/design.md "Several databases"), by name, `default`
    first: the `--database-url` one alone; else every one WORKHORSE_DATABASES names (its
    `default`, else the one the rule names); else the one the rule names. `only` (a verb's
    `--database`) keeps that one, or fails naming the ones there are."""
    explicit = ctx.obj.get("database_url")
    named = {} if explicit else (database.databases_from_environment() or {})
    if only is not None and only != database.DEFAULT_DATABASE and only in named:
        return {only: named[only]}  # the default one not resolved (nor the embedded started)
    found = {database.DEFAULT_DATABASE: database.resolve_url(
        explicit or named.get(database.DEFAULT_DATABASE))}
    found.update((name, url) for name, url in named.items() if name != database.DEFAULT_DATABASE)
    if only is None:
        return found
    if only not in found:
        raise click.BadParameter(
            f"no database {only!r} (the databases: {', '.join(found)}; "
            f"{database.ENV_DATABASES} names them)", param_hint="--database")
    return {only: found[only]}


@contextmanager
def connect_to(url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to `url`, the schema installed first."""
    database.ensure_schema(url)
    with database.connect(url, autocommit=True) as conn:
        yield conn


@contextmanager
def connect(ctx: click.Context) -> Iterator[psycopg.Connection[Any]]:
    url = resolved_url(ctx)
    database.ensure_schema(url)
    with database.connect(url, autocommit=True) as conn:
        yield conn


def load_app_reference(reference: str, ctx: click.Context) -> Any:
    from ..app import load_app

    app = load_app(reference)
    explicit = ctx.obj.get("database_url")
    if explicit:
        app.database_url = explicit
    return app
