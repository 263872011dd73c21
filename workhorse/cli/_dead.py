"""Dead letters and the audit log (docs/design.md "Dead letters"): `dead list|show|redrive|purge`
and `audit`. A redrive and a purge print what they did (or, with --dry-run, exactly what they
would do now) and are written to the audit log."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from .._text import literal
from ..queue import Queue
from ..types import Job, PurgeReport, RedriveReport
from ._base import DURATION, console, handle_errors, main, print_json
from ._databases import Reading, connect_change, database_option
from ._read import jobs_show
from ._render import DataTable

# The filters every dead verb takes.
_FILTERS = (
    click.option("--queue", default=None),
    click.option("--task", default=None, help="Task name."),
    click.option("--tag", default=None, help="Only jobs with this tag."),
    click.option("--error-type", default=None, help='The error\'s type (error["type"]).'),
    click.option("--since", type=DURATION, default=None,
                 help="Finished at most this long ago (e.g. 2h, 30m)."),
)


def _filters(fn: Any) -> Any:
    for option in reversed(_FILTERS):
        fn = option(fn)
    return fn


@main.group()
def dead() -> None:
    """Dead letters: jobs that ended failed or held. List, show, redrive (paced), purge."""


@dead.command("list")
@_filters
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True,
              help='Print the jobs as JSON (with several databases each has its "database").')
@database_option()
@click.pass_context
@handle_errors
def dead_list(ctx: click.Context, queue: str | None, task: str | None, tag: str | None,
              error_type: str | None, since: float | None, limit: int, as_json: bool) -> None:
    """The newest dead letters, optionally filtered.

    With several databases (WORKHORSE_DATABASES) and no --database, the newest --limit of
    every database's (by finish time), in one table led by a `database` column."""
    reading = Reading(ctx)
    found = [(name, job) for name, jobs in reading.each(lambda conn: Queue(conn).list_dead(
        queue=queue, task=task, tag=tag, error_type=error_type, since=since, limit=limit))
        for job in jobs]
    if reading.several:  # the newest of every database: `limit` in all
        found = sorted(found, key=lambda item: item[1].finished_at or item[1].enqueued_at,
                       reverse=True)[:limit]
    if as_json:
        print_json([job for _, job in found] if not reading.several else
                   [{"database": name, **dataclasses.asdict(job)} for name, job in found])
        reading.finish()
        return
    table = DataTable(title="dead letters")
    for column in (*(("database",) if reading.several else ()), "id", "task", "queue",
                   "status", "error", "finished", "redrives"):
        table.add_column(column)
    for name, job in found:
        finished = job.finished_at.isoformat(timespec="seconds") if job.finished_at else "-"
        table.add_row(*((literal(name),) if reading.several else ()), str(job.id), job.task,
                      job.queue, job.status.value, _error_type(job), finished,
                      str(job.redrive_count), style="red")
    console.print(table)
    reading.finish()


def _error_type(job: Job) -> str:
    return str(job.error.get("type", "-")) if job.error else "-"


@dead.command("show")
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True,
              help='Print the job as JSON (with several databases, led by its "database").')
@database_option()
@click.pass_context
def dead_show(ctx: click.Context, job_id: int, as_json: bool) -> None:
    """One dead letter with its attempts and redrives (as `jobs show`; with several databases
    and no --database, the one database that has the id)."""
    ctx.invoke(jobs_show, job_id=job_id, as_json=as_json)


@dead.command("redrive")
@_filters
@click.option("--dry-run", is_flag=True, help="Say exactly what would be redriven, and when.")
@click.option("--rate", default=None, metavar="N/P",
              help="Release at most N per P (e.g. 10/s); default: the queue's rate limit.")
@click.option("--reason", default=None, help="Why (written to the audit log).")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def dead_redrive(ctx: click.Context, queue: str | None, task: str | None, tag: str | None,
                 error_type: str | None, since: float | None, dry_run: bool, rate: str | None,
                 reason: str | None, as_json: bool) -> None:
    """New attempts of the dead letters the filters select, each queue's in its admission
    order, released no faster than --rate; the queue's limits decide every start."""
    with connect_change(ctx) as conn:
        report = Queue(conn).redrive(queue=queue, task=task, tag=tag, error_type=error_type,
                                     since=since, dry_run=dry_run, rate=rate, reason=reason)
    if as_json:
        print_json(_redrive_json(report))
        return
    console.print(_redrive_line(report))


def _redrive_json(report: RedriveReport) -> dict[str, Any]:
    return {"dry_run": report.dry_run, "count": report.count, "audit_id": report.audit_id,
            "jobs": [{"id": i, "queue": q, "release_at": at}
                     for i, q, at in zip(report.jobs, report.queues, report.releases,
                                         strict=True)]}


def _redrive_line(report: RedriveReport) -> str:
    verb = "would redrive" if report.dry_run else "redrove"
    line = f"{verb} {report.count} job(s)"
    if report.count:
        first, last = report.first_release, report.last_release
        assert first is not None and last is not None
        spread = (last - first).total_seconds()
        line += (f" in {len(set(report.queues))} queue(s), released over {spread:.1f} s"
                 if spread else ", released at once")
    if report.audit_id is not None:
        line += f" (audit {report.audit_id})"
    return line


@dead.command("purge")
@_filters
@click.option("--dry-run", is_flag=True, help="Say exactly what would be deleted.")
@click.option("--reason", required=True, help="Why (written to the audit log).")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def dead_purge(ctx: click.Context, queue: str | None, task: str | None, tag: str | None,
               error_type: str | None, since: float | None, dry_run: bool, reason: str,
               as_json: bool) -> None:
    """Delete the dead letters the filters select (a workflow's members stay: they go with
    their workflow, `jobs prune`)."""
    with connect_change(ctx) as conn:
        report = Queue(conn).purge(queue=queue, task=task, tag=tag, error_type=error_type,
                                   since=since, dry_run=dry_run, reason=reason)
    if as_json:
        print_json(report)
        return
    console.print(_purge_line(report))


def _purge_line(report: PurgeReport) -> str:
    verb = "would purge" if report.dry_run else "purged"
    line = f"{verb} {report.count} job(s)"
    return line + (f" (audit {report.audit_id})" if report.audit_id is not None else "")


@main.command("audit")
@click.option("--action", type=click.Choice(["redrive", "purge"]), default=None)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True,
              help='Print the entries as JSON (with several databases each has its '
                   '"database").')
@database_option()
@click.pass_context
@handle_errors
def audit(ctx: click.Context, action: str | None, limit: int, as_json: bool) -> None:
    """The redrives and purges done, newest first: when, who, what, how many, why.

    With several databases (WORKHORSE_DATABASES) and no --database, the newest --limit of
    every database's, in one table led by a `database` column."""
    reading = Reading(ctx)
    found = [(name, entry) for name, entries in reading.each(
        lambda conn: Queue(conn).audit_log(limit=limit, action=action)) for entry in entries]
    if reading.several:  # the newest of every database: `limit` in all
        found = sorted(found, key=lambda item: item[1].at, reverse=True)[:limit]
    if as_json:
        print_json([entry for _, entry in found] if not reading.several else
                   [{"database": name, **dataclasses.asdict(entry)} for name, entry in found])
        reading.finish()
        return
    table = DataTable(title="audit log")
    for column in (*(("database",) if reading.several else ()), "id", "at", "action", "who",
                   "filters", "jobs", "reason"):
        table.add_column(column)
    for name, entry in found:
        who = entry.os_user or "-"
        if entry.application_name:
            who += f" ({entry.application_name})"
        filters = ", ".join(f"{key}={value}" for key, value in entry.filters.items()) or "-"
        table.add_row(*((literal(name),) if reading.several else ()), str(entry.id),
                      entry.at.isoformat(timespec="seconds"), entry.action, who, filters,
                      str(entry.count), entry.reason or "-")
    console.print(table)
    reading.finish()
