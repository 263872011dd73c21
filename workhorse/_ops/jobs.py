"""Jobs: reading them (one, a page, attempts, progress), and the operator's changes to them
(retry, cancel, make due, prune); the row mapping every statement that selects a job shares."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from .. import _sql
from .._driver import Operation
from ..errors import (
    InvalidOptionsError,
)
from ..types import (
    MAX_DELAY_SECONDS,
    Attempt,
    Job,
    JobPage,
    JobStatus,
    Progress,
    check_count,
    check_id,
    check_name,
    check_optional_name,
    check_tags,
    retention_seconds,
    shown,
)

# How many rows a health read samples at most (ready jobs per queue, per budget, per key).
HEALTH_SAMPLE = 1000


def unless_one(value: int) -> int | None:
    """A cost, rate cost or weight as the enqueue function takes it: NULL means 1, so that a
    batch of default jobs sends one NULL array (and raises no feature level)."""
    return None if value == 1 else value


def or_null(column: list[Any]) -> list[Any] | None:
    """A column of NULLs goes as one NULL array (the enqueue's multi-argument unnest pads it with
    NULLs), so that the client does not dump a NULL for every job."""
    return column if any(value is not None for value in column) else None


def tags_json(tags: Sequence[str]) -> str | None:
    """A job's tags as the enqueue functions take them: a JSON array, or None for none.

    >>> tags_json(("order-1234",)), tags_json(())
    ('["order-1234"]', None)
    """
    return json.dumps(list(tags), ensure_ascii=False) if tags else None


def job_from_row(row: tuple[Any, ...]) -> Job:
    """The row mapping of every statement that selects a job's columns (list_jobs.sql's), the
    dashboard's own statements too."""
    (id_, task, queue, ckey, priority, payload, status, attempts, max_attempts, result, error,
     run_at, enqueued_at, started_at, finished_at, on_failure, fence, lease_until, meta,
     cancel_requested, idempotency_key, expires_at, *keys) = row
    return Job(
        id=id_, task=task, queue=queue, concurrency_key=ckey, priority=priority, payload=payload,
        status=JobStatus.of_row(status), attempts=attempts, max_attempts=max_attempts,
        result=result, error=error, run_at=run_at, enqueued_at=enqueued_at, started_at=started_at,
        finished_at=finished_at, on_failure=on_failure, fence=fence, lease_until=lease_until,
        meta=meta or {}, cancel_requested=bool(cancel_requested),
        idempotency_key=idempotency_key, expires_at=expires_at,
        # The list statements of 0.2.0 (frozen) end at expires_at; get_job and the list and
        # dashboard statements of 0.3.0 read the job key and the costs (docs/design.md "Fair share
        # and job cost") after it, and only get_job the progress.
        job_key=keys[0] if keys else None,
        cost=keys[1] if len(keys) > 1 else 1,
        rate_cost=keys[2] if len(keys) > 2 else 1,
        weight=keys[3] if len(keys) > 3 else 1,
        progress=Progress.from_stored(keys[4], keys[5]) if len(keys) > 5 else None,
        # get_job and the workflow statements read the workflow columns too.
        workflow_id=keys[6] if len(keys) > 6 else None,
        depends_on=list(keys[7] or []) if len(keys) > 7 else [],
        # get_job and workflow_jobs read the budget too (docs/design.md "Named budgets"); the list
        # statements fill it in with job_extras (with_progress).
        budget=keys[8] if len(keys) > 8 else None,
        # And the tags (docs/design.md "Tags"), which job_extras fills in for
        # the list statements.
        tags=list(keys[9] or []) if len(keys) > 9 else [],
        # And the redrives (docs/design.md "Dead letters").
        redriven_at=keys[10] if len(keys) > 10 else None,
        redrive_count=keys[11] if len(keys) > 11 else 0,
        # And the bounds (docs/design.md "Deadlines").
        deadline=keys[12] if len(keys) > 12 else None,
        start_by=keys[13] if len(keys) > 13 else None,
        # And the suspension and the parent (docs/design.md "Durable execution").
        suspended_on=keys[14] if len(keys) > 14 else None,
        wake_at=keys[15] if len(keys) > 15 else None,
        parent_id=keys[16] if len(keys) > 16 else None,
    )


def _job_id(job_id: object) -> int:
    return check_id(job_id)


def get_job(job_id: int) -> Operation[Job | None]:
    """The job, live or, when the live table lacks it, moved to history."""
    job_id = _job_id(job_id)
    rows = yield _sql.statement("get_job"), (job_id,)
    if rows:
        return job_from_row(rows[0])
    moved = yield from history_jobs([job_id])
    return moved[job_id][0] if moved else None


def history_jobs(ids: list[int]) -> Operation[dict[int, tuple[Job, Any]]]:
    """Of these ids, the jobs moved to history (docs/design.md "History"), each with its
    attempt history; read only for ids the live table lacks, since it plans every day of
    history."""
    rows = yield _sql.statement("history_jobs"), (ids,)
    return {row[0]: (job_from_row(row[:-1]), row[-1]) for row in rows}


def _moment(value: Any) -> datetime | None:
    """A timestamp of attempt_history (JSON text, ISO 8601 with its offset), or None."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def attempts_from(history: Any, status: str, attempts: int, started_at: datetime | None,
                  finished_at: datetime | None) -> list[Attempt]:
    """A job's attempts, oldest first: those attempt_history keeps (every attempt that did not
    succeed, the last 20), then its success, which is the row itself (a success is not stored
    twice). Entries of a shape this version does not know are shown as far as they go."""
    found = []
    for entry in history if isinstance(history, list) else []:
        if not isinstance(entry, dict):
            continue
        number = entry.get("attempt")
        error = entry.get("error")
        redrive = entry.get("redrive")
        found.append(Attempt(
            attempt=number if isinstance(number, int) else 0,
            started_at=_moment(entry.get("started_at")),
            ended_at=_moment(entry.get("ended_at")),
            outcome=str(entry.get("outcome")),
            error=error if isinstance(error, dict) else None,
            redrive=redrive if isinstance(redrive, dict) else None,
        ))
    if status == JobStatus.SUCCEEDED.value:
        found.append(Attempt(attempts, started_at, finished_at, "succeeded", None))
    return found


def job_attempts(job_id: int) -> Operation[list[Attempt] | None]:
    """`JobHandle.attempts()`: the job's attempts, oldest first, or None when there is no such
    job."""
    job_id = _job_id(job_id)
    rows = yield _sql.statement("job_attempts"), (job_id,)
    if rows:
        history, status, attempts, started_at, finished_at = rows[0]
        return attempts_from(history, status, attempts, started_at, finished_at)
    moved = yield from history_jobs([job_id])
    if not moved:
        return None
    job, history = moved[job_id]
    return attempts_from(history, job.status.value, job.attempts, job.started_at,
                         job.finished_at)


def job_own_error(job: Job, attempts: Sequence[Attempt]) -> dict[str, Any] | None:
    """The error to show as the job's own: its last failure, while the job rests because of it
    (failed, held, or canceled by that failure). A succeeded, waiting or running job shows its
    earlier attempts' errors under its attempts, never as its own (docs/design.md "The dashboard in
    an incident"); `Job.error` keeps its meaning, the last failure."""
    if job.error is None:
        return None
    if job.status in (JobStatus.FAILED, JobStatus.HELD):
        return job.error
    if job.status == JobStatus.CANCELED and attempts and attempts[-1].error == job.error:
        return job.error
    return None


def _list_filters(status: str | None, limit: object, **names: str | None) -> str | None:
    """A job list's status (as stored), limit and name filters, checked: InvalidOptionsError
    otherwise (a filter no stored name can equal is an error, not an empty list)."""
    for what, value in names.items():
        check_optional_name(what, value)
    if status is not None:
        if not isinstance(status, str):
            raise InvalidOptionsError(f"a job status is a string, got {status!r}")
        try:
            status = JobStatus(status).value
        except ValueError:
            raise InvalidOptionsError(f"unknown job status {shown(status)}") from None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidOptionsError(f"limit must be an int in [1, 10000], got {limit!r}")
    return status


def list_jobs(
    *,
    queue: str | None = None,
    status: str | None = None,
    key: str | None = None,
    task: str | None = None,
    tag: str | None = None,
    limit: int = 50,
) -> Operation[list[Job]]:
    """The newest jobs first, filtered (None means any), at most `limit` (1-10,000)."""
    status = _list_filters(status, limit, queue=queue, key=key, task=task)
    params = {"queue": queue, "status": status, "key": key, "task": task, "limit": limit}
    # Both read each job whole, live or in history (docs/design.md "History").
    if tag is None:
        rows = yield _sql.statement("list_jobs"), params
    else:
        rows = yield _sql.statement("list_jobs_by_tag"), {**params, "tag": check_tag(tag)}
    return [job_from_row(row) for row in rows]


def with_progress(jobs: list[Job]) -> Operation[list[Job]]:
    """The jobs with their progress, budget and tags filled in, in one more statement (the list
    statements of 0.2.0 are frozen and read none of them)."""
    if not jobs:
        return jobs
    rows = yield _sql.statement("job_extras"), ([job.id for job in jobs],)
    found: dict[int, dict[str, Any]] = {}
    for (job_id, document, at, budget, tags, redriven_at, redrive_count, deadline, start_by,
         suspended_on, wake_at, parent_id) in rows:
        changes: dict[str, Any] = {}
        progress = Progress.from_stored(document, at)
        if progress is not None:
            changes["progress"] = progress
        if budget is not None:
            changes["budget"] = budget
        if tags:
            changes["tags"] = list(tags)
        if redriven_at is not None:
            changes["redriven_at"] = redriven_at
            changes["redrive_count"] = redrive_count
        if deadline is not None or start_by is not None:
            changes["deadline"] = deadline
            changes["start_by"] = start_by
        if suspended_on is not None:
            changes["suspended_on"] = suspended_on
            changes["wake_at"] = wake_at
        if parent_id is not None:
            changes["parent_id"] = parent_id
        if changes:
            found[job_id] = changes
    if not found:
        return jobs
    return [replace(job, **found[job.id]) if job.id in found else job
            for job in jobs]


# How many job ids the dashboard's job list reads in the primary key at most, below the page's
# start, when succeeded jobs may match: the bound on its cost with a filter that no index serves
# (a key, a task) over a big history, so that such a page stays fast however long the history.
BROWSE_WINDOW = 100_000


def browse_jobs(
    *,
    queue: str | None = None,
    status: str | None = None,
    key: str | None = None,
    task: str | None = None,
    before: int | None = None,
    limit: int = 100,
    window: int | None = None,
) -> Operation[JobPage]:
    """The dashboard's job list: the newest matches with an id below `before` (None: any), at most
    `limit`, each read bounded whatever the filters (see JobPage): `window` ids (default
    BROWSE_WINDOW) of the primary key, and the rows of the indexed statuses. Unlike `list_jobs`,
    exact only for the statuses with an index; that is what keeps a page fast on a long history."""
    status = _list_filters(status, limit, queue=queue, key=key, task=task)
    if before is not None:
        check_id(before, "before (a job id)")
    window = BROWSE_WINDOW if window is None else window
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidOptionsError(f"window must be a positive int, got {window!r}")
    bounds = yield _sql.statement("job_id_bounds"), ()
    oldest, newest = bounds[0]
    if newest is None:
        return JobPage([])
    hi = newest + 1 if before is None else min(before, newest + 1)
    lo = max(hi - window, oldest)
    params = {"queue": queue, "status": status, "key": key, "task": task, "limit": limit,
              "lo": lo, "hi": hi}
    rows = yield _sql.statement("browse_jobs_recent"), params
    jobs = [job_from_row(row) for row in rows]
    if len(jobs) == limit or lo <= oldest:
        return JobPage((yield from with_progress(jobs)))
    if status != JobStatus.SUCCEEDED:
        older = yield _sql.statement("browse_jobs_older"), {
            **params, "limit": limit - len(jobs)}
        jobs += [job_from_row(row) for row in older]
    return JobPage((yield from with_progress(jobs)),
                   unsearched_below=lo if status in (None, JobStatus.SUCCEEDED) else None)


def held_job_ids(queue: str | None, limit: int) -> Operation[list[int]]:
    check_optional_name("queue", queue)
    check_count(limit, "limit")
    rows = yield _sql.statement("held_job_ids"), (queue, queue, limit)
    return [row[0] for row in rows]


def job_id_list(ids: Iterable[int]) -> list[int]:
    if isinstance(ids, int | str | bytes) or ids is None:
        raise InvalidOptionsError(f"job ids must be a list of ints, got {shown(ids)}")
    try:
        return [check_id(i) for i in ids]
    except TypeError:
        raise InvalidOptionsError(f"job ids must be a list of ints, got {shown(ids)}") from None


def retention_json(retention: dict[str, float | None] | None = None) -> str:
    """What the SQL functions take: status -> seconds kept; a status left out is kept for ever."""
    seconds = retention_seconds(None) if retention is None else retention
    return json.dumps({status: value for status, value in seconds.items() if value is not None})


DEFAULT_RETENTION_JSON = retention_json()


def queue_owners(queues: Sequence[str]) -> Operation[dict[str, str | None]]:
    """The namespace owning each queue (None: no namespace governs it), for operator actions
    to say whose queue they act on. A namespace owns a queue's policy; it does not guard the
    queue's jobs or controls (see docs/deployment.md, "Security")."""
    for queue in queues:
        check_name("queue", queue)
    rows = yield _sql.statement("queue_owners"), (list(queues),)
    return {row[0]: row[1] for row in rows}


def job_owners(ids: Iterable[int]) -> Operation[list[tuple[str, str | None, int]]]:
    """For these jobs: (queue, owning namespace or None, how many of them), by queue."""
    rows = yield _sql.statement("job_owners"), (job_id_list(ids),)
    return [(row[0], row[1], int(row[2])) for row in rows]


def check_tag(tag: object) -> str:
    """One tag as a filter: a tag no job can have is an error, not an empty list."""
    return check_tags([tag])[0]


# What a retry and a cancel act on (docs/design.md's status table): the statuses a retry or a
# cancel by tag, and the dashboard's bulk actions, look at.
RETRYABLE = ("failed", "held", "canceled")
CANCELABLE = ("waiting", "scheduled", "ready", "active", "held", "suspended")


def tagged_job_ids(tag: str, statuses: Sequence[str], queue: str | None = None
                   ) -> Operation[list[int]]:
    """The ids of the jobs of `tag` in `statuses` (and of `queue`, when given), oldest first."""
    check_optional_name("queue", queue)
    rows = yield _sql.statement("tagged_job_ids"), {
        "tag": check_tag(tag), "statuses": list(statuses), "queue": queue}
    return [row[0] for row in rows]


def retry_jobs(ids: Iterable[int], tag: str | None = None) -> Operation[list[int]]:
    """Release held, failed or canceled jobs (fresh attempts), these and those of `tag`;
    returns the ids released."""
    chosen = job_id_list(ids)
    if tag is not None:
        chosen += yield from tagged_job_ids(tag, RETRYABLE)
    rows = yield _sql.statement("retry_jobs"), (chosen,)
    return [row[0] for row in rows]


def make_due(queues: Sequence[str]) -> Operation[list[int]]:
    """Scheduled jobs of `queues` fall due now (for testing.drain); returns their ids."""
    for queue in queues:
        check_name("queue", queue)
    rows = yield _sql.statement("make_due"), (list(queues),)
    return [row[0] for row in rows]


def cancel_jobs(ids: Iterable[int], retention: str = DEFAULT_RETENTION_JSON,
                tag: str | None = None) -> Operation[list[int]]:
    """Cancel jobs that have not finished (an active one gets a cancel request), these and those
    of `tag`; returns the ids canceled or asked to cancel."""
    chosen = job_id_list(ids)
    if tag is not None:
        chosen += yield from tagged_job_ids(tag, CANCELABLE)
    # The statement that also cancels waiting workflow members (and their dependents).
    rows = yield _sql.statement("cancel_jobs"), (chosen, retention)
    return [row[0] for row in rows]


def resting_jobs(ids: Iterable[int]) -> Operation[set[int]]:
    """Which of these jobs are succeeded, failed, held, canceled or expired."""
    rows = yield _sql.statement("resting_jobs"), (job_id_list(ids),)
    return {row[0] for row in rows}


def listen_results() -> Operation[None]:
    yield _sql.statement("listen_results"), ()


def prune_jobs(
    limit: int = 5000, older_than: float | None = None, statuses: Sequence[str] | None = None
) -> Operation[int]:
    """Delete up to `limit` finished jobs: expired ones, or with `older_than` (seconds) those of
    `statuses` (default succeeded, failed, canceled, expired) that finished that long ago;
    history goes a whole day at a time (docs/design.md "History"). -1: another pruner holds
    the lock."""
    chosen = list(statuses) if statuses else ["succeeded", "failed", "canceled", "expired"]
    for status in chosen:
        if status not in ("succeeded", "failed", "held", "canceled", "expired"):
            raise InvalidOptionsError(
                "only finished jobs are pruned (succeeded, failed, held, canceled, expired), "
                f"got {status!r}")
    check_count(limit, "limit", 0)
    if older_than is not None and (
        isinstance(older_than, bool) or not isinstance(older_than, int | float)
        or not 0 <= older_than <= MAX_DELAY_SECONDS  # also NaN, which compares false
    ):
        raise InvalidOptionsError(f"older_than must be seconds >= 0, got {shown(older_than)}")
    # The prune that skips members of unfinished workflows (docs/design.md "Workflows").
    rows = yield _sql.statement("prune_jobs"), (limit, older_than, chosen)
    return int(rows[0][0])

