"""The read verbs: health, policies, queues, jobs, workflows, workers, budgets, schedules,
top. They change nothing."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import click
import psycopg
from rich.live import Live
from rich.text import Text

from .. import _incident, _ops, database, telemetry
from .._ops.dashboard import CHILDREN_SHOWN, job_children_page
from .._text import literal
from ..errors import WorkhorseError, first_line
from ..queue import Queue
from ..types import REASON_CODES, BackoffState, JobStatus, QueueHealth
from ._base import (
    DURATION,
    connect,
    connect_to,
    console,
    database_option,
    error_console,
    handle_errors,
    json_default,
    main,
    print_json,
    resolved_url,
    several,
)
from ._health import backoffs_table
from ._render import (
    DataTable,
    backoff_until_text,
    budgets_table,
    budgets_text,
    depth_table,
    health_table,
    job_row,
    limit_text,
    override_text,
    queue_backoff_texts,
    queue_limits_text,
    reasons_table,
    step_detail,
    step_outcome,
    suspended_table,
    top_backoff_line,
    waiting_text,
)

# `workhorse top` shows at most this many backoffs, one line each (then how many more).
TOP_BACKOFF_LINES = 20


def _reason_codes(ctx: click.Context, param: click.Parameter, value: str | None
                  ) -> frozenset[str]:
    codes = frozenset(part.strip() for part in (value or "").split(",") if part.strip())
    unknown = sorted(codes - set(REASON_CODES))
    if unknown:
        raise click.BadParameter(
            f"unknown reason code {', '.join(unknown)}; the codes: {', '.join(REASON_CODES)}")
    return codes


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print QueueHealth as JSON.")
@click.option("--fail-on", "fail_on", metavar="CODE[,CODE]", callback=_reason_codes,
              help="Exit 1 when a queue or budget has any of these reason codes (for probes): "
                   + ", ".join(REASON_CODES) + ".")
@database_option
@click.pass_context
@handle_errors
def health(ctx: click.Context, as_json: bool, fail_on: frozenset[str]) -> None:
    """Per policy: limit, active, available, blocked_ready, saturated keys; depth by status;
    the reason codes of what is not moving."""
    chosen = several(ctx)
    if chosen is None:
        with connect(ctx) as conn:
            results = {"": Queue(conn).health()}
    else:
        results = {}
        for name, url in _reachable(chosen):
            with connect_to(url) as conn:
                results[name] = Queue(conn).health()
    if as_json:
        # With several databases: {"<database>": QueueHealth, ...}.
        if chosen is None:
            print_json(results[""])
        else:
            click.echo(json.dumps({name: dataclasses.asdict(result)
                                   for name, result in results.items()},
                                  default=json_default, indent=2))
    else:
        for name, result in results.items():
            if name:
                console.print(Text(f"database {name}", style="bold"))
            console.print(health_table(result))
            console.print(depth_table(result))
            if result.budgets:
                console.print(budgets_table(result.budgets))
            backoffs = backoffs_table(result)
            if backoffs is not None:
                console.print(backoffs)
            if result.suspended:
                console.print(suspended_table(result))
            if result.reasons or any(b.reasons for b in result.budgets):
                console.print(reasons_table(result))
    present = {r.code for result in results.values() for r in result.reasons} | {
        r.code for result in results.values() for b in result.budgets for r in b.reasons}
    if present & fail_on:
        ctx.exit(1)
    if chosen is not None:
        _exit_if_unreachable(ctx, chosen, list(results))


@main.group(invoke_without_command=True)
@click.option("--namespace", default=None, help="Only this namespace.")
@click.option("--json", "as_json", is_flag=True, help="Print the policies as JSON.")
@database_option
@click.pass_context
@handle_errors
def policies(ctx: click.Context, namespace: str | None, as_json: bool) -> None:
    """The stored policies; `override` and `clear-override` change the limits in force."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(ctx) as conn:
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
        table.add_row(p.namespace, p.queue, limit_text(p.max_active),
                      limit_text(p.max_active_per_key), p.rate_limit or "-",
                      limit_text(p.rate_burst), p.rate_limit_per_key or "-",
                      limit_text(p.rate_burst_per_key), p.fairness,
                      p.updated_at.isoformat(timespec="seconds"))
    console.print(table)


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the queues as JSON.")
@database_option
@click.pass_context
@handle_errors
def queues(ctx: click.Context, as_json: bool) -> None:
    """Every queue: live depth by status, limits in force, rate limits, the named budgets its
    jobs name (with their units in use), paused, override, backoffs in force; `pause`,
    `resume` and `clear-backoff` act on one."""
    if ctx.invoked_subcommand is not None:
        return
    chosen = several(ctx)
    urls = chosen if chosen is not None else {"": resolved_url(ctx)}
    read = [(name, *_queues_of(url)) for name, url in _reachable(urls)]
    if as_json:
        # Each QueueSummary, with the backoffs in force that hold the queue back: its own,
        # its keys', and those of the budgets its jobs name (docs/design.md "Back-pressure");
        # with several databases, each names its "database".
        print_json([{**({"database": name} if name else {}), **dataclasses.asdict(row),
                     "backoffs": [dataclasses.asdict(b) for b in backoffs
                                  if _holds_queue(b, row.queue, row.budgets)]}
                    for name, rows, backoffs, _, _, _ in read for row in rows])
        _exit_if_unreachable(ctx, urls, read)
        return
    statuses = ("waiting", "ready", "active", "scheduled", "suspended", "held", "failed",
                "canceled")
    budgeted = any(row.budgets for _, rows, *_ in read for row in rows)
    table = DataTable(title="queues")
    if chosen is not None:
        table.add_column("database", no_wrap=True)
    table.add_column("queue", no_wrap=True)
    for status in statuses:
        table.add_column(status, justify="right")
    table.add_column("limits")
    if budgeted:
        table.add_column("budgets")
    table.add_column("controls")
    for name, rows, backoffs, _, _, in_force in read:
        for row in rows:
            limits = queue_limits_text(row.max_active, row.max_active_per_key, row.rate_limit,
                                       row.rate_limit_per_key, row.budgets)
            controls = ["paused"] if row.paused else []
            if row.override is not None:
                controls.append(f"override {override_text(row.override)}")
            controls += queue_backoff_texts(row.queue, row.budgets, backoffs)
            table.add_row(
                *((literal(name),) if chosen is not None else ()),
                row.queue, *(str(row.depth.get(s, 0)) for s in statuses),
                limits, *((budgets_text(row.budgets, in_force),) if budgeted else ()),
                Text("; ".join(controls) or "-", style="bold yellow" if controls else ""),
            )
    console.print(table)
    for name, _, _, unknown, stalled, _ in read:
        where = f" (database {name})" if name else ""
        # Ready jobs (within the health sample) whose task no live supervisor serving it
        # declares.
        for queue, (count, tasks) in sorted(unknown.items()):
            more = "+" if count >= _ops.HEALTH_SAMPLE else ""
            console.print(literal(f"unknown task {queue}{where}: {count}{more} ready job(s) of "
                                  "a task no live supervisor serving the queue declares "
                                  f"({', '.join(tasks)})", "bold red"), soft_wrap=True)
        for queue, reason in sorted(stalled.items()):
            console.print(literal(f"stalled {queue}{where}: {reason}", "bold red"),
                          soft_wrap=True)
    _exit_if_unreachable(ctx, urls, read)


def _queues_of(url: str) -> tuple[Any, ...]:
    """What `workhorse queues` reads of one database: its queues, the backoffs in force, the
    ready jobs of unknown tasks, the stalled queues, and the budgets in force."""
    with connect_to(url) as conn:
        q = Queue(conn)
        rows = q.list_queues()
        backoffs = q.backoffs()
        unknown = _ops.execute(conn, _incident.unknown_task_ready(_ops.HEALTH_SAMPLE))
        stalled = _ops.execute(conn, _incident.stalled(unknown))
        # The named budgets the queues' jobs name, with their units and limits in force.
        in_force = (_ops.execute(conn, _ops.budget_health())
                    if any(row.budgets for row in rows) else [])
    return rows, backoffs, unknown, stalled, in_force


# The databases of this command that could not be reached (one command a process).
_UNREACHED: set[str] = set()


def _reachable(urls: dict[str, str]) -> list[tuple[str, str]]:
    """The databases to read, in order. With several, one that cannot be reached is left out
    (its error said on stderr, and the verb exits 1 after printing the others)."""
    _UNREACHED.clear()
    if len(urls) == 1:
        return list(urls.items())
    found = []
    for name, url in urls.items():
        try:
            database.ensure_schema(url)
            with database.connect(url, autocommit=True, connect_timeout=10):
                pass
        except (WorkhorseError, psycopg.Error) as exc:
            _UNREACHED.add(name)
            error_console.print(literal(f"error: database {name}: {first_line(exc)}",
                                        "bold red"), soft_wrap=True)
            continue
        found.append((name, url))
    return found


def _exit_if_unreachable(ctx: click.Context, urls: dict[str, str], read: list[Any]) -> None:
    if len(read) < len(urls):
        ctx.exit(1)


def _read_names(found: list[tuple[str, Any]], urls: dict[str, str]) -> list[str]:
    """The databases a verb read: every one `_reachable` kept (found rows or not)."""
    return [name for name in urls if name not in _UNREACHED] if len(urls) > 1 else list(urls)


def _holds_queue(backoff: BackoffState, queue: str, budgets: list[str]) -> bool:
    """Whether `backoff` holds (some of) `queue`'s work back: the queue's own or one of its
    keys', or that of a budget its jobs name."""
    if backoff.scope == "budget":
        return backoff.name in budgets
    return backoff.name == queue


@main.group()
def jobs() -> None:
    """List, inspect, retry and cancel jobs."""


@jobs.command("list")
@click.option("--queue", default=None)
@click.option("--status", type=click.Choice([s.value for s in JobStatus]), default=None)
@click.option("--key", default=None, help="Concurrency key.")
@click.option("--task", default=None, help="Task name.")
@click.option("--tag", default=None, help="Only jobs with this tag.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@database_option
@click.pass_context
@handle_errors
def jobs_list(ctx: click.Context, queue: str | None, status: str | None, key: str | None,
              task: str | None, tag: str | None, limit: int, as_json: bool) -> None:
    """The newest jobs, optionally filtered."""
    chosen = several(ctx)
    urls = chosen if chosen is not None else {"": resolved_url(ctx)}
    found: list[tuple[str, Any]] = []
    for name, url in _reachable(urls):
        with connect_to(url) as conn:
            found += [(name, job) for job in Queue(conn).list_jobs(
                queue=queue, status=status, key=key, task=task, tag=tag, limit=limit)]
    if chosen is not None:  # the newest of every database: `limit` in all
        found = sorted(found, key=lambda item: item[1].enqueued_at, reverse=True)[:limit]
    if as_json:
        if chosen is None:
            print_json([job for _, job in found])
        else:  # each Job with its "database"
            print_json([{"database": name, **dataclasses.asdict(job)} for name, job in found])
        _exit_if_unreachable(ctx, urls, _read_names(found, urls))
        return
    table = DataTable(title="jobs")
    tagged = any(job.tags for _, job in found)
    for column in (*(("database",) if chosen is not None else ()), "id", "task", "queue", "key",
                   "priority", "status", "attempts", "enqueued", *(("tags",) if tagged else ())):
        table.add_column(column)
    for name, job in found:
        table.add_row(*((literal(name),) if chosen is not None else ()), *job_row(job),
                      *((", ".join(job.tags) or "-",) if tagged else ()),
                      style="red" if job.status in (JobStatus.FAILED, JobStatus.HELD) else None)
    console.print(table)
    _exit_if_unreachable(ctx, urls, _read_names(found, urls))


@jobs.command("show")
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@database_option
@click.pass_context
@handle_errors
def jobs_show(ctx: click.Context, job_id: int, as_json: bool) -> None:
    """One job, with its attempts (each failure's error), its durable steps and what it waits
    for while suspended, its parent and children, and its error and traceback while it rests
    because of them."""
    chosen = several(ctx)
    if chosen is not None:
        # With several databases and no --database: the one database that has this id.
        having = []
        for name, url in _reachable(chosen):
            with connect_to(url) as conn:
                if Queue(conn).get_job(job_id) is not None:
                    having.append(name)
        if len(having) > 1:
            raise WorkhorseError(f"job {job_id} is in databases {', '.join(having)}: say which "
                                 "with --database")
        if having:
            console.print(Text(f"database {having[0]}", style="bold"))
            ctx.find_root().obj["database_url"] = chosen[having[0]]
    with connect(ctx) as conn:
        job = Queue(conn).get_job(job_id)
        attempts = _ops.execute(conn, _ops.job_attempts(job_id)) if job is not None else None
        steps = Queue(conn).job_steps(job_id) if job is not None else []
        children = (_ops.execute(conn, job_children_page(job_id, CHILDREN_SHOWN + 1))
                    if job is not None else [])
    if job is None:
        raise WorkhorseError(f"no job with id {job_id}")
    attempts = attempts or []
    if as_json:
        # The Job's fields, its attempts (a list; `attempts` stays the number of claims), its
        # steps (docs/design.md "Durable execution"; each Step whole) and its first children.
        print_json({**dataclasses.asdict(job),
                    "attempt_history": [dataclasses.asdict(a) for a in attempts],
                    "steps": [dataclasses.asdict(s) for s in steps],
                    "children": [{"id": child, "step": step, "task": task,
                                  "status": status.value}
                                 for child, step, task, status in children[:CHILDREN_SHOWN]]})
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
            value = json.dumps(value, default=json_default)
        table.add_row(field.name, "-" if value is None else str(value))
    console.print(table)
    waiting = waiting_text(job, steps)
    if waiting is not None:
        console.print(literal(f"suspended: {waiting}", "bold yellow"), soft_wrap=True)
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
    if steps:
        # One line a step: its name, kind, when it was recorded (or "pending"), what it waits
        # for, and its result or error, cut short (--json has them whole).
        console.print(Text("steps", style="bold"))
        for step in steps:
            recorded = (f"{step.recorded_at:%Y-%m-%d %H:%M:%S}" if step.recorded_at
                        else "pending")
            parts = [f"  {step.name}", step.kind, recorded, step_detail(step),
                     step_outcome(step)]
            console.print(literal("  ".join(p for p in parts if p),
                                  "red" if step.error else "yellow" if step.pending else ""),
                          soft_wrap=True)
    if children:
        more = f" (the first {CHILDREN_SHOWN})" if len(children) > CHILDREN_SHOWN else ""
        console.print(Text(f"children{more}", style="bold"))
        for child, parent_step, task, status in children[:CHILDREN_SHOWN]:
            console.print(literal(f"  {child}  {status.value}  {task}  (step {parent_step})"),
                          soft_wrap=True)
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
@database_option
@click.pass_context
@handle_errors
def workflows_show(ctx: click.Context, workflow_id: int, as_json: bool) -> None:
    """One workflow: its members, their status and dependencies."""
    with connect(ctx) as conn:
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


@main.command()
@click.option("--json", "as_json", is_flag=True)
@database_option
@click.pass_context
@handle_errors
def workers(ctx: click.Context, as_json: bool) -> None:
    """The worker supervisors registered, their slots and last seen."""
    chosen = several(ctx)
    urls = chosen if chosen is not None else {"": resolved_url(ctx)}
    found: list[tuple[str, Any]] = []
    for name, url in _reachable(urls):
        with connect_to(url) as conn:
            found += [(name, row) for row in Queue(conn).list_workers()]
    if as_json:
        print_json([row for _, row in found] if chosen is None else
                   [{"database": name, **dataclasses.asdict(row)} for name, row in found])
        return
    table = DataTable(title="workers")
    for column in (*(("database",) if chosen is not None else ()), "id", "app", "host", "pid",
                   "slots", "queues", "started", "last seen", "alive"):
        table.add_column(column)
    for name, r in found:
        table.add_row(
            *((literal(name),) if chosen is not None else ()),
            str(r.id), r.app, r.host, str(r.pid), str(r.slots), ",".join(r.queues),
            r.started_at.isoformat(timespec="seconds"), r.last_seen.isoformat(timespec="seconds"),
            Text("yes", style="green") if r.alive else Text("no", style="red"),
        )
    console.print(table)


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the budgets (BudgetHealth) as JSON.")
@database_option
@click.pass_context
@handle_errors
def budgets(ctx: click.Context, as_json: bool) -> None:
    """Named budgets: declared, overridden or named by jobs, with their limits in force,
    active units and backoff in force; `show NAME` adds its holds; `override` and
    `clear-override` change the limits in force, `clear-backoff` ends a backoff."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(ctx) as conn:
        rows = _ops.execute(conn, _ops.budget_health())
        backoffs = {b.name: b for b in Queue(conn).backoffs() if b.scope == "budget"}
    if as_json:
        # Each BudgetHealth, with its backoff in force (a BackoffState, or null).
        print_json([{**dataclasses.asdict(row),
                     "backoff": dataclasses.asdict(backoffs[row.name])
                     if row.name in backoffs else None} for row in rows])
        return
    console.print(budgets_table(rows, backoffs))
    # A backoff of a budget that no declaration, override or live job names (a handler's
    # Backoff(budget=...)) still holds that budget's holds back: said below the table.
    listed = {row.name for row in rows}
    for name, backoff in sorted(backoffs.items()):
        if name not in listed:
            console.print(literal(f"budget {name}: {backoff_until_text(backoff)}",
                                  "bold yellow"), soft_wrap=True)
    if not rows:
        console.print("no budgets (declare them with app.budget(...) and run `workhorse sync`)")


@budgets.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True,
              help="Print {budget: BudgetHealth or null, holds: [Hold]} as JSON.")
@database_option
@click.pass_context
@handle_errors
def budgets_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """One budget: its limits in force, active and held units, backoff, and the holds taken
    outside tasks with their holder (application_name and pid; docs/design.md "Holds")."""
    with connect(ctx) as conn:
        holds = Queue(conn).list_holds(name)
        rows = [b for b in _ops.execute(conn, _ops.budget_health()) if b.name == name]
        backoffs = {b.name: b for b in Queue(conn).backoffs()
                    if b.scope == "budget" and b.name == name}
    if as_json:
        print_json({"budget": dataclasses.asdict(rows[0]) if rows else None,
                    "holds": [dataclasses.asdict(h) for h in holds]})
        return
    if rows:
        console.print(budgets_table(rows, backoffs))
        [row] = rows
        if row.effective_max_active is not None and row.effective_max_active != row.max_active:
            console.print(literal(
                f"adaptive: max_active {row.effective_max_active} of {row.max_active} in force "
                "(halved by back-pressure, growing back)"), soft_wrap=True)
    else:
        console.print(literal(f"budget {name}: not declared, overridden or named by a live "
                              "job (it limits nothing)"), soft_wrap=True)
    if not holds:
        console.print("no holds")
        return
    table = DataTable(title="holds")
    for column in ("id", "units", "key", "holder", "pid", "acquired", "lease until"):
        table.add_column(column)
    for h in holds:
        table.add_row(str(h.id), str(h.units), literal(h.key or "-"), literal(h.holder),
                      str(h.pid), h.acquired_at.isoformat(timespec="seconds"),
                      h.lease_until.isoformat(timespec="seconds"))
    console.print(table)


@main.command()
@click.option("--namespace", default=None, help="Only this namespace (an app's name).")
@click.option("--json", "as_json", is_flag=True, help="Print the schedules as JSON.")
@database_option
@click.pass_context
@handle_errors
def schedules(ctx: click.Context, namespace: str | None, as_json: bool) -> None:
    """The stored schedules, with their next and last run (fired by every running worker of
    their app)."""
    with connect(ctx) as conn:
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
@database_option
@click.pass_context
@handle_errors
def top(ctx: click.Context, interval: float, iterations: int | None, as_json: bool) -> None:
    """A live view of health and throughput (claims/s, completions/s, failures/s)."""
    from rich.console import Group

    with connect(ctx) as conn:
        queue = Queue(conn)
        previous: tuple[float, tuple[int, int, int]] | None = None
        count = 0

        def snapshot() -> tuple[QueueHealth, dict[str, float | None], list[BackoffState]]:
            nonlocal previous
            result = queue.health()
            telemetry.publish_health(result)
            totals = _ops.execute(conn, _ops.top_counters())
            backoffs = _ops.execute(conn, _ops.list_backoffs())
            now = time.monotonic()
            rates: dict[str, float | None] = {
                "claims_per_s": None, "completions_per_s": None, "failures_per_s": None}
            if previous is not None:
                elapsed = max(now - previous[0], 1e-6)
                for name, new, old in zip(rates, totals, previous[1], strict=True):
                    rates[name] = max(new - old, 0) / elapsed
            previous = (now, totals)
            return result, rates, backoffs

        def render(result: QueueHealth, rates: dict[str, float | None],
                   backoffs: list[BackoffState]) -> Group:
            rate_text = "   ".join(
                f"{name.replace('_per_s', '')}/s: {'-' if v is None else f'{v:,.1f}'}"
                for name, v in rates.items()
            )
            # A line per backoff in force, soonest end first; a flood of key backoffs is cut
            # short so that the tables stay on the screen.
            lines = [literal(top_backoff_line(b), "bold yellow")
                     for b in backoffs[:TOP_BACKOFF_LINES]]
            if len(backoffs) > TOP_BACKOFF_LINES:
                lines.append(literal(f"... and {len(backoffs) - TOP_BACKOFF_LINES} more "
                                     "backoffs in force (workhorse queues, workhorse budgets)",
                                     "bold yellow"))
            return Group(health_table(result, units=True), depth_table(result),
                         Text(rate_text, style="bold"), *lines)

        try:
            if as_json:
                while iterations is None or count < iterations:
                    result, rates, backoffs = snapshot()
                    click.echo(json.dumps({"health": dataclasses.asdict(result), **rates,
                                           "backoffs": [dataclasses.asdict(b)
                                                        for b in backoffs]},
                                          default=json_default))
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
