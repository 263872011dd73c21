"""The schema and the embedded server: `migrate`, and `db start|stop|status|url`."""

from __future__ import annotations

import dataclasses

import click

from .. import database
from ..queue import Queue
from ._base import console, databases, handle_errors, main, print_json
from ._render import DataTable


@main.command()
@click.option("--database", "only", default=None, metavar="NAME",
              help="Only this database of WORKHORSE_DATABASES (default: every one).")
@click.pass_context
@handle_errors
def migrate(ctx: click.Context, only: str | None) -> None:
    """Install or bring forward the workhorse schema (on every database WORKHORSE_DATABASES
    names, else the one database)."""
    for url in databases(ctx, only).values():
        with database.connect(url, role="migrate", autocommit=True) as conn:
            queue = Queue(conn)
            queue.install_schema()
            version = queue.schema_version()
        console.print(f"schema at version {version} on {database.mask(url)}")


@main.group()
def db() -> None:
    """The embedded PostgreSQL server (used when no database URL is configured)."""


@db.command("start")
@handle_errors
def db_start() -> None:
    """Start the embedded server (or reuse the running one)."""
    from .. import embedded

    dsn = embedded.ensure_running()
    console.print(f"embedded PostgreSQL running: {dsn}", soft_wrap=True)


@db.command("stop")
@handle_errors
def db_stop() -> None:
    """Stop the embedded server."""
    from .. import embedded

    stopped = embedded.stop()
    console.print("stopped" if stopped else "not running")


@db.command("status")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def db_status(as_json: bool) -> None:
    """Whether the embedded server runs, where its data lives, and its DSN."""
    from .. import embedded

    status = embedded.status()
    if as_json:
        print_json(status)
        return
    table = DataTable(show_header=False, title="embedded PostgreSQL")
    for field in dataclasses.fields(status):
        table.add_row(field.name, str(getattr(status, field.name)))
    console.print(table)


@db.command("url")
@handle_errors
def db_url() -> None:
    """Print the embedded server's DSN (starting it if needed), and nothing else."""
    from .. import embedded

    click.echo(embedded.ensure_running())
