"""The `workhorse` command: each verb is a thin call into the modules, rendered with rich."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import PurePath
from typing import Any, TypeVar

import click
import psycopg
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from . import _incident, _ops, database, telemetry
from ._durations import parse_duration, parse_lease
from ._text import literal
from .errors import InvalidPolicyError, WorkhorseError, first_line
from .queue import Queue
from .types import (
    BudgetHealth,
    BudgetOverride,
    Job,
    JobStatus,
    PolicyHealth,
    PolicyOverride,
    QueueControl,
    QueueHealth,
    RateLimit,
    SyncReport,
)

F = TypeVar("F", bound=Callable[..., Any])

console = Console()
error_console = Console(stderr=True)

class DataTable(Table):
    """A table of stored values: a str cell is a `literal`, and no column ever cuts a value
    (long ones fold onto more lines instead of ending in an ellipsis)."""

    def __init__(self, *headers: Any, title: str | Text | None = None, **kwargs: Any) -> None:
        if isinstance(title, str):
            title = literal(title)
        super().__init__(*headers, title=title, **kwargs)

    def add_column(self, header: Any = "", *args: Any, **kwargs: Any) -> None:
        kwargs["overflow"] = "fold"
        kwargs["no_wrap"] = False
        super().add_column(header, *args, **kwargs)

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(
            *(literal(cell) if isinstance(cell, str) else cell for cell in renderables),
            **kwargs,
        )


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


def _json_default(value: Any) -> Any:
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
    click.echo(json.dumps(value, default=_json_default, indent=2))


def _fail(message: str) -> None:
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
                _fail(str(exc))
            _fail(f"database error: {first_line(exc)}")

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


def _url(ctx: click.Context) -> str:
    return database.resolve_url(ctx.obj.get("database_url"))


@contextmanager
def _connect(ctx: click.Context) -> Iterator[psycopg.Connection[Any]]:
    url = _url(ctx)
    database.ensure_schema(url)
    with database.connect(url, autocommit=True) as conn:
        yield conn


def _load(reference: str, ctx: click.Context) -> Any:
    from .app import load_app

    app = load_app(reference)
    explicit = ctx.obj.get("database_url")
    if explicit:
        app.database_url = explicit
    return app


# ---- worker and sync -------------------------------------------------------------------------


@main.command()
@click.argument("app_reference", metavar="APP")
@click.option("--slots", type=click.IntRange(min=1), default=None,
              help="Forked worker processes. Default: the CPU count.")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True,
              help="Jobs in flight per slot (async handlers usually want more).")
@click.option("--queues", default=None, metavar="a,b",
              help="Queues to serve. Default: every queue the app declares.")
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
                   "--concurrency, at least 32). Governed queues never claim ahead.")
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
    from .worker import run_worker

    queue_list = None
    if queues is not None:
        queue_list = [q.strip() for q in queues.split(",") if q.strip()]
        if not queue_list:  # `--queues ,,` must not mean "every queue"
            raise OneLineBadParameter(f"names no queue: {queues!r}", param_hint="--queues")
    app = _load(app_reference, ctx)
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
    app = _load(app_reference, ctx)
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
                _limit(d.max_active if d else None),
                _limit(d.max_active_per_key if d else None),
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


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


# ---- read verbs -------------------------------------------------------------------------------


def _limits_text(max_active: int | None, per_key: int | None, rate: str | None,
                 rate_per_key: str | None) -> str:
    parts = [f"{name} {value}" for name, value in (
        ("max", max_active), ("per key", per_key), ("rate", rate), ("rate/key", rate_per_key))
        if value is not None]
    return ", ".join(parts) or "-"


def _in_units(p: PolicyHealth) -> bool:
    """Whether a queue's active jobs cost other than 1 each (docs/design.md "Fair share and job
    cost"): its `active` and `available` are units, not jobs, and `top` says so."""
    return p.active_units != p.active_jobs


def _active_text(p: PolicyHealth, units: bool) -> str:
    if not (units and _in_units(p)):
        return str(p.active)
    limit = "" if p.max_active is None else f" / {p.max_active}"
    return f"{p.active_units} units{limit} ({p.active_jobs} jobs)"


def _available_text(p: PolicyHealth, units: bool) -> str:
    if not (units and _in_units(p)) or p.available is None:
        return _limit(p.available)
    return f"{p.available} units"


def health_table(health: QueueHealth, *, units: bool = False) -> Table:
    """The policies of `health`; with `units` (`workhorse top`), a queue whose active jobs cost
    other than 1 shows its active and available capacity as units ("12 units / 32 (5 jobs)")."""
    table = DataTable(title="policies")
    for column in ("namespace", "queue", "limits", "active", "available", "blocked_ready",
                   "saturated_keys", "rate_limited_keys"):
        text_column = column in ("namespace", "queue", "limits")
        table.add_column(column, justify="left" if text_column else "right")
    for p in health.policies:
        blocked = f"{p.blocked_ready}{'+' if p.capped else ''}"
        name = p.queue + (" (paused)" if p.paused else "") + (" (override)" if p.override else "")
        table.add_row(
            p.namespace or "-", name,
            _limits_text(p.max_active, p.max_active_per_key, p.rate_limit, p.rate_limit_per_key),
            _active_text(p, units), _available_text(p, units), blocked, str(p.saturated_keys),
            str(p.rate_limited_keys), style="bold yellow" if p.blocked_ready else None,
        )
    return table


def depth_table(health: QueueHealth) -> Table:
    table = DataTable(title="jobs by status")
    for status in JobStatus:
        table.add_column(status.value, justify="right")
    table.add_row(*(str(health.depth.get(status.value, 0)) for status in JobStatus))
    return table


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print QueueHealth as JSON.")
@click.pass_context
@handle_errors
def health(ctx: click.Context, as_json: bool) -> None:
    """Per policy: limit, active, available, blocked_ready, saturated keys; depth by status."""
    with _connect(ctx) as conn:
        result = Queue(conn).health()
    if as_json:
        print_json(result)
        return
    console.print(health_table(result))
    console.print(depth_table(result))
    if result.budgets:
        console.print(budgets_table(result.budgets))


@main.group(invoke_without_command=True)
@click.option("--namespace", default=None, help="Only this namespace.")
@click.option("--json", "as_json", is_flag=True, help="Print the policies as JSON.")
@click.pass_context
@handle_errors
def policies(ctx: click.Context, namespace: str | None, as_json: bool) -> None:
    """The stored policies; `override` and `clear-override` change the limits in force."""
    if ctx.invoked_subcommand is not None:
        return
    with _connect(ctx) as conn:
        rows = Queue(conn).list_concurrency_policies(namespace)
    if as_json:
        print_json(rows)
        return
    table = DataTable(title="policies")
    for column in ("namespace", "queue", "max_active", "max_active_per_key", "rate_limit",
                   "rate_burst", "rate_limit_per_key", "rate_burst_per_key", "fairness",
                   "updated_at"):
        table.add_column(column)
    for p in rows:
        table.add_row(p.namespace, p.queue, _limit(p.max_active), _limit(p.max_active_per_key),
                      p.rate_limit or "-", _limit(p.rate_burst), p.rate_limit_per_key or "-",
                      _limit(p.rate_burst_per_key), p.fairness,
                      p.updated_at.isoformat(timespec="seconds"))
    console.print(table)


def _owner_line(queue: str, namespace: str | None) -> str:
    if namespace is None:
        return f"no namespace owns queue {queue} (it has no synced policy)"
    return f"namespace {namespace} owns queue {queue}"


def _say_owners(lines: list[str], as_json: bool) -> None:
    """Which namespace owns what an operator action touched. A namespace guards its synced
    policies, not its queues' controls or jobs, so the operator is told whose they are. With
    --json the note goes to stderr, leaving stdout's JSON as it was."""
    target = error_console if as_json else console
    for line in lines:
        target.print(literal(line, "dim" if as_json else ""), soft_wrap=True)


def _show_control(control: QueueControl, as_json: bool, owner: str | None = None) -> None:
    if as_json:
        print_json(control)
    else:
        console.print(literal(_control_line(control)), soft_wrap=True)
    _say_owners([_owner_line(control.queue, owner)], as_json)


def _queue_owner(conn: psycopg.Connection[Any], queue: str) -> str | None:
    return _ops.execute(conn, _ops.queue_owners([queue])).get(queue)


def _job_owner_lines(conn: psycopg.Connection[Any], ids: list[int]) -> list[str]:
    return [
        f"  {count} in queue {queue}, "
        + ("owned by no namespace" if namespace is None else f"owned by namespace {namespace}")
        for queue, namespace, count in _ops.execute(conn, _ops.job_owners(ids))
    ]


def _control_line(control: QueueControl) -> str:
    parts = ["paused" if control.paused else "not paused"]
    if control.override is not None:
        parts.append(f"override {_override_text(control.override)}")
    return f"{control.queue}: " + "; ".join(parts)


def _override_text(override: PolicyOverride) -> str:
    fields = [f"{name}={value}" for name, value in (
        ("max_active", override.max_active), ("max_active_per_key", override.max_active_per_key),
        ("rate_limit", override.rate_limit), ("rate_limit_per_key", override.rate_limit_per_key),
        ("rate_burst", override.rate_burst), ("rate_burst_per_key", override.rate_burst_per_key),
    ) if value is not None]
    until = (f" until {override.expires_at.isoformat(timespec='seconds')}"
             if override.expires_at else " until cleared")
    return ", ".join(fields) + until


def _rate_option(value: str | None, param: str) -> str | None:
    if value is None:
        return None
    try:
        return str(RateLimit.parse(value, param))
    except InvalidPolicyError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{param.replace('_', '-')}") from None


@policies.command("override")
@click.argument("queue")
@click.option("--max-active", type=click.IntRange(1, 1_000_000), default=None)
@click.option("--max-active-per-key", type=click.IntRange(1, 1_000_000), default=None)
@click.option("--rate-limit", default=None, metavar="N/P", help="e.g. 100/m, 5/10s.")
@click.option("--rate-limit-per-key", default=None, metavar="N/P")
@click.option("--rate-burst", type=click.IntRange(1, 1_000_000), default=None,
              help="At most B starts in any P*B/N (beside --rate-limit or the synced rate).")
@click.option("--rate-burst-per-key", type=click.IntRange(1, 1_000_000), default=None)
@click.option("--for", "for_", type=DURATION, default=None,
              help="Expire after this long (default: until cleared).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def policies_override(
    ctx: click.Context, queue: str, max_active: int | None, max_active_per_key: int | None,
    rate_limit: str | None, rate_limit_per_key: str | None, rate_burst: int | None,
    rate_burst_per_key: int | None, for_: float | None, as_json: bool,
) -> None:
    """Replace the named limits of QUEUE (any queue) until cleared or expired."""
    rate = _rate_option(rate_limit, "rate_limit")
    rate_key = _rate_option(rate_limit_per_key, "rate_limit_per_key")
    if (max_active is None and max_active_per_key is None and rate is None and rate_key is None
            and rate_burst is None and rate_burst_per_key is None):
        raise click.UsageError(
            "give at least one of --max-active, --max-active-per-key, --rate-limit, "
            "--rate-limit-per-key, --rate-burst, --rate-burst-per-key")
    if for_ is not None and for_ <= 0:
        raise click.BadParameter("must be positive", param_hint="--for")
    with _connect(ctx) as conn:
        control = Queue(conn).override_policy(
            queue, max_active=max_active, max_active_per_key=max_active_per_key,
            rate_limit=rate, rate_limit_per_key=rate_key, expires_in=for_,
            rate_burst=rate_burst, rate_burst_per_key=rate_burst_per_key,
        )
        owner = _queue_owner(conn, queue)
    _show_control(control, as_json, owner)


@policies.command("clear-override")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def policies_clear_override(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Back to the synced policy for QUEUE."""
    with _connect(ctx) as conn:
        control = Queue(conn).clear_override(queue)
        owner = _queue_owner(conn, queue)
    _show_control(control, as_json, owner)


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the queues as JSON.")
@click.pass_context
@handle_errors
def queues(ctx: click.Context, as_json: bool) -> None:
    """Every queue: live depth by status, limits in force, rate limits, paused, override."""
    if ctx.invoked_subcommand is not None:
        return
    with _connect(ctx) as conn:
        rows = Queue(conn).list_queues()
        if as_json:
            print_json(rows)
            return
        unknown = _ops.execute(conn, _incident.unknown_task_ready(_ops.HEALTH_SAMPLE))
        stalled = _ops.execute(conn, _incident.stalled(unknown))
    statuses = ("waiting", "ready", "active", "scheduled", "held", "failed", "canceled")
    table = DataTable(title="queues")
    table.add_column("queue", no_wrap=True)
    for status in statuses:
        table.add_column(status, justify="right")
    table.add_column("limits")
    table.add_column("controls")
    for row in rows:
        limits = _limits_text(row.max_active, row.max_active_per_key, row.rate_limit,
                              row.rate_limit_per_key)
        controls = ["paused"] if row.paused else []
        if row.override is not None:
            controls.append(f"override {_override_text(row.override)}")
        table.add_row(
            row.queue, *(str(row.depth.get(s, 0)) for s in statuses),
            limits, Text("; ".join(controls) or "-",
                                           style="bold yellow" if controls else ""),
        )
    console.print(table)
    # Ready jobs (within the health sample) whose task no live supervisor serving it declares.
    for queue, (count, tasks) in sorted(unknown.items()):
        more = "+" if count >= _ops.HEALTH_SAMPLE else ""
        console.print(literal(f"unknown task {queue}: {count}{more} ready job(s) of a task no "
                              f"live supervisor serving the queue declares ({', '.join(tasks)})",
                              "bold red"), soft_wrap=True)
    for queue, reason in sorted(stalled.items()):
        console.print(literal(f"stalled {queue}: {reason}", "bold red"), soft_wrap=True)


@queues.command("pause")
@click.argument("queue")
@click.option("--force", is_flag=True,
              help="Pause a queue that has no policy, no control and no job yet (creates it).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def queues_pause(ctx: click.Context, queue: str, force: bool, as_json: bool) -> None:
    """Admit nothing from QUEUE (running jobs finish) until it is resumed. A queue that has no
    policy, no control and no job is refused (a typo would create it) unless --force."""
    with _connect(ctx) as conn:
        if not force and not _ops.execute(conn, _incident.queue_known(queue)):
            _fail(f"no queue {queue!r}: it has no policy, no control and no job (--force "
                  "pauses it anyway)")
        control = Queue(conn).pause(queue)
        owner = _queue_owner(conn, queue)
    _show_control(control, as_json, owner)


@queues.command("resume")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def queues_resume(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Admit from QUEUE again; workers wake at once."""
    with _connect(ctx) as conn:
        control = Queue(conn).resume(queue)
        owner = _queue_owner(conn, queue)
    _show_control(control, as_json, owner)


@main.group()
def jobs() -> None:
    """List, inspect, retry and cancel jobs."""


def _job_row(job: Job) -> list[str]:
    return [
        str(job.id), job.task, job.queue, job.concurrency_key or "-", str(job.priority),
        job.status.value, f"{job.attempts}/{job.max_attempts}",
        job.enqueued_at.isoformat(timespec="seconds"),
    ]


@jobs.command("list")
@click.option("--queue", default=None)
@click.option("--status", type=click.Choice([s.value for s in JobStatus]), default=None)
@click.option("--key", default=None, help="Concurrency key.")
@click.option("--task", default=None, help="Task name.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def jobs_list(ctx: click.Context, queue: str | None, status: str | None, key: str | None,
              task: str | None, limit: int, as_json: bool) -> None:
    """The newest jobs, optionally filtered."""
    with _connect(ctx) as conn:
        found = Queue(conn).list_jobs(queue=queue, status=status, key=key, task=task,
                                      limit=limit)
    if as_json:
        print_json(found)
        return
    table = DataTable(title="jobs")
    for column in ("id", "task", "queue", "key", "priority", "status", "attempts", "enqueued"):
        table.add_column(column)
    for job in found:
        table.add_row(*_job_row(job), style="red" if job.status in (
            JobStatus.FAILED, JobStatus.HELD) else None)
    console.print(table)


@jobs.command("show")
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def jobs_show(ctx: click.Context, job_id: int, as_json: bool) -> None:
    """One job, with its attempts (each failure's error), and its error and traceback while it
    rests because of them."""
    with _connect(ctx) as conn:
        job = Queue(conn).get_job(job_id)
        attempts = _ops.execute(conn, _ops.job_attempts(job_id)) if job is not None else None
    if job is None:
        raise WorkhorseError(f"no job with id {job_id}")
    attempts = attempts or []
    if as_json:
        # The Job's fields, and its attempts (a list; `attempts` stays the number of claims).
        print_json({**dataclasses.asdict(job),
                    "attempt_history": [dataclasses.asdict(a) for a in attempts]})
        return
    table = DataTable(show_header=False, title=f"job {job.id}")
    table.add_column("field", style="bold")
    table.add_column("value")
    for field in dataclasses.fields(job):
        if field.name in ("error", "meta"):
            continue
        value = getattr(job, field.name)
        if field.name == "progress" and value is not None:
            value = value.text + (f" (at {value.at})" if value.at is not None else "")
        if isinstance(value, dict | list):
            value = json.dumps(value, default=_json_default)
        table.add_row(field.name, "-" if value is None else str(value))
    console.print(table)
    if attempts:
        # One line an attempt (never folded into a narrow table: an error message stays whole).
        console.print(Text("attempts", style="bold"))
        for attempt in attempts:
            error = attempt.error
            when = " -> ".join(f"{moment:%Y-%m-%d %H:%M:%S}" if moment else "-"
                               for moment in (attempt.started_at, attempt.ended_at))
            line = f"  {attempt.attempt:>4}  {attempt.outcome:<9}  {when}"
            if error:
                line += f"  {error.get('type')}: {error.get('message')}"
            console.print(literal(line, "red" if attempt.failed else ""), soft_wrap=True)
    # Job.error is the last failure; shown as the job's own only while the job rests because of
    # it (a job that succeeded on a later attempt shows it under its attempts only).
    own = _ops.job_own_error(job, attempts)
    if own:
        console.print(literal(f"{own.get('type')}: {own.get('message')}", "red"),
                      soft_wrap=True)
        if own.get("traceback"):
            console.print(literal(own["traceback"], newlines=True), soft_wrap=True)


@main.group()
def workflows() -> None:
    """Inspect workflows (chain, group, chord; docs/design.md "Workflows")."""


@workflows.command("show")
@click.argument("workflow_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def workflows_show(ctx: click.Context, workflow_id: int, as_json: bool) -> None:
    """One workflow: its members, their status and dependencies."""
    with _connect(ctx) as conn:
        jobs = Queue(conn).workflow_jobs(workflow_id)
    if not jobs:
        raise WorkhorseError(f"no workflow with id {workflow_id}")
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.status.value] = counts.get(job.status.value, 0) + 1
    if as_json:
        print_json({"id": workflow_id, "counts": counts,
                    "finished": all(j.resting and j.status.value != "held" for j in jobs),
                    "jobs": jobs})
        return
    table = DataTable(title=f"workflow {workflow_id}: "
                      + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    for column in ("id", "task", "queue", "status", "depends on", "error"):
        table.add_column(column, no_wrap=column != "error")
    for job in jobs:
        error = job.error or {}
        table.add_row(str(job.id), literal(job.task), literal(job.queue), job.status.value,
                      ", ".join(map(str, job.depends_on)) or "-",
                      literal(f"{error.get('type')}: {error.get('message')}") if error else "-")
    console.print(table)


@jobs.command("retry")
@click.argument("job_id", type=int, required=False)
@click.option("--held", "all_held", is_flag=True, help="Release every held job.")
@click.option("--queue", default=None, help="With --held: only this queue.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def jobs_retry(ctx: click.Context, job_id: int | None, all_held: bool, queue: str | None,
               as_json: bool) -> None:
    """Release a held (or failed, or canceled) job, or every held job, to run again."""
    if (job_id is None) == (not all_held):
        raise click.UsageError("give a JOB_ID or --held (not both)")
    with _connect(ctx) as conn:
        if all_held:
            ids = _ops.execute(conn, _ops.held_job_ids(queue, 100_000))
        else:
            ids = [job_id] if job_id is not None else []
        released = Queue(conn).retry_jobs(ids)
        owners = _job_owner_lines(conn, released)
    if as_json:
        print_json({"released": released})
    # The exit code does not depend on the output format: a job that was not released is an error.
    if job_id is not None and not released:
        raise WorkhorseError(f"job {job_id} is not held, failed or canceled (or does not exist)")
    if as_json:
        _say_owners(owners, as_json)
        return
    console.print(f"released {len(released)} job(s)" + (f": {released}" if released else ""))
    _say_owners(owners, as_json)


@jobs.command("cancel")
@click.argument("job_ids", type=int, nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def jobs_cancel(ctx: click.Context, job_ids: tuple[int, ...], as_json: bool) -> None:
    """Cancel jobs that have not finished (a running one is asked to stop, and ends canceled
    when its handler returns)."""
    with _connect(ctx) as conn:
        canceled = Queue(conn).cancel_jobs(job_ids)
        owners = _job_owner_lines(conn, canceled)
    if as_json:
        print_json({"canceled": canceled})
    if not canceled:
        raise WorkhorseError("no job was canceled: already finished, or no such job")
    if not as_json:
        console.print(f"canceled {len(canceled)} job(s): {canceled}")
    _say_owners(owners, as_json)


@jobs.command("prune")
@click.option("--older-than", type=DURATION, default=None,
              help="Finished this long ago (default: those whose retention expired).")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(["succeeded", "failed", "held", "canceled"]),
              help="With --older-than: only these (default succeeded, failed, canceled).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def jobs_prune(ctx: click.Context, older_than: float | None, statuses: tuple[str, ...],
               as_json: bool) -> None:
    """Delete finished jobs now, in batches, and print how many went."""
    if statuses and older_than is None:
        raise click.UsageError("--status needs --older-than")
    deleted = 0
    busy_since: float | None = None
    with _connect(ctx) as conn:
        queue = Queue(conn)
        while True:
            batch = queue.prune_jobs(5000, older_than=older_than, statuses=statuses or None)
            if batch < 0:  # a supervisor is pruning (it holds the lock a second at a time)
                busy_since = busy_since or time.monotonic()
                if time.monotonic() - busy_since > 30:
                    raise WorkhorseError(
                        f"another pruner kept the lock for 30 s; pruned {deleted} job(s)")
                time.sleep(0.2)
                continue
            busy_since = None
            deleted += batch
            if batch < 5000:
                break
    if as_json:
        print_json({"pruned": deleted})
        return
    console.print(f"pruned {deleted} job(s)")


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def workers(ctx: click.Context, as_json: bool) -> None:
    """The worker supervisors registered, their slots and last seen."""
    with _connect(ctx) as conn:
        rows = Queue(conn).list_workers()
    if as_json:
        print_json(rows)
        return
    table = DataTable(title="workers")
    for column in ("id", "app", "host", "pid", "slots", "queues", "started", "last seen", "alive"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r.id), r.app, r.host, str(r.pid), str(r.slots), ",".join(r.queues),
            r.started_at.isoformat(timespec="seconds"), r.last_seen.isoformat(timespec="seconds"),
            Text("yes", style="green") if r.alive else Text("no", style="red"),
        )
    console.print(table)


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the budgets (BudgetHealth) as JSON.")
@click.pass_context
@handle_errors
def budgets(ctx: click.Context, as_json: bool) -> None:
    """Named budgets: declared, overridden or named by jobs, with their limits in force and
    active units; `override` and `clear-override` change the limits in force."""
    if ctx.invoked_subcommand is not None:
        return
    with _connect(ctx) as conn:
        rows = _ops.execute(conn, _ops.budget_health())
    if as_json:
        print_json(rows)
        return
    console.print(budgets_table(rows))
    if not rows:
        console.print("no budgets (declare them with app.budget(...) and run `workhorse sync`)")


def budgets_table(rows: list[BudgetHealth]) -> Table:
    table = DataTable(title="budgets")
    for column in ("budget", "namespace", "max_active", "rate_limit", "rate_burst",
                   "active_units", "ready", "queues"):
        table.add_column(column, justify="right" if column in (
            "max_active", "rate_burst", "active_units", "ready") else "left")
    for b in rows:
        name = b.name + (" (override)" if b.override else "")
        table.add_row(name, b.namespace or "- (not declared)", _limit(b.max_active),
                      b.rate_limit or "-", _limit(b.rate_burst), str(b.active_units),
                      f"{b.ready}{'+' if b.capped else ''}", ", ".join(b.queues) or "-")
    return table


def _budget_line(name: str, override: BudgetOverride | None) -> str:
    if override is None:
        return f"budget {name}: no override"
    fields = [f"{field}={value}" for field, value in (
        ("max_active", override.max_active), ("rate_limit", override.rate_limit),
        ("rate_burst", override.rate_burst)) if value is not None]
    until = (f" until {override.expires_at.isoformat(timespec='seconds')}"
             if override.expires_at else " until cleared")
    return f"budget {name}: override " + ", ".join(fields) + until


@budgets.command("override")
@click.argument("name")
@click.option("--max-active", type=click.IntRange(1, 1_000_000), default=None)
@click.option("--rate-limit", default=None, metavar="N/P", help="e.g. 3000/m, 5/10s.")
@click.option("--rate-burst", type=click.IntRange(1, 1_000_000), default=None,
              help="At most B units in any P*B/N (beside --rate-limit or the declared rate).")
@click.option("--for", "for_", type=DURATION, default=None,
              help="Expire after this long (default: until cleared).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def budgets_override(
    ctx: click.Context, name: str, max_active: int | None, rate_limit: str | None,
    rate_burst: int | None, for_: float | None, as_json: bool,
) -> None:
    """Replace the named limits of budget NAME (declared or not) until cleared or expired."""
    rate = _rate_option(rate_limit, "rate_limit")
    if max_active is None and rate is None and rate_burst is None:
        raise click.UsageError("give at least one of --max-active, --rate-limit, --rate-burst")
    if for_ is not None and for_ <= 0:
        raise click.BadParameter("must be positive", param_hint="--for")
    with _connect(ctx) as conn:
        override = Queue(conn).override_budget(name, max_active=max_active, rate_limit=rate,
                                               rate_burst=rate_burst, expires_in=for_)
    if as_json:
        print_json(override)
    else:
        console.print(literal(_budget_line(name, override)), soft_wrap=True)


@budgets.command("clear-override")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def budgets_clear_override(ctx: click.Context, name: str, as_json: bool) -> None:
    """Back to the declared limits for budget NAME."""
    with _connect(ctx) as conn:
        Queue(conn).clear_budget_override(name)
    if as_json:
        print_json(None)
    else:
        console.print(literal(_budget_line(name, None)), soft_wrap=True)


@main.command()
@click.option("--namespace", default=None, help="Only this namespace (an app's name).")
@click.option("--json", "as_json", is_flag=True, help="Print the schedules as JSON.")
@click.pass_context
@handle_errors
def schedules(ctx: click.Context, namespace: str | None, as_json: bool) -> None:
    """The stored schedules, with their next and last run (fired by every running worker of
    their app)."""
    with _connect(ctx) as conn:
        rows = Queue(conn).list_schedules(namespace)
    if as_json:
        print_json(rows)
        return
    table = DataTable(title="schedules")
    for column in ("namespace", "schedule", "task", "when", "queue", "catch_up", "next run",
                   "last run"):
        table.add_column(column)
    for r in rows:
        when = f"every {r.every}" if r.every is not None else f"{r.cron} ({r.tz})"
        table.add_row(
            r.namespace, r.name, r.task, when, r.queue, r.catch_up,
            r.next_run_at.isoformat(timespec="seconds"),
            r.last_run_at.isoformat(timespec="seconds") if r.last_run_at else "-",
        )
    console.print(table)
    if not rows:
        console.print("no schedules (declare them with @app.periodic and run `workhorse sync`)")


@main.command()
@click.option("--interval", type=DURATION, default="1s", show_default=True)
@click.option("--iterations", type=click.IntRange(min=1), default=None,
              help="Stop after this many refreshes (default: until Ctrl-C).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON snapshot per refresh.")
@click.pass_context
@handle_errors
def top(ctx: click.Context, interval: float, iterations: int | None, as_json: bool) -> None:
    """A live view of health and throughput (claims/s, completions/s, failures/s)."""
    from rich.console import Group

    with _connect(ctx) as conn:
        queue = Queue(conn)
        previous: tuple[float, tuple[int, int, int]] | None = None
        count = 0

        def snapshot() -> tuple[QueueHealth, dict[str, float | None]]:
            nonlocal previous
            result = queue.health()
            telemetry.publish_health(result)
            totals = _ops.execute(conn, _ops.top_counters())
            now = time.monotonic()
            rates: dict[str, float | None] = {
                "claims_per_s": None, "completions_per_s": None, "failures_per_s": None}
            if previous is not None:
                elapsed = max(now - previous[0], 1e-6)
                for name, new, old in zip(rates, totals, previous[1], strict=True):
                    rates[name] = max(new - old, 0) / elapsed
            previous = (now, totals)
            return result, rates

        def render(result: QueueHealth, rates: dict[str, float | None]) -> Group:
            rate_text = "   ".join(
                f"{name.replace('_per_s', '')}/s: {'-' if v is None else f'{v:,.1f}'}"
                for name, v in rates.items()
            )
            return Group(health_table(result, units=True), depth_table(result),
                         Text(rate_text, style="bold"))

        try:
            if as_json:
                while iterations is None or count < iterations:
                    result, rates = snapshot()
                    click.echo(json.dumps({"health": dataclasses.asdict(result), **rates},
                                          default=_json_default))
                    count += 1
                    if iterations is None or count < iterations:
                        time.sleep(interval)
                return
            with Live(console=console, refresh_per_second=4, transient=False) as live:
                while iterations is None or count < iterations:
                    live.update(render(*snapshot()))
                    count += 1
                    if iterations is None or count < iterations:
                        time.sleep(interval)
        except KeyboardInterrupt:
            pass


# ---- database ---------------------------------------------------------------------------------


@main.command()
@click.pass_context
@handle_errors
def migrate(ctx: click.Context) -> None:
    """Install or bring forward the workhorse schema."""
    url = _url(ctx)
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
    from . import embedded

    dsn = embedded.ensure_running()
    console.print(f"embedded PostgreSQL running: {dsn}", soft_wrap=True)


@db.command("stop")
@handle_errors
def db_stop() -> None:
    """Stop the embedded server."""
    from . import embedded

    stopped = embedded.stop()
    console.print("stopped" if stopped else "not running")


@db.command("status")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def db_status(as_json: bool) -> None:
    """Whether the embedded server runs, where its data lives, and its DSN."""
    from . import embedded

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
    from . import embedded

    click.echo(embedded.ensure_running())


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; a non-loopback one needs WORKHORSE_DASHBOARD_TOKEN.")
@click.option("--port", type=click.IntRange(0, 65535), default=8642, show_default=True)
@click.option("--read-only", is_flag=True, help="Hide and refuse every action.")
@click.option("--redact", is_flag=True,
              help="Hide payloads and results; shown only on request, with the token.")
@click.option("--tls-cert", default=None, metavar="FILE",
              help="Serve https with this PEM certificate (with --tls-key).")
@click.option("--tls-key", default=None, metavar="FILE", help="The certificate's PEM key.")
@click.pass_context
@handle_errors
def dashboard(ctx: click.Context, host: str, port: int, read_only: bool, redact: bool,
              tls_cert: str | None, tls_key: str | None) -> None:
    """Serve the web dashboard: queues against their limits, jobs, workers, throughput."""
    from . import dashboard as web  # light: the extra's modules load only when serving

    missing = web.missing_extra()
    if missing:
        _fail(f"the dashboard needs its extra ({', '.join(missing)} missing): "
              f"{web.INSTALL_HINT}")
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("give --tls-cert and --tls-key together")
    token = web.configured_token()
    if token is None and not web.is_loopback(host):
        _fail(f"refusing to bind {host} (not a loopback address) without a token: set "
              f"{web.TOKEN_ENV}, which the dashboard then requires")
    if token is not None:
        web.check_token(token)
    if tls_cert is not None and tls_key is not None:
        import ssl

        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            _fail(f"cannot use --tls-cert {tls_cert} with --tls-key {tls_key}: "
                  f"{first_line(exc)}")
    url = _url(ctx)
    database.ensure_schema(url)
    mode = " (read-only)" if read_only else ""
    guard = " (token required)" if token else ""
    hidden = " (payloads redacted)" if redact else ""
    scheme = "https" if tls_cert else "http"
    shown = f"[{host}]" if ":" in host else host
    console.print(f"workhorse dashboard{mode}{guard}{hidden} on {scheme}://{shown}:{port} for "
                  f"{database.mask(url)}", highlight=False, soft_wrap=True)
    if tls_cert is None and not web.is_loopback(host):
        error_console.print(
            "warning: plain http on a non-loopback address: the token and the session cookie "
            "cross the network in clear unless a TLS proxy is in front (or use --tls-cert and "
            "--tls-key)", highlight=False, soft_wrap=True, markup=False)
    web.serve(database.with_application_name(url, "dashboard"), host=host, port=port,
              read_only=read_only, token=token, redact=redact, tls_cert=tls_cert,
              tls_key=tls_key)


@main.command()
@click.option("--jobs", "job_count", type=click.IntRange(1, 100_000), default=300,
              show_default=True, help="How many jobs to enqueue.")
@click.option("--slots", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
@click.pass_context
@handle_errors
def demo(ctx: click.Context, job_count: int, slots: int, concurrency: int) -> None:
    """Run a real worker fleet on a multi-tenant app and watch the budget hold."""
    from ._demo import run_demo

    sys.exit(run_demo(ctx.obj.get("database_url"), job_count=job_count, slots=slots,
                      concurrency=concurrency, console=console))


if __name__ == "__main__":  # pragma: no cover
    main()
