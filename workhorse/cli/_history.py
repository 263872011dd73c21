"""`workhorse history export` (docs/design.md "History"): the jobs that finished in a range,
live or moved to history, as JSON lines on standard output, in finish order."""

from __future__ import annotations

import dataclasses
import json

import click

from .. import _ops
from ..queue import Queue
from ._base import error_console, handle_errors, json_default, main
from ._databases import connect_change, database_option


@main.group()
def history() -> None:
    """Finished jobs: the live table's last hour and the history behind it."""


@history.command("export")
@click.option("--since", required=True,
              help="From this moment: a date (2026-12-01, UTC), an ISO 8601 time, or a "
                   "duration ago (2d).")
@click.option("--until", default=None,
              help="Up to (not including) this moment; default now. Same forms as --since.")
@click.option("--queue", default=None, help="Only jobs of this queue.")
@database_option(change=True)
@click.pass_context
@handle_errors
def history_export(ctx: click.Context, since: str, until: str | None, queue: str | None) -> None:
    """Every job that finished in [since, until), one JSON object a line.

    \b
      workhorse history export --since 2026-12-01 --until 2026-12-02 > day.jsonl
    """
    count = 0
    _ops.history_range(since, until, queue)  # bad bounds fail before any connection
    with connect_change(ctx) as conn:
        for job in Queue(conn).export_history(since, until, queue=queue):
            click.echo(json.dumps(dataclasses.asdict(job), default=json_default,
                                  separators=(",", ":")))
            count += 1
    error_console.print(f"{count} jobs")

