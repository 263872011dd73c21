"""The operator's write verbs: overrides of policies and budgets, pause and resume, the early
end of a backoff, retry, cancel and prune. Each says which namespace owns what it touched."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime
from typing import Any

import click
import psycopg

from .. import _incident, _ops
from .._text import literal
from ..errors import InvalidOptionsError, InvalidPolicyError, WorkhorseError
from ..queue import Queue
from ..types import NAME_MAX, BackoffState, QueueControl, RateLimit, check_name
from ._base import (
    DURATION,
    console,
    error_console,
    fail,
    handle_errors,
    print_json,
)
from ._databases import change_note, connect_change, database_option
from ._read import budgets, jobs, policies, queues
from ._render import backoff_target, backoff_until_text, budget_line, control_line


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
        console.print(literal(control_line(control)), soft_wrap=True)
    _say_owners([_owner_line(control.queue, owner)], as_json)


def _queue_owner(conn: psycopg.Connection[Any], queue: str) -> str | None:
    return _ops.execute(conn, _ops.queue_owners([queue])).get(queue)


def _job_owner_lines(conn: psycopg.Connection[Any], ids: list[int]) -> list[str]:
    return [
        f"  {count} in queue {queue}, "
        + ("owned by no namespace" if namespace is None else f"owned by namespace {namespace}")
        for queue, namespace, count in _ops.execute(conn, _ops.job_owners(ids))
    ]


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
@database_option(change=True)
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
    with connect_change(ctx) as conn:
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
@database_option(change=True)
@click.pass_context
@handle_errors
def policies_clear_override(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Back to the synced policy for QUEUE."""
    with connect_change(ctx) as conn:
        control = Queue(conn).clear_override(queue)
        owner = _queue_owner(conn, queue)
    _show_control(control, as_json, owner)


@queues.command("pause")
@click.argument("queue")
@click.option("--force", is_flag=True,
              help="Pause a queue that has no policy, no control and no job yet (creates it).")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def queues_pause(ctx: click.Context, queue: str, force: bool, as_json: bool) -> None:
    """Admit nothing from QUEUE (running jobs finish) until it is resumed. A queue that has no
    policy, no control and no job is refused (a typo would create it) unless --force."""
    with connect_change(ctx) as conn:
        if not force and not _ops.execute(conn, _incident.queue_known(queue)):
            fail(f"no queue {queue!r}{change_note(ctx)}: it has no policy, no control and no "
                 "job (--force pauses it anyway)")
        control = Queue(conn).pause(queue)
        owner = _queue_owner(conn, queue)
    _show_control(control, as_json, owner)


@queues.command("resume")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def queues_resume(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Admit from QUEUE again; workers wake at once."""
    with connect_change(ctx) as conn:
        control = Queue(conn).resume(queue)
        owner = _queue_owner(conn, queue)
    _show_control(control, as_json, owner)


def _show_cleared(cleared: list[BackoffState], nothing: str, as_json: bool) -> None:
    """What an operator's clear-backoff ended, one line each ("cleared: queue 'q' backed off
    until 15:02:03 by job 4812"), or that no backoff was in force on `nothing` (not an error:
    the backoff may have just ended by itself). With --json: {"cleared": [BackoffState]}."""
    if as_json:
        print_json({"cleared": [dataclasses.asdict(b) for b in cleared]})
        return
    now = datetime.now(UTC)
    for backoff in cleared:
        # The statement also deletes a backoff that had ended and that housekeeping had not
        # yet deleted: said so, not passed off as an early end.
        over = " (it had already ended)" if backoff.until <= now else ""
        console.print(literal(f"cleared: {backoff_target(backoff)} "
                              f"{backoff_until_text(backoff)}{over}"), soft_wrap=True)
    if not cleared:
        console.print(literal(f"no backoff in force on {nothing}"), soft_wrap=True)


@queues.command("clear-backoff")
@click.argument("queue")
@click.option("--key", default=None, help="Only this concurrency key's backoff.")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def queues_clear_backoff(ctx: click.Context, queue: str, key: str | None,
                         as_json: bool) -> None:
    """End QUEUE's backoff and its keys' now (only key K's with --key); its workers wake at
    once. Prints what was cleared (exit 0 also when none was in force)."""
    with connect_change(ctx) as conn:
        cleared = Queue(conn).clear_backoff(queue, key=key)
        owner = _queue_owner(conn, queue)
    nothing = f"queue {queue!r}" if key is None else f"key {key!r} of queue {queue!r}"
    _show_cleared(cleared, nothing, as_json)
    _say_owners([_owner_line(queue, owner)], as_json)


@budgets.command("clear-backoff")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def budgets_clear_backoff(ctx: click.Context, name: str, as_json: bool) -> None:
    """End budget NAME's backoff now; the workers of its queues wake at once. Prints what was
    cleared (exit 0 also when none was in force)."""
    with connect_change(ctx) as conn:
        cleared = Queue(conn).clear_budget_backoff(name)
    _show_cleared(cleared, f"budget {name!r}", as_json)


@jobs.command("retry")
@click.argument("job_id", type=int, required=False)
@click.option("--held", "all_held", is_flag=True, help="Release every held job.")
@click.option("--tag", default=None,
              help="Release every held, failed or canceled job with this tag.")
@click.option("--queue", default=None, help="With --held or --tag: only this queue.")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def jobs_retry(ctx: click.Context, job_id: int | None, all_held: bool, tag: str | None,
               queue: str | None, as_json: bool) -> None:
    """Release a held (or failed, or canceled) job, every held job, or every such job of a
    tag, to run again."""
    if [job_id is not None, all_held, tag is not None].count(True) != 1:
        raise click.UsageError("give one of JOB_ID, --held and --tag")
    with connect_change(ctx) as conn:
        if all_held:
            ids = _ops.execute(conn, _ops.held_job_ids(queue, 100_000))
        elif tag is not None:
            ids = _ops.execute(conn, _ops.tagged_job_ids(tag, _ops.RETRYABLE, queue))
        else:
            ids = [job_id] if job_id is not None else []
        released = Queue(conn).retry_jobs(ids)
        owners = _job_owner_lines(conn, released)
    if as_json:
        print_json({"released": released})
    # The exit code does not depend on the output format: a job that was not released is an error.
    if job_id is not None and not released:
        raise WorkhorseError(f"job {job_id} is not held, failed or canceled (or does not "
                             f"exist){change_note(ctx)}")
    if as_json:
        _say_owners(owners, as_json)
        return
    console.print(f"released {len(released)} job(s)" + (f": {released}" if released else ""))
    _say_owners(owners, as_json)


@jobs.command("cancel")
@click.argument("job_ids", type=int, nargs=-1, required=False)
@click.option("--tag", default=None, help="Cancel every unfinished job with this tag.")
@click.option("--queue", default=None, help="With --tag: only this queue.")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def jobs_cancel(ctx: click.Context, job_ids: tuple[int, ...], tag: str | None,
                queue: str | None, as_json: bool) -> None:
    """Cancel jobs that have not finished (a running one is asked to stop, and ends canceled
    when its handler returns): these JOB_IDS, and every such job of --tag."""
    if not job_ids and tag is None:
        raise click.UsageError("give JOB_IDS or --tag")
    if queue is not None and tag is None:
        raise click.UsageError("--queue goes with --tag")
    with connect_change(ctx) as conn:
        ids = list(job_ids)
        if tag is not None:
            ids += _ops.execute(conn, _ops.tagged_job_ids(tag, _ops.CANCELABLE, queue))
        canceled = Queue(conn).cancel_jobs(ids)
        owners = _job_owner_lines(conn, canceled)
    if as_json:
        print_json({"canceled": canceled})
    if not canceled:
        raise WorkhorseError("no job was canceled: already finished, or no such job"
                             + change_note(ctx))
    if not as_json:
        console.print(f"canceled {len(canceled)} job(s): {canceled}")
    _say_owners(owners, as_json)


@jobs.command("prune")
@click.option("--older-than", type=DURATION, default=None,
              help="Finished this long ago (default: those whose retention expired).")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(["succeeded", "failed", "held", "canceled", "expired"]),
              help="With --older-than: only these (default succeeded, failed, canceled, "
                   "expired).")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def jobs_prune(ctx: click.Context, older_than: float | None, statuses: tuple[str, ...],
               as_json: bool) -> None:
    """Delete finished jobs now, in batches, and print how many went."""
    if statuses and older_than is None:
        raise click.UsageError("--status needs --older-than")
    deleted = 0
    busy_since: float | None = None
    with connect_change(ctx) as conn:
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


@budgets.command("override")
@click.argument("name")
@click.option("--max-active", type=click.IntRange(1, 1_000_000), default=None)
@click.option("--rate-limit", default=None, metavar="N/P", help="e.g. 3000/m, 5/10s.")
@click.option("--rate-burst", type=click.IntRange(1, 1_000_000), default=None,
              help="At most B units in any P*B/N (beside --rate-limit or the declared rate).")
@click.option("--for", "for_", type=DURATION, default=None,
              help="Expire after this long (default: until cleared).")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
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
    with connect_change(ctx) as conn:
        override = Queue(conn).override_budget(name, max_active=max_active, rate_limit=rate,
                                               rate_burst=rate_burst, expires_in=for_)
    if as_json:
        print_json(override)
    else:
        console.print(literal(budget_line(name, override)), soft_wrap=True)


@budgets.command("clear-override")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@database_option(change=True)
@click.pass_context
@handle_errors
def budgets_clear_override(ctx: click.Context, name: str, as_json: bool) -> None:
    """Back to the declared limits for budget NAME."""
    with connect_change(ctx) as conn:
        Queue(conn).clear_budget_override(name)
    if as_json:
        print_json(None)
    else:
        console.print(literal(budget_line(name, None)), soft_wrap=True)


@jobs.command("signal")
@click.argument("job_id", type=int)
@click.argument("name")
@click.option("--payload", "payload_text", default=None, metavar="JSON",
              help="The signal's payload, a JSON document (default: null).")
@click.option("--key", default=None,
              help="An idempotency key: a second signal of the same job, name and key is "
                   "ignored (printed as a duplicate).")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"job": ID, "signal": NAME, "delivered": true|false}.')
@database_option(change=True)
@click.pass_context
@handle_errors
def jobs_signal(ctx: click.Context, job_id: int, name: str, payload_text: str | None,
                key: str | None, as_json: bool) -> None:
    """Send signal NAME to job JOB_ID (docs/design.md "Signals"): a step waiting for it takes
    it, and the job, if suspended waiting for it, is ready again. Exit 1 for a job that does
    not exist or has finished, and for a payload that is not JSON."""
    # Names and keys PostgreSQL cannot store (NUL, lone surrogates) are refused here, in one
    # line, before anything is sent; the API checks their length.
    for what, value in (("a signal's name", name), ("a signal's key", key)):
        if value:
            check_name(what, value[:NAME_MAX])
    payload = None
    if payload_text is not None:
        try:
            payload = json.loads(payload_text)
        except ValueError as exc:
            raise InvalidOptionsError(f"--payload is not JSON: {exc}") from None
        except RecursionError:
            raise InvalidOptionsError("--payload is nested too deeply to be JSON") from None
    with connect_change(ctx) as conn:
        delivered = Queue(conn).signal(job_id, name, payload, key)
    if as_json:
        print_json({"job": job_id, "signal": name, "delivered": delivered})
        return
    if delivered:
        console.print(literal(f"delivered: signal {name!r} to job {job_id}"), soft_wrap=True)
    else:
        console.print(literal(f"duplicate: job {job_id} already has signal {name!r} with key "
                              f"{key!r}; nothing sent"), soft_wrap=True)
