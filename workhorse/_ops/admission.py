"""What the worker's claim sends and what it sends back: claims, and each job's outcome (success,
failure, snooze, backoff, release), with its progress."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import _sql
from .._driver import Operation, encode_json
from ..errors import (
    InvalidOptionsError,
    StaleLeaseError,
)
from ..types import (
    INT_MAX,
    MAX_DELAY_SECONDS,
    BackoffState,
    ClaimedJob,
    JobStatus,
    Progress,
    check_count,
    check_id,
    check_name,
    shown,
)
from .jobs import DEFAULT_RETENTION_JSON

# The feature level of this package's SQL API: its claim admits nothing from a queue above it.
FEATURE_LEVEL = 2


def lease_seconds(lease: object) -> float:
    """A lease must be a finite, positive number of seconds: a NULL or NaN lease would leave an
    active job that never expires and that no count of active jobs sees."""
    if isinstance(lease, bool) or not isinstance(lease, int | float):
        raise InvalidOptionsError(f"lease must be a number of seconds, got {lease!r}")
    if not 0 < lease <= MAX_DELAY_SECONDS:
        raise InvalidOptionsError(f"lease must be > 0 seconds and finite, got {lease!r}")
    return float(lease)


@dataclass(frozen=True, slots=True)
class ClaimReply:
    """What one claim call said: the jobs claimed; the seconds until a rate limit allows the
    next start, when one cut the claim short (else None); the (id, fence) pairs of the
    successes that rode on it, each with its new status (stale ones left out); and whether the
    queue's max_active left no room (`full`)."""

    jobs: list[ClaimedJob]
    next_start: float | None
    accepted: dict[tuple[int, int], JobStatus]
    full: bool = False


def claim_as(
    queue: str, limit: int, lease: float,
    successes: Sequence[tuple[int, int, str, str]] = (),
    tasks: Collection[str] | None = None,
    *,
    expect_full: bool = False,
    own_transaction: bool = False,
) -> Operation[ClaimReply]:
    """Record `successes` (of jobs of `queue`, encoded as for `complete_encoded`) and claim up
    to `limit` jobs from `queue` in one statement, so that the capacity they free is reused at
    once. With `tasks` (the names the worker's app declares), a job of any other task is passed
    over, never claimed: another app's worker may serve the same queue. With `expect_full` (the
    caller's last claim of the queue said `full`), a claim with no successes first looks,
    without the queue's admission lock, whether the queue is still full, and returns if so.

    With `own_transaction` (the caller's connection is in autocommit, so the claim is a
    transaction of its own), a claim that queued for the queue's admission lock commits
    without waiting for its WAL flush, which would otherwise hold the lock (the claim's "The
    commit after the lock"), and a commit barrier follows it: either way what this returns is
    on disk, so a job it names may start and a success it accepted is recorded."""
    _check_claim(queue, limit)
    lease = lease_seconds(lease)
    known = None if tasks is None else sorted(set(tasks))
    if successes:
        rows = yield _sql.statement("complete_and_claim"), (
            queue, limit, lease, *_success_columns(successes), known, own_transaction)
    else:
        rows = yield _sql.statement("claim"), (
            queue, limit, lease, known, expect_full, own_transaction)
    reply = _claimed(rows)
    if reply.unflushed and (successes or reply.jobs):
        # (A claim that took nothing and recorded nothing leaves nothing to act on.)
        yield _sql.statement("commit_barrier"), ()
    # The claim names only the successes that did not end `succeeded`.
    accepted = {(job_id, fence): JobStatus.SUCCEEDED for job_id, fence, _, _ in successes}
    for key, status in reply.exceptions.items():
        if status is None:
            del accepted[key]
        else:
            accepted[key] = status
    return ClaimReply(reply.jobs, reply.next_start, accepted, reply.full)


def claim_batch(
    queue: str, limit: int, lease: float, tasks: Collection[str] | None = None
) -> Operation[tuple[list[ClaimedJob], float | None]]:
    """Up to `limit` jobs from `queue` (of `tasks` only, when given), and, when a rate limit cut
    the claim short, the seconds until its next start is allowed (else None)."""
    reply = yield from claim_as(queue, limit, lease, tasks=tasks)
    return reply.jobs, reply.next_start


def claim(
    queue: str, limit: int, lease: float, tasks: Collection[str] | None = None
) -> Operation[list[ClaimedJob]]:
    jobs, _ = yield from claim_batch(queue, limit, lease, tasks)
    return jobs


def complete_and_claim(
    queue: str, limit: int, lease: float, successes: Sequence[tuple[int, int, str, str]],
    tasks: Collection[str] | None = None,
) -> Operation[tuple[list[ClaimedJob], float | None, dict[tuple[int, int], JobStatus]]]:
    """`claim_as`, as a tuple: the jobs, the rate limit's next start (as `claim_batch`), and the
    (id, fence) pairs accepted with their new status."""
    reply = yield from claim_as(queue, limit, lease, successes, tasks)
    return reply.jobs, reply.next_start, reply.accepted


def _check_claim(queue: str, limit: int) -> None:
    check_name("queue", queue)
    check_count(limit, "limit", -INT_MAX - 1)  # an integer; none claims nothing


@dataclass(slots=True)
class _ClaimRows:
    jobs: list[ClaimedJob]
    next_start: float | None
    exceptions: dict[tuple[int, int], JobStatus | None]
    full: bool = False
    unflushed: bool = False  # committed asynchronously: the commit barrier comes next


def _claimed(rows: list[Any]) -> _ClaimRows:
    """Claim rows: jobs, and the markers (rows with no id): the rate limit's next start, or a
    status: `feature_level` says that the queue needs a newer claim than this package's (it
    admitted nothing, and the worker is told once per queue), `full` that its max_active left no
    room, `unflushed` that the claim committed asynchronously. Rows with an id and no task are the
    successes that did not end succeeded: (id, fence) -> status (None: stale)."""
    out = _ClaimRows([], None, {})
    for row in rows:
        if row[0] is None:  # no job: a marker
            if row[15] == "feature_level":
                _warn_feature_level(row[2], row[6])
            elif row[15] == "full":
                out.full = True
            elif row[15] == "unflushed":
                out.unflushed = True
            else:  # the rate limit's next allowed start
                out.next_start = float(row[14])
        elif row[1] is None:  # a success that was not accepted as one
            out.exceptions[(row[0], row[8])] = (
                None if row[15] == "stale" else JobStatus.of_row(row[15]))
        else:
            out.jobs.append(ClaimedJob(
                id=row[0], task=row[1], queue=row[2], concurrency_key=row[3] or None,
                priority=row[4], payload=row[5], attempts=row[6], max_attempts=row[7],
                fence=row[8], lease_until=row[9], enqueued_at=row[10], run_at=row[11],
                meta=row[12] or {}, started_at=row[13],
                scheduled_for=row[16] if len(row) > 16 else None,
            ))
    return out


# Queues already warned about in this process: the claim says so at every call.
_too_new_warned: set[str] = set()


def _warn_feature_level(queue: str, level: int) -> None:
    if queue not in _too_new_warned:
        _too_new_warned.add(queue)
        logging.getLogger("workhorse.worker").warning(
            "queue %r uses features of level %s, newer than this workhorse (%s) knows: this "
            "worker claims nothing there; upgrade it (invariant 5)", queue, level, FEATURE_LEVEL)


def _success_columns(outcomes: Sequence[tuple[int, int, str, str]]) -> tuple[Any, ...]:
    """The complete and claim statements' success arrays: ids, fences, results, and each distinct
    retention document once, with per-job pointers only when there are several."""
    documents: dict[str, int] = {}
    pointers = [documents.setdefault(retention, len(documents) + 1)
                for _, _, _, retention in outcomes]
    return (
        [job_id for job_id, _, _, _ in outcomes],
        [fence for _, fence, _, _ in outcomes],
        [result for _, _, result, _ in outcomes],
        pointers if len(documents) > 1 else None,
        list(documents),
    )


def release(
    jobs: Sequence[tuple[int, int]], retention: str = DEFAULT_RETENTION_JSON
) -> Operation[dict[int, JobStatus]]:
    """Give back claimed jobs `(id, fence)` that never started: ready again, their attempt not
    used (canceled when a cancel was requested). Returns the id -> new status of those released;
    a stale pair is left out."""
    if not jobs:
        return {}
    rows = yield _sql.statement("release"), (
        [job_id for job_id, _ in jobs], [fence for _, fence in jobs], retention)
    return {row[0]: JobStatus.of_row(row[1]) for row in rows}


def complete_encoded(
    outcomes: Sequence[tuple[int, int, str, str]],
) -> Operation[dict[tuple[int, int], JobStatus]]:
    """Record successes `(id, fence, result, retention)`, result and retention already JSON
    text; returns the (id, fence) pairs accepted with the status each ended in (succeeded, or
    canceled when a cancel was requested). A pair, not an id: one batch may carry a stale
    outcome and a fresh one of the same job, and only the fresh one was accepted."""
    if not outcomes:
        return {}
    rows = yield _sql.statement("complete"), _success_columns(outcomes)
    return {(row[0], row[1]): JobStatus.of_row(row[2]) for row in rows}


def complete(outcomes: Sequence[tuple[int, int, Any]]) -> Operation[set[int]]:
    """Record successes `(job_id, fence, result)` with the default retention; returns the ids
    accepted."""
    encoded = [(check_id(job_id), check_id(fence, "a fence"), encode_json(result, "result"),
                DEFAULT_RETENTION_JSON) for job_id, fence, result in outcomes]
    accepted = yield from complete_encoded(encoded)
    return {job_id for job_id, _ in accepted}


def fail(
    job_id: int, fence: int, error: dict[str, Any], retry_at: datetime | None,
    retention: str = DEFAULT_RETENTION_JSON,
) -> Operation[JobStatus]:
    if retry_at is not None and not isinstance(retry_at, datetime):
        raise InvalidOptionsError(f"retry_at must be a datetime, got {shown(retry_at)}")
    rows = yield _sql.statement("fail"), (
        check_id(job_id), check_id(fence, "a fence"), encode_json(error, "error"), retry_at,
        retention)
    status = rows[0][0] if rows else None
    if status is None:
        raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the failure was not recorded")
    return JobStatus.of_row(status)


def snooze(
    job_id: int, fence: int, delay: float, retention: str = DEFAULT_RETENTION_JSON
) -> Operation[JobStatus]:
    """The handler raised Snooze(delay): the job waits, scheduled, without using an attempt (or
    ends canceled when a cancel was requested). StaleLeaseError when the fence is stale."""
    rows = yield _sql.statement("snooze"), (job_id, fence, float(delay), retention)
    status = rows[0][0] if rows else None
    if status is None:
        raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the snooze was not recorded")
    return JobStatus.of_row(status)


def backoff(
    job_id: int, fence: int, seconds: float, scope: str | None, budget: str | None,
    release: bool, retention: str = DEFAULT_RETENTION_JSON,
) -> Operation[tuple[JobStatus | None, BackoffState | None]]:
    """A handler backed off its budget, key or queue (docs/design.md "Back-pressure"): the
    backoff in force on the target (a later one already there stays), and with `release` (it
    raised Backoff) the job back to `ready` with its attempt given back (canceled when a cancel
    was requested). Returns the job's status and the backoff; (None, None) when the fence is
    stale (nothing written). InvalidOptionsError for a scope the job does not have."""
    rows = yield _sql.statement("backoff"), (
        check_id(job_id), check_id(fence, "a fence"), float(seconds), scope, budget, release,
        retention)
    if not rows:
        return None, None
    status, scope_, name, key, until = rows[0]
    state = None if scope_ is None else BackoffState(scope_, name, key, until, job_id)
    return (None if status is None else JobStatus.of_row(status)), state


def _progress_number(value: int | float | None) -> str | None:
    """A progress number as the text of a JSON number (write_progress casts it to numeric)."""
    if value is None:
        return None
    return str(value) if isinstance(value, int) else repr(float(value))


def write_progress(
    entries: Sequence[tuple[int, int, int, int | float, int | float | None, str | None]],
) -> Operation[set[int]]:
    """Write `(job_id, fence, seq, done, total, message)` progress values (checked by
    `check_progress` when the handler reported them), each under its job's fence; returns the
    ids written (a stale fence or an expired lease writes nothing)."""
    if not entries:
        return set()
    rows = yield _sql.statement("write_progress"), (
        [check_id(e[0]) for e in entries],
        [check_id(e[1], "a fence") for e in entries],
        [int(e[2]) for e in entries],
        [_progress_number(e[3]) for e in entries],
        [_progress_number(e[4]) for e in entries],
        [e[5] for e in entries],
    )
    return {row[0] for row in rows}


def job_progress(job_ids: Sequence[int]) -> Operation[dict[int, Progress]]:
    """The progress of each job's current (or last) attempt, for the ids that have one."""
    ids = [check_id(job_id) for job_id in job_ids]
    if not ids:
        return {}
    rows = yield _sql.statement("job_progress"), (ids,)
    found = {}
    for job_id, document, at in rows:
        progress = Progress.from_stored(document, at)
        if progress is not None:
            found[job_id] = progress
    return found


