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

from .. import _incident, _ops, telemetry
from .._ops.dashboard import CHILDREN_SHOWN, job_children_page
from .._text import literal
from ..errors import WorkhorseError
from ..queue import Queue
from ..types import REASON_CODES, BackoffState, JobStatus, QueueHealth
from ._base import (
    DURATION,
    connect_to,
    console,
    handle_errors,
    json_default,
    main,
    print_json,
)
from ._databases import Reading, database_option
from ._health import backoffs_table_of
from ._render import (
    DataTable,
    backoff_until_text,
    budgets_table_of,
    budgets_text,
    depth_table_of,
    health_table_of,
    job_row,
    limit_text,
    override_text,
    queue_backoff_texts,
    queue_limits_text,
    reasons_table_of,
    step_detail,
    step_outcome,
    suspended_table_of,
    top_backoff_line,
    waiting_text,
)

# `workhorse top` shows at most this many backoffs, one line each (then how many more).
TOP_BACKOFF_LINES = 20

# What every read verb's help says of several databases (docs/design.md "Several databases").
SEVERAL = ("With several databases (WORKHORSE_DATABASES) and no --database, every one is read, "
           "its rows led by a `database` column")


def _reason_codes(ctx: click.Context, param: click.Parameter, value: str | None
                  ) -> frozenset[str]:
    codes = frozenset(part.strip() for part in (value or "").split(",") if part.strip())
    unknown = sorted(codes - set(REASON_CODES))
    if unknown:
        raise click.BadParameter(
            f"unknown reason code {', '.join(unknown)}; the codes: {', '.join(REASON_CODES)}")
    return codes


def _rows_json(reading: Reading, found: list[tuple[str, Any]]) -> list[Any]:
    """A list verb's --json rows: each as always with one database; with several, each led
    by its "database"."""
    if not reading.several:
        return [row for _, row in found]
    return [{"database": name, **_as_dict(row)} for name, row in found]


def _as_dict(row: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return dataclasses.asdict(row)
    return dict(row)


def _lead(reading: Reading, name: str) -> tuple[Text, ...]:
    """A row's first cell, its database, when the verb shows several."""
    return (literal(name),) if reading.several else ()


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print QueueHealth as JSON; with several databases, an object "
                   '{"<database>": QueueHealth, ...}.')
@click.option("--fail-on", "fail_on", metavar="CODE[,CODE]", callback=_reason_codes,
              help="Exit 1 when a queue or budget has any of these reason codes (for probes; "
                   "every database read): " + ", ".join(REASON_CODES) + ".")
@database_option()
@click.pass_context
@handle_errors
def health(ctx: click.Context, as_json: bool, fail_on: frozenset[str]) -> None:
    """Per policy: limit, active, available, blocked_ready, saturated keys; depth by status;
    the reason codes of what is not moving.

    With several databases (WORKHORSE_DATABASES) and no --database, every one is read: each
    table leads its rows with a `database` column (jobs by status: a row a database), --json
    is keyed by database, and --fail-on looks at every database."""
    reading = Reading(ctx)
    results = reading.each(lambda conn: Queue(conn).health())
    if as_json:
        if reading.several:
            print_json({name: dataclasses.asdict(result) for name, result in results})
        else:
            print_json(results[0][1])
    else:
        parts = [(reading.name(name), result) for name, result in results]
        console.print(health_table_of(parts))
        console.print(depth_table_of(parts))
        if any(result.budgets for _, result in parts):
            console.print(budgets_table_of([(name, result.budgets, None)
                                            for name, result in parts if result.budgets]))
        backoffs = backoffs_table_of(parts)
        if backoffs is not None:
            console.print(backoffs)
        if any(result.suspended for _, result in parts):
            console.print(suspended_table_of(parts))
        if any(result.reasons or any(b.reasons for b in result.budgets)
               for _, result in parts):
            console.print(reasons_table_of(parts))
    present = {r.code for _, result in results for r in result.reasons} | {
        r.code for _, result in results for b in result.budgets for r in b.reasons}
    if present & fail_on:
        ctx.exit(1)
    reading.finish()


@main.group(invoke_without_command=True)
@click.option("--namespace", default=None, help="Only this namespace.")
@click.option("--json", "as_json", is_flag=True,
              help='Print the policies as JSON (with several databases each has its "database").')
@database_option()
@click.pass_context
@handle_errors
def policies(ctx: click.Context, namespace: str | None, as_json: bool) -> None:
    """The stored policies; `override` and `clear-override` change the limits in force.

    With several databases (WORKHORSE_DATABASES) and no --database, every database's, in one
    table led by a `database` column."""
    if ctx.invoked_subcommand is not None:
        return
    reading = Reading(ctx)
    found = [(name, policy) for name, rows in reading.each(
        lambda conn: Queue(conn).list_concurrency_policies(namespace)) for policy in rows]
    if as_json:
        print_json(_rows_json(reading, found))
        reading.finish()
        return
    table = DataTable(title="policies")
    for column in (*(("database",) if reading.several else ()), "namespace", "queue",
                   "max_active", "max_active_per_key", "rate_limit", "rate_burst",
                   "rate_limit_per_key", "rate_burst_per_key", "fairness", "updated_at"):
        table.add_column(column)
    for name, p in found:
        table.add_row(*_lead(reading, name), p.namespace, p.queue, limit_text(p.max_active),
                      limit_text(p.max_active_per_key), p.rate_limit or "-",
                      limit_text(p.rate_burst), p.rate_limit_per_key or "-",
                      limit_text(p.rate_burst_per_key), p.fairness,
                      p.updated_at.isoformat(timespec="seconds"))
    console.print(table)
    reading.finish()


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True,
              help='Print the queues as JSON (with several databases each has its "database").')
@database_option()
@click.pass_context
@handle_errors
def queues(ctx: click.Context, as_json: bool) -> None:
    """Every queue: live depth by status, limits in force, rate limits, the named budgets its
    jobs name (with their units in use), paused, override, backoffs in force; `pause`,
    `resume` and `clear-backoff` act on one.

    With several databases (WORKHORSE_DATABASES) and no --database, every database's queues,
    in one table led by a `database` column."""
    if ctx.invoked_subcommand is not None:
        return
    reading = Reading(ctx)
    read = [(reading.name(name), *parts) for name, parts in reading.each(_queues_of)]
    if as_json:
        # Each QueueSummary, with the backoffs in force that hold the queue back: its own,
        # its keys', and those of the budgets its jobs name (docs/design.md "Back-pressure");
        # with several databases, each names its "database".
        print_json([{**({"database": name} if name is not None else {}),
                     **dataclasses.asdict(row),
                     "backoffs": [dataclasses.asdict(b) for b in backoffs
                                  if _holds_queue(b, row.queue, row.budgets)]}
                    for name, rows, backoffs, _, _, _ in read for row in rows])
        reading.finish()
        return
    statuses = ("waiting", "ready", "active", "scheduled", "suspended", "held", "failed",
                "canceled")
    budgeted = any(row.budgets for _, rows, *_ in read for row in rows)
    table = DataTable(title="queues")
    if reading.several:
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
                *((literal(name),) if name is not None else ()),
                row.queue, *(str(row.depth.get(s, 0)) for s in statuses),
                limits, *((budgets_text(row.budgets, in_force),) if budgeted else ()),
                Text("; ".join(controls) or "-", style="bold yellow" if controls else ""),
            )
    console.print(table)
    for name, _, _, unknown, stalled, _ in read:
        where = f" (database {name})" if name is not None else ""
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
    reading.finish()


def _queues_of(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    """What `workhorse queues` reads of one database: its queues, the backoffs in force, the
    ready jobs of unknown tasks, the stalled queues, and the budgets in force."""
    q = Queue(conn)
    rows = q.list_queues()
    backoffs = q.backoffs()
    unknown = _ops.execute(conn, _incident.unknown_task_ready(_ops.HEALTH_SAMPLE))
    stalled = _ops.execute(conn, _incident.stalled(unknown))
    # The named budgets the queues' jobs name, with their units and limits in force.
    in_force = (_ops.execute(conn, _ops.budget_health())
                if any(row.budgets for row in rows) else [])
    return rows, backoffs, unknown, stalled, in_force


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
@click.option("--json", "as_json", is_flag=True,
              help='Print the jobs as JSON (with several databases each has its "database").')
@database_option()
@click.pass_context
@handle_errors
def jobs_list(ctx: click.Context, queue: str | None, status: str | None, key: str | None,
              task: str | None, tag: str | None, limit: int, as_json: bool) -> None:
    """The newest jobs, optionally filtered.

    With several databases (WORKHORSE_DATABASES) and no --database, the newest --limit of
    every database's (by enqueue time), in one table led by a `database` column."""
    reading = Reading(ctx)
    found = [(name, job) for name, rows in reading.each(lambda conn: Queue(conn).list_jobs(
        queue=queue, status=status, key=key, task=task, tag=tag, limit=limit)) for job in rows]
    if reading.several:  # the newest of every database: `limit` in all
        found = sorted(found, key=lambda item: item[1].enqueued_at, reverse=True)[:limit]
    if as_json:
        print_json(_rows_json(reading, found))
        reading.finish()
        return
    table = DataTable(title="jobs")
    tagged = any(job.tags for _, job in found)
    for column in (*(("database",) if reading.several else ()), "id", "task", "queue", "key",
                   "priority", "status", "attempts", "enqueued", *(("tags",) if tagged else ())):
        table.add_column(column)
    for name, job in found:
        table.add_row(*_lead(reading, name), *job_row(job),
                      *((", ".join(job.tags) or "-",) if tagged else ()),
                      style="red" if job.status in (JobStatus.FAILED, JobStatus.HELD) else None)
    console.print(table)
    reading.finish()


def _find(reading: Reading, kind: str, ident: int, has: Any) -> tuple[str, str]:
    """(name, URL) of the one database where `has(conn)`: the one database read; with several,
    the only one that has it. Several that have it, or none, is an error (exit 1) that says so
    (and asks for --database)."""
    if not reading.several:
        [(name, url)] = reading.urls.items()
        return name, url
    having = [name for name, found in reading.each(has) if found]
    if len(having) > 1:
        raise WorkhorseError(f"{kind} {ident} is in databases {', '.join(having)}: say which "
                             "with --database")
    if not having:
        raise WorkhorseError(f"no {kind} with id {ident} in any database"
                             + reading.unread_note())
    return having[0], reading.urls[having[0]]


@jobs.command("show")
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True,
              help='Print the job as JSON (with several databases, led by its "database").')
@database_option()
@click.pass_context
@handle_errors
def jobs_show(ctx: click.Context, job_id: int, as_json: bool) -> None:
    """One job, with its attempts (each failure's error), its durable steps and what it waits
    for while suspended, its parent and children, and its error and traceback while it rests
    because of them.

    With several databases (WORKHORSE_DATABASES) and no --database, the one database that has
    the id (its name printed first); when several have it, say which with --database."""
    reading = Reading(ctx)
    where, url = _find(reading, "job", job_id,
                       lambda conn: Queue(conn).get_job(job_id) is not None)
    with connect_to(url) as conn:
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
        # steps (docs/design.md "Durable execution"; each Step whole) and its first children;
        # with several databases, first the "database" that has it.
        print_json({**({"database": where} if reading.several else {}),
                    **dataclasses.asdict(job),
                    "attempt_history": [dataclasses.asdict(a) for a in attempts],
                    "steps": [dataclasses.asdict(s) for s in steps],
                    "children": [{"id": child, "step": step, "task": task,
                                  "status": status.value}
                                 for child, step, task, status in children[:CHILDREN_SHOWN]]})
        reading.finish()
        return
    if reading.several:
        console.print(literal(f"database {where}", "bold"))
    _print_job(job, attempts, steps, children)
    reading.finish()


def _print_job(job: Any, attempts: list[Any], steps: list[Any], children: list[Any]) -> None:
    """`jobs show`'s text: the job's fields, then its attempts, steps, children and error."""
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
@click.option("--json", "as_json", is_flag=True,
              help='Print the workflow as JSON (with several databases, led by its '
                   '"database").')
@database_option()
@click.pass_context
@handle_errors
def workflows_show(ctx: click.Context, workflow_id: int, as_json: bool) -> None:
    """One workflow: its members, their status and dependencies.

    With several databases (WORKHORSE_DATABASES) and no --database, the one database that has
    the id (its name printed first); when several have it, say which with --database."""
    reading = Reading(ctx)
    where, url = _find(reading, "workflow", workflow_id,
                       lambda conn: bool(Queue(conn).workflow_jobs(workflow_id)))
    with connect_to(url) as conn:
        jobs = Queue(conn).workflow_jobs(workflow_id)
    if not jobs:
        raise WorkhorseError(f"no workflow with id {workflow_id}")
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.status.value] = counts.get(job.status.value, 0) + 1
    if as_json:
        print_json({**({"database": where} if reading.several else {}),
                    "id": workflow_id, "counts": counts,
                    "finished": all(j.resting and j.status.value != "held" for j in jobs),
                    "jobs": jobs})
        reading.finish()
        return
    if reading.several:
        console.print(literal(f"database {where}", "bold"))
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
    reading.finish()


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help='Print the workers as JSON (with several databases each has its "database").')
@database_option()
@click.pass_context
@handle_errors
def workers(ctx: click.Context, as_json: bool) -> None:
    """The worker supervisors registered, their slots and last seen.

    With several databases (WORKHORSE_DATABASES) and no --database, every database's, in one
    table led by a `database` column."""
    reading = Reading(ctx)
    found = [(name, row) for name, rows in reading.each(lambda conn: Queue(conn).list_workers())
             for row in rows]
    if as_json:
        print_json(_rows_json(reading, found))
        reading.finish()
        return
    table = DataTable(title="workers")
    for column in (*(("database",) if reading.several else ()), "id", "app", "host", "pid",
                   "slots", "queues", "started", "last seen", "alive"):
        table.add_column(column)
    for name, r in found:
        table.add_row(
            *_lead(reading, name),
            str(r.id), r.app, r.host, str(r.pid), str(r.slots), ",".join(r.queues),
            r.started_at.isoformat(timespec="seconds"), r.last_seen.isoformat(timespec="seconds"),
            Text("yes", style="green") if r.alive else Text("no", style="red"),
        )
    console.print(table)
    reading.finish()


def _budgets_of(conn: psycopg.Connection[Any]) -> tuple[list[Any], dict[str, BackoffState]]:
    """The budgets' health of one database, and their backoffs in force by budget name."""
    rows = _ops.execute(conn, _ops.budget_health())
    return rows, {b.name: b for b in Queue(conn).backoffs() if b.scope == "budget"}


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the budgets (BudgetHealth) as JSON (with several databases each has "
                   'its "database").')
@database_option()
@click.pass_context
@handle_errors
def budgets(ctx: click.Context, as_json: bool) -> None:
    """Named budgets: declared, overridden or named by jobs, with their limits in force,
    active units and backoff in force; `show NAME` adds its holds; `override` and
    `clear-override` change the limits in force, `clear-backoff` ends a backoff.

    With several databases (WORKHORSE_DATABASES) and no --database, every database's, in one
    table led by a `database` column."""
    if ctx.invoked_subcommand is not None:
        return
    reading = Reading(ctx)
    read = reading.each(_budgets_of)
    if as_json:
        # Each BudgetHealth, with its backoff in force (a BackoffState, or null).
        print_json(_rows_json(reading, [
            (name, {**dataclasses.asdict(row),
                    "backoff": dataclasses.asdict(backoffs[row.name])
                    if row.name in backoffs else None})
            for name, (rows, backoffs) in read for row in rows]))
        reading.finish()
        return
    console.print(budgets_table_of([(reading.name(name), rows, backoffs)
                                    for name, (rows, backoffs) in read]))
    # A backoff of a budget that no declaration, override or live job names (a handler's
    # Backoff(budget=...)) still holds that budget's holds back: said below the table.
    for database_name, (rows, backoffs) in read:
        listed = {row.name for row in rows}
        where = f" (database {database_name})" if reading.several else ""
        for name, backoff in sorted(backoffs.items()):
            if name not in listed:
                console.print(literal(f"budget {name}{where}: {backoff_until_text(backoff)}",
                                      "bold yellow"), soft_wrap=True)
    if not any(rows for _, (rows, _) in read):
        console.print("no budgets (declare them with app.budget(...) and run `workhorse sync`)")
    reading.finish()


@budgets.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True,
              help="Print {budget: BudgetHealth or null, holds: [Hold]} as JSON; with several "
                   'databases, an object {"<database>": {budget, holds}, ...}.')
@database_option()
@click.pass_context
@handle_errors
def budgets_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """One budget: its limits in force, active and held units, backoff, and the holds taken
    outside tasks with their holder (application_name and pid; docs/design.md "Holds").

    With several databases (WORKHORSE_DATABASES) and no --database, every database's, in
    tables led by a `database` column."""

    def read(conn: psycopg.Connection[Any]) -> tuple[list[Any], list[Any], dict[str, Any]]:
        holds = Queue(conn).list_holds(name)
        rows = [b for b in _ops.execute(conn, _ops.budget_health()) if b.name == name]
        backoffs = {b.name: b for b in Queue(conn).backoffs()
                    if b.scope == "budget" and b.name == name}
        return holds, rows, backoffs

    reading = Reading(ctx)
    found = reading.each(read)
    if as_json:
        shown = {database_name: {"budget": dataclasses.asdict(rows[0]) if rows else None,
                                 "holds": [dataclasses.asdict(h) for h in holds]}
                 for database_name, (holds, rows, _) in found}
        print_json(shown if reading.several else next(iter(shown.values())))
        reading.finish()
        return
    budgeted = [(database_name, rows, backoffs)
                for database_name, (_, rows, backoffs) in found if rows]
    if budgeted:
        console.print(budgets_table_of([(reading.name(database_name), rows, backoffs)
                                        for database_name, rows, backoffs in budgeted]))
        for database_name, [row], _ in budgeted:
            if (row.effective_max_active is not None
                    and row.effective_max_active != row.max_active):
                where = f" (database {database_name})" if reading.several else ""
                console.print(literal(
                    f"adaptive{where}: max_active {row.effective_max_active} of "
                    f"{row.max_active} in force (halved by back-pressure, growing back)"),
                    soft_wrap=True)
    else:
        console.print(literal(f"budget {name}: not declared, overridden or named by a live "
                              "job (it limits nothing)"), soft_wrap=True)
    holds = [(database_name, h) for database_name, (held, _, _) in found for h in held]
    if not holds:
        console.print("no holds")
        reading.finish()
        return
    table = DataTable(title="holds")
    for column in (*(("database",) if reading.several else ()), "id", "units", "key",
                   "holder", "pid", "acquired", "lease until"):
        table.add_column(column)
    for database_name, h in holds:
        table.add_row(*_lead(reading, database_name), str(h.id), str(h.units),
                      literal(h.key or "-"), literal(h.holder), str(h.pid),
                      h.acquired_at.isoformat(timespec="seconds"),
                      h.lease_until.isoformat(timespec="seconds"))
    console.print(table)
    reading.finish()


@main.command()
@click.option("--namespace", default=None, help="Only this namespace (an app's name).")
@click.option("--json", "as_json", is_flag=True,
              help='Print the schedules as JSON (with several databases each has its '
                   '"database").')
@database_option()
@click.pass_context
@handle_errors
def schedules(ctx: click.Context, namespace: str | None, as_json: bool) -> None:
    """The stored schedules, with their next and last run (fired by every running worker of
    their app).

    With several databases (WORKHORSE_DATABASES) and no --database, every database's, in one
    table led by a `database` column."""
    reading = Reading(ctx)
    found = [(name, row) for name, rows in reading.each(
        lambda conn: Queue(conn).list_schedules(namespace)) for row in rows]
    if as_json:
        print_json(_rows_json(reading, found))
        reading.finish()
        return
    table = DataTable(title="schedules")
    for column in (*(("database",) if reading.several else ()), "namespace", "schedule",
                   "task", "when", "queue", "catch_up", "next run", "last run"):
        table.add_column(column)
    for name, r in found:
        when = f"every {r.every}" if r.every is not None else f"{r.cron} ({r.tz})"
        table.add_row(
            *_lead(reading, name), r.namespace, r.name, r.task, when, r.queue, r.catch_up,
            r.next_run_at.isoformat(timespec="seconds"),
            r.last_run_at.isoformat(timespec="seconds") if r.last_run_at else "-",
        )
    console.print(table)
    if not found:
        console.print("no schedules (declare them with @app.periodic and run `workhorse sync`)")
    reading.finish()


class _Top:
    """What `workhorse top` reads of one database at each refresh, and the counters it read
    last (for the rates)."""

    def __init__(self, name: str, conn: psycopg.Connection[Any]) -> None:
        self.name, self.conn = name, conn
        self.previous: tuple[float, tuple[int, int, int]] | None = None

    def snapshot(self) -> tuple[QueueHealth, dict[str, float | None], list[BackoffState]]:
        result = Queue(self.conn).health()
        totals = _ops.execute(self.conn, _ops.top_counters())
        backoffs = _ops.execute(self.conn, _ops.list_backoffs())
        now = time.monotonic()
        rates: dict[str, float | None] = {
            "claims_per_s": None, "completions_per_s": None, "failures_per_s": None}
        if self.previous is not None:
            elapsed = max(now - self.previous[0], 1e-6)
            for name, new, old in zip(rates, totals, self.previous[1], strict=True):
                rates[name] = max(new - old, 0) / elapsed
        self.previous = (now, totals)
        return result, rates, backoffs


Snapshot = tuple[str, QueueHealth, dict[str, float | None], list[BackoffState]]


def _top_render(snapshots: list[Snapshot], several: bool) -> Any:
    from rich.console import Group

    def rate_text(rates: dict[str, float | None]) -> str:
        return "   ".join(
            f"{name.replace('_per_s', '')}/s: {'-' if v is None else f'{v:,.1f}'}"
            for name, v in rates.items()
        )

    parts = [(name if several else None, result) for name, result, _, _ in snapshots]
    rates = [Text((f"database {name}: " if several else "") + rate_text(r), style="bold")
             for name, _, r, _ in snapshots]
    # A line per backoff in force, soonest end first; a flood of key backoffs is cut short so
    # that the tables stay on the screen.
    backoffs = sorted(((b, name) for name, _, _, held in snapshots for b in held),
                      key=lambda item: item[0].until)
    lines = [literal(top_backoff_line(b) + (f" (database {name})" if several else ""),
                     "bold yellow") for b, name in backoffs[:TOP_BACKOFF_LINES]]
    if len(backoffs) > TOP_BACKOFF_LINES:
        lines.append(literal(f"... and {len(backoffs) - TOP_BACKOFF_LINES} more "
                             "backoffs in force (workhorse queues, workhorse budgets)",
                             "bold yellow"))
    return Group(health_table_of(parts, units=True), depth_table_of(parts), *rates, *lines)


@main.command()
@click.option("--interval", type=DURATION, default="1s", show_default=True)
@click.option("--iterations", type=click.IntRange(min=1), default=None,
              help="Stop after this many refreshes (default: until Ctrl-C).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON snapshot per refresh; with several databases, an object "
                   '{"<database>": snapshot, ...} per refresh.')
@database_option()
@click.pass_context
@handle_errors
def top(ctx: click.Context, interval: float, iterations: int | None, as_json: bool) -> None:
    """A live view of health and throughput (claims/s, completions/s, failures/s).

    With several databases (WORKHORSE_DATABASES) and no --database, every database's, its
    rows led by a `database` column and a rates line each; a database lost on the way is
    said on stderr, the others go on, and the exit code is 1."""
    reading = Reading(ctx)
    with reading.connections() as conns:
        views = [_Top(name, conn) for name, conn in conns]

        def snapshot() -> list[Snapshot]:
            taken = []
            for view in list(views):
                try:
                    taken.append((view.name, *view.snapshot()))
                except (WorkhorseError, psycopg.Error) as exc:
                    if not reading.several:
                        raise
                    reading.fail(view.name, exc)
                    views.remove(view)
            if taken:
                first = taken[0][1]
                telemetry.publish_health(first if len(taken) == 1 else dataclasses.replace(
                    first, policies=[p for _, result, _, _ in taken for p in result.policies]))
            return taken

        count = 0
        try:
            if as_json:
                while views and (iterations is None or count < iterations):
                    taken = snapshot()
                    documents = {name: {"health": dataclasses.asdict(result), **rates,
                                        "backoffs": [dataclasses.asdict(b) for b in held]}
                                 for name, result, rates, held in taken}
                    if taken:
                        click.echo(json.dumps(documents if reading.several
                                              else next(iter(documents.values())),
                                              default=json_default))
                    count += 1
                    if views and (iterations is None or count < iterations):
                        time.sleep(interval)
            else:
                with Live(console=console, refresh_per_second=4, transient=False) as live:
                    while views and (iterations is None or count < iterations):
                        taken = snapshot()
                        if taken:
                            live.update(_top_render(taken, reading.several))
                        count += 1
                        if views and (iterations is None or count < iterations):
                            time.sleep(interval)
        except KeyboardInterrupt:
            pass
    reading.finish()
