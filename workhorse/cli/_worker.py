"""The verbs that run an app: `worker`, and `sync`, which stores its declared policies."""

from __future__ import annotations

import sys

import click
from rich.table import Table
from rich.text import Text

from ..types import SyncReport
from ._base import (
    DURATION,
    LEASE,
    OneLineBadParameter,
    console,
    handle_errors,
    load_app_reference,
    main,
    print_json,
)
from ._render import DataTable, limit_text


@main.command()
@click.argument("app_reference", metavar="APP")
@click.option("--slots", type=click.IntRange(min=1), default=None,
              help="Forked worker processes. Default: the CPU count.")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True,
              help="Jobs in flight per slot (async handlers usually want more).")
@click.option("--queues", default=None, metavar="a,b",
              help="Queues to serve. Default: every queue the app declares.")
@click.option("--databases", default=None, metavar="a,b",
              help="The app's databases to serve (docs/design.md \"Several databases\"). "
                   "Default: every database a served queue lives in.")
@click.option("--max-concurrent-tasks", type=click.IntRange(min=1), default=None,
              help="A cap on jobs in flight across the whole supervisor.")
@click.option("--lease", type=LEASE, default="30s", show_default=True,
              help="Lease per claim (1s to 24h); heartbeats renew it. A task's own lease wins.")
@click.option("--dequeue-timeout", type=DURATION, default="30s", show_default=True,
              help="Poll interval when no notification arrives.")
@click.option("--grace", type=DURATION, default="30s", show_default=True,
              help="On SIGTERM/SIGINT, how long running jobs get to finish.")
@click.option("--prefetch", type=click.IntRange(min=0, max=10_000), default=None,
              help="Jobs of ungoverned queues a slot may claim ahead of a free place, as many "
                   "as it starts within 50 ms at the measured pace (0: none; default: 16 x "
                   "--concurrency, at least 128). Governed queues never claim ahead.")
@click.option("--sync", "sync_first", is_flag=True,
              help="Push the app's policies before starting.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True,
              help="info: one line per finished job (task, id, queue, outcome, attempt, "
                   "duration) on stderr.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one JSON object a line, for log shippers.")
@click.pass_context
@handle_errors
def worker(
    ctx: click.Context,
    app_reference: str,
    slots: int | None,
    concurrency: int,
    queues: str | None,
    databases: str | None,
    max_concurrent_tasks: int | None,
    lease: float,
    dequeue_timeout: float,
    grace: float,
    prefetch: int | None,
    sync_first: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Run a worker supervisor for APP (module:attribute)."""
    from ..worker import run_worker

    queue_list = None
    if queues is not None:
        queue_list = [q.strip() for q in queues.split(",") if q.strip()]
        if not queue_list:  # `--queues ,,` must not mean "every queue"
            raise OneLineBadParameter(f"names no queue: {queues!r}", param_hint="--queues")
    database_list = None
    if databases is not None:
        database_list = [d.strip() for d in databases.split(",") if d.strip()]
        if not database_list:
            raise OneLineBadParameter(f"names no database: {databases!r}",
                                      param_hint="--databases")
    app = load_app_reference(app_reference, ctx)
    code = run_worker(
        app,
        slots=slots,
        concurrency=concurrency,
        queues=queue_list,
        max_concurrent_tasks=max_concurrent_tasks,
        lease=lease,
        dequeue_timeout=dequeue_timeout,
        grace=grace,
        prefetch=prefetch,
        sync=sync_first,
        app_reference=app_reference,
        console=console,
        log_level=log_level,
        log_format=log_format,
        databases=database_list,
    )
    sys.exit(code)


@main.command()
@click.argument("app_reference", metavar="APP")
@click.option("--no-prune", is_flag=True, help="Keep this namespace's queues the app omits.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
@handle_errors
def sync(ctx: click.Context, app_reference: str, no_prune: bool, as_json: bool) -> None:
    """Push APP's declared policies to PostgreSQL and print what changed."""
    app = load_app_reference(app_reference, ctx)
    try:
        report = app.sync(prune=not no_prune)
    finally:
        app.close()
    if as_json:
        print_json(report)
        return
    declared = {d.queue: d for d in app.policy_definitions()}
    table = DataTable(title=f"sync {app.name}")
    table.add_column("queue")
    table.add_column("change")
    table.add_column("max_active", justify="right")
    table.add_column("max_active_per_key", justify="right")
    table.add_column("rate_limit", justify="right")
    table.add_column("rate_limit_per_key", justify="right")
    styles = {"created": "green", "updated": "yellow", "pruned": "red", "unchanged": "dim"}
    for change in ("created", "updated", "pruned", "unchanged"):
        for queue_name in getattr(report, change):
            d = declared.get(queue_name)
            table.add_row(
                queue_name,
                Text(change, style=styles[change]),
                limit_text(d.max_active if d else None),
                limit_text(d.max_active_per_key if d else None),
                (d.rate_limit if d else None) or "-",
                (d.rate_limit_per_key if d else None) or "-",
            )
    console.print(table)
    if report.schedules is not None:
        console.print(_schedule_changes(report.schedules))
    if report.budgets is not None:
        console.print(_schedule_changes(report.budgets, "budgets", "budget"))


def _schedule_changes(report: SyncReport, title: str = "schedules",
                      what: str = "schedule") -> Table:
    table = DataTable(title=title)
    table.add_column(what)
    table.add_column("change")
    styles = {"created": "green", "updated": "yellow", "pruned": "red", "unchanged": "dim"}
    for change in ("created", "updated", "pruned", "unchanged"):
        for name in getattr(report, change):
            table.add_row(name, Text(change, style=styles[change]))
    return table
