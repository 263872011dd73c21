"""The operations: every statement workhorse sends, bound to its parameters and its row mapping.

Each operation is a generator that yields `(statement, params)` and receives the rows. It is
written once and driven on either flavour of connection: `execute(conn, op)` on a
`psycopg.Connection`, `execute_async(aconn, op)` on a `psycopg.AsyncConnection`. `Queue` and
`AsyncQueue` are the public face of most of them; the worker, the CLI and the demo drive the rest
directly. Raw rows never leave this module: operations return the dataclasses of `types.py`.

Nothing here commits: the caller owns the connection and its transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import traceback as traceback_module
from collections.abc import Collection, Generator, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import set_json_loads

from . import _incident, _occurrences, _sql
from .errors import (
    InvalidOptionsError,
    InvalidPolicyError,
    InvalidScheduleError,
    PayloadError,
    SchemaVersionError,
    StaleLeaseError,
    translate,
)
from .types import (
    INT_MAX,
    MAX_BUDGET_DEFINITIONS,
    MAX_DELAY_SECONDS,
    MAX_POLICY_DEFINITIONS,
    UNIQUE_STATES_DEFAULT,
    Attempt,
    Budget,
    BudgetDefinition,
    BudgetHealth,
    BudgetOverride,
    ClaimedJob,
    ConcurrencyPolicy,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    FiringPass,
    Job,
    JobPage,
    JobStatus,
    KeyPressure,
    KeyShare,
    PolicyHealth,
    PolicyOverride,
    Progress,
    QueueControl,
    QueueHealth,
    QueueSummary,
    RateLimit,
    Schedule,
    ScheduleDefinition,
    SyncReport,
    ThroughputMinute,
    Unique,
    WorkerInfo,
    check_count,
    check_id,
    check_name,
    check_optional_name,
    rate_text,
    retention_seconds,
    shown,
)

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
Step = tuple[Any, Any]
Operation = Generator[Step, Rows, T]

PAYLOAD_LIMIT = 1024 * 1024
# The feature level of this package's SQL API: its claim admits nothing from a queue above it.
FEATURE_LEVEL = 2
HEALTH_SAMPLE = 1000
SCHEMA_LOCK = 0x776F726B686F7273  # "workhors": serializes concurrent schema installs
HOUSEKEEPING_LOCK = 0x776B686B656570  # "wkhkeep": one vacuum of the admission tables at a time
# jsonb cannot store NUL in a string; catch "\u0000" (not an escaped backslash followed by it).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


# ---- JSON ---------------------------------------------------------------------------------------


# One encoder for every value: json.dumps with options builds a new one per call, which costs as
# much as encoding a small payload.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def encode_json(value: Any, what: str = "payload") -> str:
    """JSON text for `value`, or PayloadError: not JSON, NaN/infinity, NUL, or over 1 MiB."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise PayloadError(f"{what} is nested too deeply to be JSON") from None
    if text.isascii():  # the usual case: its size is its length, and it has no surrogate
        size = len(text)
    else:
        try:
            # Also the check for lone surrogates, which are not Unicode text (nor valid in jsonb).
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise PayloadError(f"{what} contains a lone surrogate, not valid Unicode") from None
    if size > PAYLOAD_LIMIT:
        raise PayloadError(f"{what} is {size} bytes encoded; the limit is 1 MiB")
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise PayloadError(f"{what} contains a NUL character, which PostgreSQL cannot store")
    return text


def load_json(data: str | bytes) -> Any:
    """psycopg's json/jsonb loader for the worker's connections: every claimed job has a meta,
    usually `{}`, which needs no parser; and text, not bytes, spares json its encoding detection
    (the two were a tenth of a no-op job's worker time)."""
    if data == b"{}":
        return {}
    return json.loads(data if isinstance(data, str) else str(data, "utf-8"))


def use_fast_json(conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> None:
    set_json_loads(load_json, conn)


# A failure's message and traceback are cut to these many characters (the end of a traceback,
# where the error is, is kept), so that the stored document stays far below the 1 MiB limit.
ERROR_MESSAGE_LIMIT = 16 * 1024
ERROR_TRACEBACK_LIMIT = 64 * 1024


def _clipped(text: str, limit: int, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep_end:
        return f"[{cut} characters cut]...{text[-limit:]}"
    return f"{text[:limit]}...[{cut} characters cut]"


def error_document(exc: BaseException) -> dict[str, Any]:
    """The stored shape of a failure: type, message and traceback, bounded in size. An exception
    whose own `__str__` fails still gives a document."""
    try:
        message = str(exc)
    except Exception as broken:
        message = f"<unprintable {type(exc).__name__}: its __str__ raised {broken!r}>"
    try:
        trace = "".join(traceback_module.format_exception(exc))
    except Exception:
        trace = "".join(traceback_module.format_tb(exc.__traceback__)) + type(exc).__name__
    return {
        "type": type(exc).__name__,
        "message": _clipped(message, ERROR_MESSAGE_LIMIT),
        "traceback": _clipped(trace, ERROR_TRACEBACK_LIMIT, keep_end=True),
    }


# ---- drivers ------------------------------------------------------------------------------------


# `prepare=False` on every statement: psycopg would otherwise prepare a statement on its fifth
# execution, and a server-side prepared statement belongs to one server session, which PgBouncer
# in transaction mode does not give us (the next transaction may run on another server
# connection: "prepared statement ... does not exist", or DuplicatePreparedStatement). Our
# statements are short calls of plpgsql functions, which cache their own plans per session, so
# preparing the outer call saves little (benchmarks: within noise on a direct connection).


def drive(conn: psycopg.Connection[Any], operation: Operation[T]) -> T:
    """Run `operation` on `conn`, statement by statement; psycopg errors pass through."""
    try:
        statement, params = next(operation)
        while True:
            with conn.cursor() as cur:
                cur.execute(statement, params, prepare=False)
                rows = cur.fetchall() if cur.description is not None else []
            statement, params = operation.send(rows)
    except StopIteration as stop:
        return stop.value


async def drive_async(conn: psycopg.AsyncConnection[Any], operation: Operation[T]) -> T:
    try:
        statement, params = next(operation)
        while True:
            async with conn.cursor() as cur:
                await cur.execute(statement, params, prepare=False)
                rows = await cur.fetchall() if cur.description is not None else []
            statement, params = operation.send(rows)
    except StopIteration as stop:
        return stop.value


def raise_translated(exc: psycopg.Error) -> None:
    """Raise the workhorse error our own SQL meant (by its SQLSTATE), if it is one."""
    translated = translate(exc)
    if translated is not None:
        raise translated from None


def execute(conn: psycopg.Connection[Any], operation: Operation[T]) -> T:
    """`drive`, with our SQL's own errors raised as workhorse errors."""
    try:
        return drive(conn, operation)
    except psycopg.Error as exc:
        raise_translated(exc)
        raise


async def execute_async(conn: psycopg.AsyncConnection[Any], operation: Operation[T]) -> T:
    try:
        return await drive_async(conn, operation)
    except psycopg.Error as exc:
        raise_translated(exc)
        raise


def open_transaction() -> Operation[None]:
    yield _sql.statement("open_transaction"), ()


# ---- enqueue and jobs ---------------------------------------------------------------------------


def enqueue_many(
    jobs: Sequence[tuple[str, Any, EnqueueOptions | None]],
    on_failure: Sequence[str] | None = None,
    meta: Sequence[dict[str, Any] | None] | None = None,
    arguments: Sequence[dict[str, Any] | None] | None = None,
) -> Operation[list[int]]:
    """The ids of `jobs`, in order (an existing job's id where a key made it a duplicate)."""
    outcomes = yield from enqueue_outcomes(jobs, on_failure, meta, arguments)
    return [job_id for job_id, _ in outcomes]


def enqueue_outcomes(
    jobs: Sequence[tuple[str, Any, EnqueueOptions | None]],
    on_failure: Sequence[str] | None = None,
    meta: Sequence[dict[str, Any] | None] | None = None,
    arguments: Sequence[dict[str, Any] | None] | None = None,
) -> Operation[list[tuple[int, bool]]]:
    """`(id, duplicate)` for each of `jobs`, in order: duplicate is True when the enqueue
    inserted no row for it (an idempotency hit, a unique duplicate, a job_key update).

    `arguments` (one per job, or None) are a task call's arguments bound through its signature,
    which a `Unique(by=("args",))` compares; without them it compares the payload."""
    for what, per_job in (("on_failure", on_failure), ("meta", meta),
                          ("arguments", arguments)):
        if per_job is not None and (isinstance(per_job, str | dict) or len(per_job) != len(jobs)):
            raise InvalidOptionsError(f"{what} must be a sequence with one entry per job")
    tasks: list[str] = []
    payloads: list[str] = []
    every: list[EnqueueOptions] = []
    names: set[str] = set()  # task names already checked
    unique_keys: list[str | None] = []
    for index, item in enumerate(jobs):
        try:
            task, payload, options = item
        except (TypeError, ValueError):
            raise InvalidOptionsError(
                f"job {index} must be a (task, payload, options) tuple, got {item!r}"
            ) from None
        if not isinstance(task, str) or task not in names:
            check_name("task", task)
            names.add(task)
        if options is None:
            options = _DEFAULT_OPTIONS
        elif not isinstance(options, EnqueueOptions):
            raise InvalidOptionsError(f"options must be EnqueueOptions, got {options!r}")
        tasks.append(task)
        payloads.append(encode_json(payload))
        every.append(options)
        unique_keys.append(None if options.unique is None else unique_digest(
            options, payload, None if arguments is None else arguments[index]))
    if on_failure is None:
        failure_modes = ["fail"] * len(jobs)
    else:
        failure_modes = list(on_failure)
        for failure_mode in failure_modes:
            if failure_mode not in ("fail", "hold"):
                raise InvalidOptionsError(
                    f"on_failure must be 'fail' or 'hold', got {failure_mode!r}")
    metas = ([encode_json(m, "meta") if m else None for m in meta] if meta is not None
             else [None] * len(jobs))
    if not tasks:
        return []
    if any(options.depends_on for options in every):
        # Jobs with dependencies are workflows of one member each: one statement a job, in
        # input order (the others as usual, one a job too, to keep ids in input order).
        outcomes: list[tuple[int, bool]] = []
        for index, options in enumerate(every):
            payload = jobs[index][1]
            if not options.depends_on:
                outcomes += yield from enqueue_outcomes(
                    [(tasks[index], payload, options)], [failure_modes[index]],
                    None if meta is None else [meta[index]],
                    None if arguments is None else [arguments[index]])
                continue
            from .canvas import handle_of

            parents: list[int] = []
            for entry in options.depends_on:
                parents += [p for p in handle_of(entry) if p not in parents]
            member = WorkflowMember(tasks[index], payload, options, failure_modes[index], "none",
                                    tuple((None, p, i, False) for i, p in enumerate(parents)))
            _, ids = yield from enqueue_workflow([member], [0], "one")
            outcomes.append((ids[0], False))
        return outcomes
    first = every[0]
    if all(options is first for options in every):
        # One options object for the batch: each option goes once, not once a job.
        n = len(tasks)
        unique = first.unique
        rows = yield _sql.statement("enqueue_shared_options"), (
            tasks, first.queue, n, first.concurrency_key, n, first.priority, n, payloads,
            first.run_at, n, first.delay_seconds, n, first.max_attempts, n, failure_modes,
            _or_null(metas), first.idempotency_key, n, _or_null(unique_keys),
            None if unique is None else unique.period_seconds, n,
            None if unique is None else _states_text(unique), n,
            first.job_key, n, None if first.job_key is None else first.job_key_mode, n,
            _unless_one(first.cost), n, _unless_one(first.rate_cost), n,
            _unless_one(first.weight), n, first.budget, n)
    else:
        uniques = [o.unique for o in every]
        rows = yield _sql.statement("enqueue"), (
            tasks, [o.queue for o in every], _or_null([o.concurrency_key for o in every]),
            [o.priority for o in every], payloads, _or_null([o.run_at for o in every]),
            _or_null([o.delay_seconds for o in every]), [o.max_attempts for o in every],
            failure_modes, _or_null(metas), _or_null([o.idempotency_key for o in every]),
            _or_null(unique_keys),
            _or_null([None if u is None else u.period_seconds for u in uniques]),
            _or_null([None if u is None else _states_text(u) for u in uniques]),
            _or_null([o.job_key for o in every]),
            _or_null([None if o.job_key is None else o.job_key_mode for o in every]),
            _or_null([_unless_one(o.cost) for o in every]),
            _or_null([_unless_one(o.rate_cost) for o in every]),
            _or_null([_unless_one(o.weight) for o in every]),
            _or_null([o.budget for o in every]))
    return [(row[0], bool(row[1])) for row in rows]


def _states_text(unique: Unique) -> str | None:
    """The states as the enqueue function reads them: comma-separated; None for the default."""
    return None if unique.states == UNIQUE_STATES_DEFAULT else ",".join(unique.states)


# Canonical JSON for a digest: keys sorted, so that {"a": 1, "b": 2} equals {"b": 2, "a": 1}.
_CANONICAL = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False,
                              sort_keys=True)


def unique_digest(options: EnqueueOptions, payload: Any,
                  arguments: dict[str, Any] | None) -> str:
    """The identity of a unique job: a sha256 of its `by` values as canonical JSON. "args" are
    `arguments` (a task call's, bound through its signature) when given, else the payload; with
    `keys`, only the named arguments (or fields of a payload object).

    >>> from workhorse import Unique
    >>> one = EnqueueOptions(unique=Unique(by=("args", "queue")))
    >>> unique_digest(one, {"b": 2, "a": 1}, None) == unique_digest(one, {"a": 1, "b": 2}, None)
    True
    """
    unique = options.unique
    assert unique is not None
    document: dict[str, Any] = {}
    if "args" in unique.by:
        values: Any = payload if arguments is None else arguments
        if unique.keys is not None:
            if not isinstance(values, dict):
                raise InvalidOptionsError(
                    "Unique(keys=...) names fields: without a task's signature, the payload "
                    f"must be a JSON object, got {shown(values)}")
            missing = [key for key in unique.keys if key not in values]
            if missing and arguments is None:
                raise InvalidOptionsError(
                    f"Unique(keys=...): the payload has no field {', '.join(map(repr, missing))}")
            values = {key: values.get(key) for key in unique.keys}
        document["args"] = values
    if "queue" in unique.by:
        document["queue"] = options.queue
    if "concurrency_key" in unique.by:
        document["concurrency_key"] = options.concurrency_key
    try:
        text = _CANONICAL.encode(document)
    except (TypeError, ValueError) as exc:
        raise InvalidOptionsError(f"unique: the compared arguments are not JSON: {exc}") from None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_DEFAULT_OPTIONS = EnqueueOptions()


def _unless_one(value: int) -> int | None:
    """A cost, rate cost or weight as the enqueue function takes it: NULL means 1, so that a
    batch of default jobs sends one NULL array (and raises no feature level)."""
    return None if value == 1 else value


def _or_null(column: list[Any]) -> list[Any] | None:
    """A column of NULLs goes as one NULL array (the enqueue's multi-argument unnest pads it with
    NULLs), so that the client does not dump a NULL for every job."""
    return column if any(value is not None for value in column) else None


def _job_from_row(row: tuple[Any, ...]) -> Job:
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
    )


# The row mapping of every statement that selects a job's columns (list_jobs.sql's), for the
# dashboard's own statements too.
job_from_row = _job_from_row


def _job_id(job_id: object) -> int:
    return check_id(job_id)


def get_job(job_id: int) -> Operation[Job | None]:
    rows = yield _sql.statement("get_job"), (_job_id(job_id),)
    return _job_from_row(rows[0]) if rows else None


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
        found.append(Attempt(
            attempt=number if isinstance(number, int) else 0,
            started_at=_moment(entry.get("started_at")),
            ended_at=_moment(entry.get("ended_at")),
            outcome=str(entry.get("outcome")),
            error=error if isinstance(error, dict) else None,
        ))
    if status == JobStatus.SUCCEEDED.value:
        found.append(Attempt(attempts, started_at, finished_at, "succeeded", None))
    return found


def job_attempts(job_id: int) -> Operation[list[Attempt] | None]:
    """`JobHandle.attempts()`: the job's attempts, oldest first, or None when there is no such
    job."""
    rows = yield _sql.statement("job_attempts"), (_job_id(job_id),)
    if not rows:
        return None
    history, status, attempts, started_at, finished_at = rows[0]
    return attempts_from(history, status, attempts, started_at, finished_at)


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
    limit: int = 50,
) -> Operation[list[Job]]:
    """The newest jobs first, filtered (None means any), at most `limit` (1-10,000)."""
    status = _list_filters(status, limit, queue=queue, key=key, task=task)
    rows = yield _sql.statement("list_jobs"), {
        "queue": queue, "status": status, "key": key, "task": task, "limit": limit,
    }
    return (yield from with_progress([_job_from_row(row) for row in rows]))


def with_progress(jobs: list[Job]) -> Operation[list[Job]]:
    """The jobs with their progress and budget filled in, in one more statement (the list
    statements of 0.2.0 are frozen and read neither)."""
    if not jobs:
        return jobs
    rows = yield _sql.statement("job_extras"), ([job.id for job in jobs],)
    found: dict[int, dict[str, Any]] = {}
    for job_id, document, at, budget in rows:
        changes: dict[str, Any] = {}
        progress = Progress.from_stored(document, at)
        if progress is not None:
            changes["progress"] = progress
        if budget is not None:
            changes["budget"] = budget
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
    jobs = [_job_from_row(row) for row in rows]
    if len(jobs) == limit or lo <= oldest:
        return JobPage((yield from with_progress(jobs)))
    if status != JobStatus.SUCCEEDED:
        older = yield _sql.statement("browse_jobs_older"), {
            **params, "limit": limit - len(jobs)}
        jobs += [_job_from_row(row) for row in older]
    return JobPage((yield from with_progress(jobs)),
                   unsearched_below=lo if status in (None, JobStatus.SUCCEEDED) else None)


def held_job_ids(queue: str | None, limit: int) -> Operation[list[int]]:
    check_optional_name("queue", queue)
    check_count(limit, "limit")
    rows = yield _sql.statement("held_job_ids"), (queue, queue, limit)
    return [row[0] for row in rows]


def _job_ids(ids: Iterable[int]) -> list[int]:
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
    rows = yield _sql.statement("job_owners"), (_job_ids(ids),)
    return [(row[0], row[1], int(row[2])) for row in rows]


def retry_jobs(ids: Iterable[int]) -> Operation[list[int]]:
    """Release held, failed or canceled jobs (fresh attempts); returns the ids released."""
    rows = yield _sql.statement("retry_jobs"), (_job_ids(ids),)
    return [row[0] for row in rows]


def make_due(queues: Sequence[str]) -> Operation[list[int]]:
    """Scheduled jobs of `queues` fall due now (for testing.drain); returns their ids."""
    for queue in queues:
        check_name("queue", queue)
    rows = yield _sql.statement("make_due"), (list(queues),)
    return [row[0] for row in rows]


def cancel_jobs(ids: Iterable[int], retention: str = DEFAULT_RETENTION_JSON
                ) -> Operation[list[int]]:
    """Cancel jobs that have not finished (an active one gets a cancel request); returns the
    ids canceled or asked to cancel."""
    # The statement that also cancels waiting workflow members (and their dependents).
    rows = yield _sql.statement("cancel_jobs"), (_job_ids(ids), retention)
    return [row[0] for row in rows]


def resting_jobs(ids: Iterable[int]) -> Operation[set[int]]:
    """Which of these jobs are succeeded, failed, held or canceled."""
    rows = yield _sql.statement("resting_jobs"), (_job_ids(ids),)
    return {row[0] for row in rows}


def listen_results() -> Operation[None]:
    yield _sql.statement("listen_results"), ()


def prune_jobs(
    limit: int = 5000, older_than: float | None = None, statuses: Sequence[str] | None = None
) -> Operation[int]:
    """Delete up to `limit` finished jobs: expired ones, or with `older_than` (seconds) those of
    `statuses` (default succeeded, failed, canceled) that finished that long ago. -1: another
    pruner holds the lock."""
    chosen = list(statuses) if statuses else ["succeeded", "failed", "canceled"]
    for status in chosen:
        if status not in ("succeeded", "failed", "held", "canceled"):
            raise InvalidOptionsError(
                f"only finished jobs are pruned (succeeded, failed, held, canceled), got {status!r}"
            )
    check_count(limit, "limit", 0)
    if older_than is not None and (
        isinstance(older_than, bool) or not isinstance(older_than, int | float)
        or not 0 <= older_than <= MAX_DELAY_SECONDS  # also NaN, which compares false
    ):
        raise InvalidOptionsError(f"older_than must be seconds >= 0, got {shown(older_than)}")
    # The prune that skips members of unfinished workflows (docs/design.md "Workflows").
    rows = yield _sql.statement("prune_jobs"), (limit, older_than, chosen)
    return int(rows[0][0])


# ---- policies and health ------------------------------------------------------------------------


def list_policies(namespace: str | None) -> Operation[list[ConcurrencyPolicy]]:
    check_optional_name("namespace", namespace)
    rows = yield _sql.statement("list_policies"), (namespace, namespace)
    return [
        ConcurrencyPolicy(
            namespace=row[0], queue=row[1], max_active=row[2], max_active_per_key=row[3],
            created_at=row[4], updated_at=row[5], rate_limit=rate_text(row[6], row[7]),
            rate_limit_per_key=rate_text(row[8], row[9]), fairness=row[10],
            on_key_full=row[11], rate_burst=row[12], rate_burst_per_key=row[13],
        )
        for row in rows
    ]


def _override(row: Sequence[Any], bursts: Sequence[Any] = (None, None)) -> PolicyOverride:
    """From (max_active, per_key, rate n, rate period, per-key n, per-key period, set, expires),
    and the override's (rate_burst, rate_burst_per_key)."""
    return PolicyOverride(
        max_active=row[0], max_active_per_key=row[1], rate_limit=rate_text(row[2], row[3]),
        rate_limit_per_key=rate_text(row[4], row[5]), set_at=row[6], expires_at=row[7],
        rate_burst=bursts[0], rate_burst_per_key=bursts[1],
    )


def sync_policies(
    namespace: str,
    definitions: Iterable[ConcurrencyPolicyDefinition],
    prune: bool,
) -> Operation[tuple[SyncReport, list[ConcurrencyPolicy]]]:
    check_name("namespace", namespace, InvalidPolicyError)
    definitions = list(definitions)
    if len(definitions) > MAX_POLICY_DEFINITIONS:
        raise InvalidPolicyError(
            f"{len(definitions)} definitions; at most {MAX_POLICY_DEFINITIONS} in one sync"
        )
    seen: set[str] = set()
    for definition in definitions:
        if not isinstance(definition, ConcurrencyPolicyDefinition):
            raise InvalidPolicyError(f"expected ConcurrencyPolicyDefinition, got {definition!r}")
        if definition.queue in seen:
            raise InvalidPolicyError(f"queue {definition.queue!r} is defined twice")
        seen.add(definition.queue)
    rates = [d.rate for d in definitions]
    per_key = [d.rate_per_key for d in definitions]
    rows = yield _sql.statement("sync_policies"), (
        namespace,
        [d.queue for d in definitions],
        [d.max_active for d in definitions],
        [d.max_active_per_key for d in definitions],
        [r.n if r else None for r in rates],
        [r.period if r else None for r in rates],
        [r.n if r else None for r in per_key],
        [r.period if r else None for r in per_key],
        bool(prune),
        [d.fairness for d in definitions],
        [d.on_key_full for d in definitions],
        [d.rate_burst for d in definitions],
        [d.rate_burst_per_key for d in definitions],
    )
    report = SyncReport()
    for action, queue in rows:
        getattr(report, action).append(queue)
    policies = yield from list_policies(namespace)
    return report, policies


def health() -> Operation[QueueHealth]:
    rows = yield _sql.statement("policy_health"), {"sample": HEALTH_SAMPLE}
    policies = [
        PolicyHealth(
            namespace=row[0], queue=row[1], max_active=row[2], max_active_per_key=row[3],
            active=row[4], available=row[5], blocked_ready=row[6], saturated_keys=row[7],
            capped=row[8], rate_limit=rate_text(row[9], row[10]),
            rate_limit_per_key=rate_text(row[11], row[12]), rate_limited_keys=row[13],
            paused=row[14], override=_override(row[16:24], row[30:32]) if row[15] else None,
            fairness=row[25], active_units=row[26], on_key_full=row[27], rate_burst=row[28],
            rate_burst_per_key=row[29], active_jobs=row[32], next_start_at=row[33],
            next_key_start_at=row[34],
        )
        for row in rows
    ]
    depth_rows = yield _sql.statement("depth"), ()
    depth = {status.value: 0 for status in JobStatus}
    depth.update({status: int(count) for status, count in depth_rows})
    waiting_rows = yield _sql.statement("waiting_depth"), ()
    depth[JobStatus.WAITING.value] = sum(int(n) for _, n in waiting_rows)
    unknown = yield from _incident.unknown_task_ready(HEALTH_SAMPLE)
    stalled = yield from _incident.stalled(unknown)
    budgets = yield from budget_health()
    return QueueHealth(policies=policies, depth=depth, stalled=stalled,
                       unknown_task_ready={queue: n for queue, (n, _) in unknown.items()},
                       budgets=budgets)


# ---- named budgets (docs/design.md "Named budgets") ----------------------------------------------


def _budget_override(row: Sequence[Any]) -> BudgetOverride:
    """From (max_active, rate n, rate period, burst, set, expires)."""
    return BudgetOverride(max_active=row[0], rate_limit=rate_text(row[1], row[2]),
                          rate_burst=row[3], set_at=row[4], expires_at=row[5])


def list_budgets(namespace: str | None = None) -> Operation[list[Budget]]:
    """The declared budgets, every namespace's or one's, each with its override."""
    check_optional_name("namespace", namespace)
    rows = yield _sql.statement("list_budgets"), (namespace, namespace)
    return [
        Budget(namespace=row[0], name=row[1], max_active=row[2],
               rate_limit=rate_text(row[3], row[4]), rate_burst=row[5], created_at=row[6],
               updated_at=row[7],
               override=_budget_override(row[9:15]) if row[8] else None)
        for row in rows
    ]


def check_budget_definitions(namespace: str,
                             definitions: Iterable[BudgetDefinition]) -> list[BudgetDefinition]:
    """`definitions` as a list, checked before anything is sent (InvalidPolicyError): each a
    BudgetDefinition, no name twice, at most MAX_BUDGET_DEFINITIONS."""
    check_name("namespace", namespace, InvalidPolicyError)
    if isinstance(definitions, str | bytes | BudgetDefinition):
        raise InvalidPolicyError(f"expected a list of BudgetDefinition, got {shown(definitions)}")
    definitions = list(definitions)
    if len(definitions) > MAX_BUDGET_DEFINITIONS:
        raise InvalidPolicyError(
            f"{len(definitions)} budgets; at most {MAX_BUDGET_DEFINITIONS} in one sync")
    seen: set[str] = set()
    for definition in definitions:
        if not isinstance(definition, BudgetDefinition):
            raise InvalidPolicyError(f"expected BudgetDefinition, got {shown(definition)}")
        if definition.name in seen:
            raise InvalidPolicyError(f"budget {definition.name!r} is defined twice")
        seen.add(definition.name)
    return definitions


def sync_budgets(
    namespace: str, definitions: Iterable[BudgetDefinition], prune: bool,
) -> Operation[tuple[SyncReport, list[Budget]]]:
    """Desired state for `namespace`'s budgets (sync_budgets.sql): another namespace's budget is a
    PolicyConflictError, and nothing is written."""
    definitions = check_budget_definitions(namespace, definitions)
    rates = [d.rate for d in definitions]
    rows = yield _sql.statement("sync_budgets"), (
        namespace,
        [d.name for d in definitions],
        [d.max_active for d in definitions],
        [r.n if r else None for r in rates],
        [r.period if r else None for r in rates],
        [d.rate_burst for d in definitions],
        bool(prune),
    )
    report = SyncReport()
    for action, name in rows:
        getattr(report, action).append(name)
    budgets = yield from list_budgets(namespace)
    return report, budgets


def set_budget_control(
    name: str,
    action: str,
    *,
    max_active: int | None = None,
    rate_limit: str | None = None,
    rate_burst: int | None = None,
    expires_in: float | None = None,
) -> Operation[BudgetOverride | None]:
    """Override a budget's fields, or clear its override (set_budget_control.sql); returns the
    override in place afterwards (None after a clear)."""
    check_name("budget name", name)
    if max_active is not None and (type(max_active) is not int
                                   or not 1 <= max_active <= 1_000_000):
        raise InvalidPolicyError(f"max_active must be an int in [1, 1000000], got {max_active!r}")
    rate = RateLimit.optional(rate_limit, "rate_limit")
    if rate_burst is not None:
        if type(rate_burst) is not int or not 1 <= rate_burst <= 1_000_000:
            raise InvalidPolicyError(
                f"rate_burst must be an int in [1, 1000000], got {rate_burst!r}")
        if rate is not None and rate_burst > rate.n:
            raise InvalidPolicyError(
                f"budget {name!r}: rate_burst ({rate_burst}) must be at most the override's N "
                f"({rate})")
    if action == "override" and max_active is None and rate is None and rate_burst is None:
        raise InvalidPolicyError(
            "a budget override needs at least one of max_active, rate_limit, rate_burst")
    if expires_in is not None and (
        isinstance(expires_in, bool) or not isinstance(expires_in, int | float)
        or not 0 < expires_in <= MAX_DELAY_SECONDS
    ):
        raise InvalidOptionsError(f"expires_in must be positive seconds, got {expires_in!r}")
    rows = yield _sql.statement("set_budget_control"), (
        name, action, max_active, rate.n if rate else None, rate.period if rate else None,
        rate_burst, float(expires_in) if expires_in is not None else None)
    return _budget_override(rows[0][1:7]) if rows else None


def budget_health() -> Operation[list[BudgetHealth]]:
    """`QueueHealth.budgets`: one row per declared, overridden or named budget (budget_health.sql,
    bounded by HEALTH_SAMPLE)."""
    rows = yield _sql.statement("budget_health"), {"sample": HEALTH_SAMPLE}
    return [
        BudgetHealth(
            name=row[0], namespace=row[1], max_active=row[2], rate_limit=rate_text(row[3], row[4]),
            rate_burst=row[5], override=_budget_override(row[7:13]) if row[6] else None,
            active_units=int(row[13]), blocked_ready=int(row[17]), queues=list(row[16] or []),
            next_start_at=row[18], ready=min(int(row[14]), HEALTH_SAMPLE), capped=bool(row[15]),
        )
        for row in rows
    ]


def budgets_present(names: Sequence[str]) -> Operation[set[str]]:
    """Which of these budget names some namespace has declared (app.sync's warning)."""
    if not names:
        return set()
    rows = yield _sql.statement("budgets_present"), (list(names),)
    return {row[0] for row in rows}


# ---- operator controls ------------------------------------------------------------------------


def _control(rows: Rows, queue: str) -> QueueControl:
    if not rows:
        return QueueControl(queue)
    row = rows[0]
    overridden = row[9] is not None
    return QueueControl(
        queue=row[0], paused=row[1], paused_at=row[2],
        override=_override(row[3:11], row[11:13]) if overridden else None,
    )


def set_queue_control(
    queue: str,
    action: str,
    *,
    max_active: int | None = None,
    max_active_per_key: int | None = None,
    rate_limit: str | None = None,
    rate_limit_per_key: str | None = None,
    expires_in: float | None = None,
    rate_burst: int | None = None,
    rate_burst_per_key: int | None = None,
) -> Operation[QueueControl]:
    """Pause, resume, override or clear a queue's override (set_queue_control.sql). An
    override's bursts must fit its own rates when it sets them; else the SQL checks them against
    the rates in force (InvalidPolicyError, nothing written)."""
    check_name("queue", queue)
    for what, value in (("max_active", max_active), ("max_active_per_key", max_active_per_key)):
        if value is not None and (type(value) is not int or not 1 <= value <= 1_000_000):
            raise InvalidPolicyError(f"{what} must be an int in [1, 1000000], got {value!r}")
    rate = RateLimit.optional(rate_limit, "rate_limit")
    rate_key = RateLimit.optional(rate_limit_per_key, "rate_limit_per_key")
    for what, burst, limit in (("rate_burst", rate_burst, rate),
                               ("rate_burst_per_key", rate_burst_per_key, rate_key)):
        if burst is not None and (type(burst) is not int or not 1 <= burst <= 1_000_000):
            raise InvalidPolicyError(f"{what} must be an int in [1, 1000000], got {burst!r}")
        if burst is not None and limit is not None and burst > limit.n:
            raise InvalidPolicyError(
                f"queue {queue!r}: {what} ({burst}) must be at most the override's N "
                f"({limit})")
    if action == "override" and max_active is None and max_active_per_key is None and (
        rate is None and rate_key is None and rate_burst is None and rate_burst_per_key is None
    ):
        raise InvalidPolicyError(
            "an override needs at least one of max_active, max_active_per_key, rate_limit, "
            "rate_limit_per_key, rate_burst, rate_burst_per_key"
        )
    if expires_in is not None and (
        isinstance(expires_in, bool) or not isinstance(expires_in, int | float)
        or not 0 < expires_in <= MAX_DELAY_SECONDS
    ):
        raise InvalidOptionsError(f"expires_in must be positive seconds, got {expires_in!r}")
    rows = yield _sql.statement("set_queue_control"), (
        queue, action, max_active, max_active_per_key,
        rate.n if rate else None, rate.period if rate else None,
        rate_key.n if rate_key else None, rate_key.period if rate_key else None,
        float(expires_in) if expires_in is not None else None,
        rate_burst if action == "override" else None,
        rate_burst_per_key if action == "override" else None,
    )
    return _control(rows, queue)


def list_queues() -> Operation[list[QueueSummary]]:
    rows = yield _sql.statement("list_queues"), ()
    waiting_rows = yield _sql.statement("waiting_depth"), ()
    waiting = {queue: int(n) for queue, n in waiting_rows}
    summaries = []
    for row in rows:
        depth = {status.value: 0 for status in JobStatus if status != JobStatus.SUCCEEDED}
        depth.update({status: int(n) for status, n in (row[1] or {}).items()})
        depth[JobStatus.WAITING.value] = waiting.pop(row[0], 0)
        summaries.append(QueueSummary(
            queue=row[0], depth=depth, namespace=row[2], max_active=row[3],
            max_active_per_key=row[4], rate_limit=rate_text(row[5], row[6]),
            rate_limit_per_key=rate_text(row[7], row[8]), paused=row[9],
            override=_override(row[11:19]) if row[10] else None,
        ))
    for queue, n in sorted(waiting.items()):  # a queue with only waiting members
        depth = {status.value: 0 for status in JobStatus if status != JobStatus.SUCCEEDED}
        depth[JobStatus.WAITING.value] = n
        summaries.append(QueueSummary(queue=queue, depth=depth))
    return summaries


def housekeeping() -> Operation[tuple[int, int]]:
    """Clear expired overrides (of queues and of budgets) and prune old start buckets:
    (overrides cleared, rows pruned)."""
    rows = yield _sql.statement("housekeeping"), ()
    return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)


# ---- the worker's calls: claim, outcomes, leases ------------------------------------------------


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
    successes that rode on it, each with its new status (stale ones left out)."""

    jobs: list[ClaimedJob]
    next_start: float | None
    accepted: dict[tuple[int, int], JobStatus]


def claim_as(
    queue: str, limit: int, lease: float,
    successes: Sequence[tuple[int, int, str, str]] = (),
    tasks: Collection[str] | None = None,
) -> Operation[ClaimReply]:
    """Record `successes` (of jobs of `queue`, encoded as for `complete_encoded`) and claim up
    to `limit` jobs from `queue` in one statement, so that the capacity they free is reused at
    once. With `tasks` (the names the worker's app declares), a job of any other task is passed
    over, never claimed: another app's worker may serve the same queue."""
    _check_claim(queue, limit)
    lease = lease_seconds(lease)
    known = None if tasks is None else sorted(set(tasks))
    if successes:
        rows = yield _sql.statement("complete_and_claim"), (
            queue, limit, lease, *_success_columns(successes), known)
    else:
        rows = yield _sql.statement("claim"), (queue, limit, lease, known)
    reply = _claimed(rows)
    # The claim names only the successes that did not end `succeeded`.
    accepted = {(job_id, fence): JobStatus.SUCCEEDED for job_id, fence, _, _ in successes}
    for key, status in reply.exceptions.items():
        if status is None:
            del accepted[key]
        else:
            accepted[key] = status
    return ClaimReply(reply.jobs, reply.next_start, accepted)


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


def _claimed(rows: list[Any]) -> _ClaimRows:
    """Claim rows: jobs, and the markers (rows with no id): the rate limit's next start, or a
    status: `feature_level` says that the queue needs a newer claim than this package's (it
    admitted nothing, and the worker is told once per queue). Rows with an id and no task are the
    successes that did not end succeeded: (id, fence) -> status (None: stale)."""
    out = _ClaimRows([], None, {})
    for row in rows:
        if row[0] is None:  # no job: a marker
            if row[15] == "feature_level":
                _warn_feature_level(row[2], row[6])
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


def renew_leases(leases: Sequence[tuple[int, int, float]]) -> Operation[dict[int, bool]]:
    """Extend `(job_id, fence, seconds)` leases; returns the ids still held, each with whether
    its cancel was requested."""
    if not leases:
        return {}
    rows = yield _sql.statement("heartbeat"), (
        [check_id(job_id) for job_id, _, _ in leases],
        [check_id(fence, "a fence") for _, fence, _ in leases],
        [lease_seconds(seconds) for _, _, seconds in leases],
    )
    return {row[0]: bool(row[1]) for row in rows}


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


def heartbeat(leases: Sequence[tuple[int, int, float]]) -> Operation[set[int]]:
    held = yield from renew_leases(leases)
    return set(held)


# ---- wake-ups and the supervisor's row ---------------------------------------------------------


def listen() -> Operation[None]:
    """LISTEN on the wake-up channel (only SQL names it)."""
    yield _sql.statement("listen"), ()


def listen_probe() -> Operation[None]:
    yield _sql.statement("listen_probe"), ()


def notify_probe(token: str) -> Operation[None]:
    yield _sql.statement("notify_probe"), (token,)


def unlisten_probe() -> Operation[None]:
    yield _sql.statement("unlisten_probe"), ()


def unlisten_all() -> Operation[None]:
    yield _sql.statement("unlisten_all"), ()


def ready_queues(queues: Sequence[str]) -> Operation[set[str]]:
    """Which of `queues` have a ready job (the polled wake-ups, where LISTEN cannot work)."""
    rows = yield _sql.statement("ready_queues"), (list(queues),)
    return {row[0] for row in rows}


def next_due(queues: Sequence[str]) -> Operation[list[tuple[str, bool, datetime | None, datetime]]]:
    """Per queue: governed?, the earliest moment a job may become claimable without a NOTIFY,
    and the database clock."""
    rows = yield _sql.statement("next_due"), (list(queues),)
    return [(row[0], bool(row[1]), row[2], row[3]) for row in rows]


def register_worker(
    app: str, host: str, pid: int, slots: int, queues: Sequence[str], stats: dict[str, Any],
    tasks: Sequence[str] | None = None,
) -> Operation[int | None]:
    """Insert a supervisor's row; `tasks`, the task names its app declares (None: not said)."""
    if tasks is None:
        rows = yield _sql.statement("worker_register"), (
            app, host, pid, slots, list(queues), json.dumps(stats),
        )
    else:
        rows = yield _sql.statement("worker_register_tasks"), (
            app, host, pid, slots, list(queues), json.dumps(stats), sorted(tasks),
        )
    return int(rows[0][0]) if rows else None


def touch_worker(worker_id: int, stats: dict[str, Any]) -> Operation[bool]:
    """Refresh the row's last_seen and counters; False when the row is gone (pruned)."""
    rows = yield _sql.statement("worker_heartbeat"), (json.dumps(stats), worker_id)
    return bool(rows)


def unregister_worker(worker_id: int) -> Operation[None]:
    yield _sql.statement("worker_unregister"), (worker_id,)


def list_workers() -> Operation[list[WorkerInfo]]:
    rows = yield _sql.statement("list_workers"), ()
    return [WorkerInfo(*row) for row in rows]


def top_counters() -> Operation[tuple[int, int, int]]:
    """Running totals (claimed, succeeded, failed), cheap enough to read every second."""
    rows = yield _sql.statement("top_counters"), ()
    return (int(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if rows else (0, 0, 0)


def try_lock_housekeeping() -> Operation[bool]:
    """One supervisor at a time does the fleet's housekeeping: False when another one is. A
    transaction-scoped lock: run it inside the transaction that does the housekeeping."""
    rows = yield _sql.statement("housekeeping_try_lock"), (HOUSEKEEPING_LOCK,)
    return bool(rows and rows[0][0])


def vacuum_admission_tables() -> Operation[None]:
    """VACUUM the key hints and heads. Needs an autocommit connection: VACUUM cannot run in a
    transaction block."""
    yield _sql.statement("vacuum_admission_tables"), ()


# ---- schedules ----------------------------------------------------------------------------------

# At most this many schedules in one sync, and due ones in one firing pass (the rest: next pass).
MAX_SCHEDULE_DEFINITIONS = 10_000
FIRING_BATCH = 500


def _timing(cron: str | None, every: timedelta | str | None, tz: str) -> _occurrences.Timing:
    if every is None:
        return _occurrences.Timing(cron, None, tz)
    micros = (every // timedelta(microseconds=1) if isinstance(every, timedelta)
              else _occurrences.every_microseconds(every))
    return _occurrences.Timing(None, micros, tz)


def _schedule_from_row(row: Sequence[Any]) -> Schedule:
    every = row[4]
    return Schedule(
        namespace=row[0], name=row[1], task=row[2], cron=row[3],
        every=None if every is None else _occurrences.every_text(
            every // timedelta(microseconds=1)),
        args=row[5], kwargs=row[6], queue=row[7], tz=row[8], catch_up=row[9], priority=row[10],
        max_attempts=row[11], concurrency_key=row[12], on_failure=row[13], next_run_at=row[14],
        last_run_at=row[15], created_at=row[16], updated_at=row[17],
        cost=row[18], rate_cost=row[19], weight=row[20],
    )


def list_schedules(namespace: str | None = None) -> Operation[list[Schedule]]:
    check_optional_name("namespace", namespace)
    rows = yield _sql.statement("list_schedules"), (namespace, namespace)
    return [_schedule_from_row(row) for row in rows]


def sync_schedules(
    namespace: str,
    definitions: Iterable[ScheduleDefinition],
    prune: bool,
) -> Operation[tuple[SyncReport, list[Schedule]]]:
    """Desired state for `namespace`'s schedules (sync_schedules.sql); every definition
    is checked before anything is sent."""
    check_name("namespace", namespace, InvalidScheduleError)
    definitions = list(definitions)
    if len(definitions) > MAX_SCHEDULE_DEFINITIONS:
        raise InvalidScheduleError(
            f"{len(definitions)} schedules; at most {MAX_SCHEDULE_DEFINITIONS} in one sync")
    seen: set[str] = set()
    for definition in definitions:
        if not isinstance(definition, ScheduleDefinition):
            raise InvalidScheduleError(f"expected ScheduleDefinition, got {definition!r}")
        if definition.name in seen:
            raise InvalidScheduleError(f"schedule {definition.name!r} is defined twice")
        seen.add(definition.name)
    args = [encode_json(d.args, f"schedule {d.name!r} args") for d in definitions]
    kwargs = [encode_json(d.kwargs, f"schedule {d.name!r} kwargs") for d in definitions]
    timings = [_timing(d.cron, d.every, d.tz) for d in definitions]  # type: ignore[arg-type]
    rows = yield _sql.statement("database_now"), ()
    now = rows[0][0]
    rows = yield _sql.statement("sync_schedules"), (
        namespace,
        [d.name for d in definitions],
        [d.task for d in definitions],
        [d.cron for d in definitions],
        [None if t.every_us is None else timedelta(microseconds=t.every_us) for t in timings],
        [d.tz for d in definitions],
        args,
        kwargs,
        [d.target_queue for d in definitions],
        [d.concurrency_key for d in definitions],
        [d.priority for d in definitions],
        [d.max_attempts for d in definitions],
        [d.on_failure for d in definitions],
        [d.catch_up for d in definitions],
        [t.after(now) for t in timings],
        bool(prune),
        _or_null([_unless_one(d.cost) for d in definitions]),
        _or_null([_unless_one(d.rate_cost) for d in definitions]),
        _or_null([_unless_one(d.weight) for d in definitions]),
    )
    report = SyncReport()
    for action, name in rows:
        getattr(report, action).append(name)
    schedules = yield from list_schedules(namespace)
    return report, schedules


def fire_due_schedules(namespace: str, limit: int = FIRING_BATCH) -> Operation[FiringPass]:
    """One firing pass for `namespace`: lock its due schedules (skipping those another pass
    holds), enqueue their occurrences by the catch-up rule, move their pointers past now().
    Run it inside a transaction, which holds the rows until it commits."""
    rows = yield _sql.statement("schedules_due"), {"namespace": namespace, "limit": limit}
    run_ids: list[int] = []
    run_occurrences: list[datetime] = []
    ids: list[int] = []
    next_run_ats: list[datetime] = []
    broken: list[tuple[str, str]] = []
    for schedule_id, name, cron, every, tz, catch_up, next_run_at, now in rows:
        try:
            occurrences, following = _timing(cron, every, tz).due(next_run_at, now, catch_up)
        except (InvalidScheduleError, ValueError, OverflowError) as exc:
            # Unreadable here (e.g. a zone this host's tzdata lacks): look again in a minute.
            broken.append((name, str(exc)))
            occurrences, following = [], now + _occurrences.MISSED_AFTER
        run_ids.extend([schedule_id] * len(occurrences))
        run_occurrences.extend(occurrences)
        ids.append(schedule_id)
        next_run_ats.append(following)
    fired: list[tuple[int, datetime, int]] = []
    if ids:
        fired_rows = yield _sql.statement("fire_schedules"), (
            run_ids, run_occurrences, ids, next_run_ats)
        fired = [(row[0], row[1], row[2]) for row in fired_rows]
    due_rows = yield _sql.statement("schedules_next_due"), (namespace,)
    next_due, now = due_rows[0]
    return FiringPass(
        fired=fired,
        locked=len(rows),
        full=len(rows) >= limit,
        next_due_in=None if next_due is None else (next_due - now).total_seconds(),
        now=now,
        broken=broken,
    )
# ---- the dashboard ------------------------------------------------------------------------------

# The supervisor counters the throughput history keeps, per minute (a column each).
THROUGHPUT_FIELDS = ("claimed", "succeeded", "failed", "retried", "held", "canceled")
# A saturated key's backlog is counted up to this many ready jobs (then shown as "more than").
BACKLOG_CAP = 200


def record_throughput(deltas: dict[str, int]) -> Operation[None]:
    """Add one supervisor's counter deltas to the current minute (and prune rows over a day)."""
    yield _sql.statement("record_throughput"), {
        name: max(int(deltas.get(name, 0)), 0) for name in THROUGHPUT_FIELDS
    }


def throughput(minutes: int = 60) -> Operation[list[ThroughputMinute]]:
    """The fleet's counters per minute over the last `minutes` (1-1440), oldest first; minutes
    nobody counted in are absent."""
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
        raise InvalidOptionsError(f"minutes must be an int in [1, 1440], got {minutes!r}")
    rows = yield _sql.statement("throughput"), {"minutes": minutes}
    found = []
    for row in rows:
        elapsed = (row[7] - row[0]).total_seconds()
        found.append(ThroughputMinute(
            minute=row[0], claimed=int(row[1]), succeeded=int(row[2]), failed=int(row[3]),
            retried=int(row[4]), held=int(row[5]), canceled=int(row[6]),
            seconds=min(max(elapsed, 1.0), 60.0)))
    return found


def _key_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= HEALTH_SAMPLE:
        raise InvalidOptionsError(f"limit must be an int in [1, {HEALTH_SAMPLE}], got {limit!r}")
    return limit


def saturated_keys(queue: str, limit: int = 20) -> Operation[list[KeyPressure]]:
    """The keys of `queue` at their per-key limit, the biggest ready backlog first (bounded as
    health() is: a sample of keys, each backlog counted up to BACKLOG_CAP)."""
    check_name("queue", queue)
    rows = yield _sql.statement("saturated_keys"), {
        "queue": queue, "sample": HEALTH_SAMPLE, "cap": BACKLOG_CAP, "limit": _key_limit(limit),
    }
    return [KeyPressure(key=row[0], active=row[1], backlog=min(row[2], BACKLOG_CAP),
                        capped=bool(row[3])) for row in rows]


def key_shares(queue: str, max_active: int | None, limit: int = 20
               ) -> Operation[list[KeyShare]]:
    """A fair queue's keys by active units, each with its fair share of `max_active` (bounded:
    the active jobs, and a sample of the keys with ready work)."""
    check_name("queue", queue)
    rows = yield _sql.statement("dashboard_key_shares"), {
        "queue": queue, "sample": HEALTH_SAMPLE * 10, "shown": _key_limit(limit)}
    return [KeyShare(key=row[0], units=int(row[1]), jobs=row[2], weight=row[3], ready=row[4],
                     share=(None if max_active is None or not row[5]
                            else max_active * row[3] / int(row[5])),
                     capped=bool(row[7]))
            for row in rows]


def rate_limited_keys(queue: str, limit: int = 20) -> Operation[list[KeyPressure]]:
    """The keys of `queue` out of their per-key rate limit now, the most used first."""
    check_name("queue", queue)
    rows = yield _sql.statement("rate_limited_keys"), {
        "queue": queue, "sample": HEALTH_SAMPLE, "limit": _key_limit(limit),
    }
    return [KeyPressure(key=row[0], used=row[1], limit=row[2]) for row in rows]


def schedules_present() -> Operation[bool]:
    """Whether this database has the schedules table (so that a page can say "no schedules"
    on a schema without it)."""
    rows = yield _sql.statement("schedules_present"), ()
    return bool(rows and rows[0][0])


# ---- schema -------------------------------------------------------------------------------------


def schema_version() -> Operation[int]:
    """The version the database's schema is at (0: not installed)."""
    rows = yield _sql.statement("schema_installed"), ()
    if not rows[0][0]:
        return 0
    rows = yield _sql.statement("schema_versions"), ()
    return int(rows[-1][0]) if rows else 0


_RESET = ("drop the `workhorse` schema (DROP SCHEMA workhorse CASCADE, which deletes every "
          "job, policy and schedule in it) and install again")


def _check_recorded(recorded: Rows) -> None:
    """Every recorded migration must be the package's own: the same name and the same
    checksum. A table without checksums was made by workhorse 0.1, which had no release."""
    ours = {version: (name, _sql.checksum(text)) for version, name, text in _sql.migrations()}
    for version, name, checksum in recorded:
        if checksum is None:
            raise SchemaVersionError(
                "this database's workhorse schema was installed by workhorse 0.1, before the "
                f"first release, and cannot be brought forward: {_RESET}"
            )
        if version not in ours:
            continue  # newer than this package: refused by the caller
        our_name, our_checksum = ours[version]
        if name != our_name or checksum != our_checksum:
            raise SchemaVersionError(
                f"the database applied schema migration {version} as {name!r} with checksum "
                f"{checksum[:12]}, but this workhorse ships {our_name!r} with checksum "
                f"{our_checksum[:12]}: the migration was changed after it was applied (a "
                f"development build?); {_RESET}"
            )


def install_schema() -> Operation[int]:
    """Bring the schema to the latest version; returns the version found before. Refuses a
    database whose applied migrations differ from this package's, or that is newer."""
    latest = _sql.latest_version()
    rows = yield _sql.statement("schema_installed"), ()
    if rows[0][0]:
        recorded = yield _sql.statement("schema_versions"), ()
        if recorded and recorded[-1][0] == latest:
            _check_recorded(recorded)
            return int(latest)
    yield _sql.statement("schema_install_lock"), (SCHEMA_LOCK,)
    yield _sql.statement("create_schema"), ()
    yield _sql.statement("create_schema_version"), ()
    recorded = yield _sql.statement("schema_versions"), ()
    current = int(recorded[-1][0]) if recorded else 0
    _check_recorded(recorded)
    if current > latest:
        raise SchemaVersionError(
            f"the database schema is at version {current}, newer than this workhorse "
            f"(version {latest}); upgrade workhorse"
        )
    for version, name, text in _sql.migrations():
        if version > current:
            yield text, None
            yield _sql.statement("record_migration"), (version, name, _sql.checksum(text))
    return current


# ---- workflows (docs/design.md "Workflows") ------------------------------------------------------

WORKFLOW_MEMBERS_MAX = 10_000


@dataclass(frozen=True, slots=True)
class WorkflowMember:
    """One member of a canvas, resolved: its job, how parents' results reach it ('none',
    'one', 'list'), and its dependencies: (member index or None, existing id or None,
    position, passes the result). Its units (cost, rate_cost, weight) are its options';
    `retention` (JSON, status -> seconds kept; its task's) fixes its expiry when the database
    ends it itself (canceled for a failed dependency, failed with PayloadError at release)."""

    task: str
    payload: dict[str, Any]
    options: EnqueueOptions
    on_failure: str
    mode: str
    parents: tuple[tuple[int | None, int | None, int, bool], ...]
    retention: str = DEFAULT_RETENTION_JSON


def enqueue_workflow(
    members: Sequence[WorkflowMember],
    result_members: Sequence[int],
    result_kind: str,
    on_error: tuple[str, Any, EnqueueOptions, str] | None = None,
) -> Operation[tuple[int, list[int]]]:
    """Insert a canvas in one statement: (workflow id, member ids in order). An unknown
    existing parent id raises InvalidOptionsError, with nothing written."""
    if not members:
        raise InvalidOptionsError("a workflow needs at least one member")
    if len(members) > WORKFLOW_MEMBERS_MAX:
        raise InvalidOptionsError(
            f"a workflow has at most {WORKFLOW_MEMBERS_MAX} members, got {len(members)}")
    payloads = [encode_json(m.payload) for m in members]
    for m in members:
        if m.options.idempotency_key is not None or m.options.unique is not None \
                or m.options.job_key is not None:
            raise InvalidOptionsError(
                "a workflow member cannot have an idempotency_key, unique or job_key")
    edge_jobs: list[int] = []
    edge_parents: list[int | None] = []
    edge_ids: list[int | None] = []
    edge_positions: list[int] = []
    edge_passes: list[bool] = []
    for index, m in enumerate(members):
        for parent, existing, position, passes in m.parents:
            edge_jobs.append(index + 1)
            edge_parents.append(None if parent is None else parent + 1)
            edge_ids.append(None if existing is None else check_id(existing))
            edge_positions.append(position)
            edge_passes.append(passes)
    if on_error is None:
        error_args: tuple[Any, ...] = (None,) * 7
        error_units: tuple[int, int, int] = (1, 1, 1)
        error_budget: str | None = None
    else:
        task, payload, options, on_failure = on_error
        error_args = (task, options.queue, options.concurrency_key, options.priority,
                      encode_json(payload), options.max_attempts, on_failure)
        error_units = (options.cost, options.rate_cost, options.weight)
        error_budget = options.budget
    rows = yield _sql.statement("enqueue_workflow"), (
        [m.task for m in members], [m.options.queue for m in members],
        [m.options.concurrency_key for m in members], [m.options.priority for m in members],
        payloads, [m.options.run_at for m in members],
        [m.options.delay_seconds for m in members], [m.options.max_attempts for m in members],
        [m.on_failure for m in members], [None] * len(members), [m.mode for m in members],
        edge_jobs, edge_parents, edge_ids, edge_positions, edge_passes,
        [i + 1 for i in result_members], result_kind, *error_args,
        _or_null([_unless_one(m.options.cost) for m in members]),
        _or_null([_unless_one(m.options.rate_cost) for m in members]),
        _or_null([_unless_one(m.options.weight) for m in members]),
        [m.retention for m in members], *error_units,
        _or_null([m.options.budget for m in members]), error_budget)
    workflow_id, ids, missing = rows[0]
    if workflow_id is None:
        raise InvalidOptionsError(
            f"depends_on names jobs that do not exist (never enqueued, or pruned): "
            f"{', '.join(map(str, missing))}")
    return workflow_id, list(ids)


def workflow_jobs(workflow_id: int) -> Operation[list[Job]]:
    """The members of a workflow, in insertion (id) order."""
    rows = yield _sql.statement("workflow_jobs"), (check_id(workflow_id, "a workflow id"),)
    return [_job_from_row(row) for row in rows]


def workflow_row(workflow_id: int) -> Operation[tuple[Any, ...] | None]:
    """(id, result member ids, result kind, on_error job id, created_at), or None."""
    rows = yield _sql.statement("workflow_get"), (check_id(workflow_id, "a workflow id"),)
    return tuple(rows[0]) if rows else None


def workflow_releases(workflow_id: int) -> Operation[list[tuple[int, int, int]]]:
    """(member id, times released, pending parents) of each member: what tests count."""
    rows = yield _sql.statement("workflow_releases"), (check_id(workflow_id, "a workflow id"),)
    return [(row[0], row[1], row[2]) for row in rows]
