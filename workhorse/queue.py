"""`Queue` and `AsyncQueue`: thin bindings of parameters to the statements in `sql/`.

Each operation is written once, as a generator that yields `(statement, params)` and receives the
rows; `Queue` drives it on a `psycopg.Connection` and `AsyncQueue` on a `psycopg.AsyncConnection`.
So the sync and async twins share every statement and every row mapping.

The caller owns the connection and its transaction: nothing here commits. Worker-side calls
(claim, complete, fail, heartbeat) expect an autocommit connection, because a governed claim holds
its queue's admission lock until its transaction ends.
"""

from __future__ import annotations

import json
import re
import traceback as traceback_module
from collections.abc import Generator, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg

from . import _sql
from .errors import (
    InvalidOptionsError,
    InvalidPolicyError,
    PayloadError,
    SchemaVersionError,
    StaleLeaseError,
    WorkhorseError,
    translate,
)
from .types import (
    MAX_DELAY_SECONDS,
    MAX_POLICY_DEFINITIONS,
    ClaimedJob,
    ConcurrencyPolicy,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    Job,
    JobStatus,
    PolicyHealth,
    QueueHealth,
    SyncReport,
    check_name,
)

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
Step = tuple[Any, Any]
Operation = Generator[Step, Rows, T]

PAYLOAD_LIMIT = 1024 * 1024
HEALTH_SAMPLE = 1000
_SCHEMA_LOCK = 0x776F726B686F7273  # "workhors": serializes concurrent schema installs
# jsonb cannot store NUL in a string; catch "\u0000" (not an escaped backslash followed by it).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def encode_json(value: Any, what: str = "payload") -> str:
    """JSON text for `value`, or PayloadError: not JSON, NaN/infinity, NUL, or over 1 MiB."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise PayloadError(f"{what} is nested too deeply to be JSON") from None
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


def error_document(exc: BaseException) -> dict[str, Any]:
    """The stored shape of a failure: type, message and traceback."""
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback_module.format_exception(exc)),
    }


# ---- operations (one per public method; shared by both drivers) --------------------------------


def _enqueue_many_op(
    jobs: Sequence[tuple[str, Any, EnqueueOptions | None]],
    on_failure: Sequence[str] | None = None,
    meta: Sequence[dict[str, Any] | None] | None = None,
) -> Operation[list[int]]:
    columns: list[list[Any]] = [[] for _ in range(10)]
    for what, per_job in (("on_failure", on_failure), ("meta", meta)):
        if per_job is not None and (isinstance(per_job, str | dict) or len(per_job) != len(jobs)):
            raise InvalidOptionsError(f"{what} must be a sequence with one entry per job")
    for index, item in enumerate(jobs):
        try:
            task, payload, options = item
        except (TypeError, ValueError):
            raise InvalidOptionsError(
                f"job {index} must be a (task, payload, options) tuple, got {item!r}"
            ) from None
        check_name("task", task)
        options = options if options is not None else EnqueueOptions()
        if not isinstance(options, EnqueueOptions):
            raise InvalidOptionsError(f"options must be EnqueueOptions, got {options!r}")
        failure_mode = on_failure[index] if on_failure is not None else "fail"
        if failure_mode not in ("fail", "hold"):
            raise InvalidOptionsError(f"on_failure must be 'fail' or 'hold', got {failure_mode!r}")
        job_meta = meta[index] if meta is not None else None
        values = (
            task,
            options.queue,
            options.concurrency_key,
            options.priority,
            encode_json(payload),
            options.run_at,
            options.delay_seconds,
            options.max_attempts,
            failure_mode,
            encode_json(job_meta, "meta") if job_meta else None,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    if not columns[0]:
        return []
    rows = yield _sql.statement("enqueue"), columns
    return [row[0] for row in rows]


def _job_from_row(row: tuple[Any, ...]) -> Job:
    (id_, task, queue, ckey, priority, payload, status, attempts, max_attempts, result, error,
     run_at, enqueued_at, started_at, finished_at, on_failure, fence, lease_until, meta) = row
    return Job(
        id=id_, task=task, queue=queue, concurrency_key=ckey, priority=priority, payload=payload,
        status=JobStatus(status), attempts=attempts, max_attempts=max_attempts, result=result,
        error=error, run_at=run_at, enqueued_at=enqueued_at, started_at=started_at,
        finished_at=finished_at, on_failure=on_failure, fence=fence, lease_until=lease_until,
        meta=meta or {},
    )


def _get_job_op(job_id: int) -> Operation[Job | None]:
    rows = yield _sql.statement("get_job"), (job_id,)
    return _job_from_row(rows[0]) if rows else None


def _policy_from_row(row: tuple[Any, ...]) -> ConcurrencyPolicy:
    return ConcurrencyPolicy(*row)


def _list_policies_op(namespace: str | None) -> Operation[list[ConcurrencyPolicy]]:
    rows = yield _sql.statement("list_policies"), (namespace, namespace)
    return [_policy_from_row(row) for row in rows]


def _sync_op(
    namespace: str,
    definitions: Iterable[ConcurrencyPolicyDefinition],
    prune: bool,
) -> Operation[tuple[SyncReport, list[ConcurrencyPolicy]]]:
    try:
        check_name("namespace", namespace)
    except InvalidOptionsError as exc:
        raise InvalidPolicyError(str(exc)) from None
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
    rows = yield _sql.statement("sync_policies"), (
        namespace,
        [d.queue for d in definitions],
        [d.max_active for d in definitions],
        [d.max_active_per_key for d in definitions],
        bool(prune),
    )
    report = SyncReport()
    for action, queue in rows:
        getattr(report, action).append(queue)
    policies = yield from _list_policies_op(namespace)
    return report, policies


def _health_op() -> Operation[QueueHealth]:
    rows = yield _sql.statement("policy_health"), {"sample": HEALTH_SAMPLE}
    policies = [PolicyHealth(*row) for row in rows]
    depth_rows = yield _sql.statement("depth"), ()
    depth = {status.value: 0 for status in JobStatus}
    depth.update({status: int(count) for status, count in depth_rows})
    return QueueHealth(policies=policies, depth=depth)


def _lease_seconds(lease: object) -> float:
    """A lease must be a finite, positive number of seconds: a NULL or NaN lease would leave an
    active job that never expires and that no count of active jobs sees."""
    if isinstance(lease, bool) or not isinstance(lease, int | float):
        raise InvalidOptionsError(f"lease must be a number of seconds, got {lease!r}")
    if not 0 < lease <= MAX_DELAY_SECONDS:
        raise InvalidOptionsError(f"lease must be > 0 seconds and finite, got {lease!r}")
    return float(lease)


def _claim_op(queue: str, limit: int, lease: float) -> Operation[list[ClaimedJob]]:
    check_name("queue", queue)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidOptionsError(f"limit must be an int, got {limit!r}")
    rows = yield _sql.statement("claim"), (queue, limit, _lease_seconds(lease))
    return [
        ClaimedJob(
            id=row[0], task=row[1], queue=row[2], concurrency_key=row[3] or None, priority=row[4],
            payload=row[5], attempts=row[6], max_attempts=row[7], fence=row[8],
            lease_until=row[9], enqueued_at=row[10], run_at=row[11], meta=row[12] or {},
        )
        for row in rows
    ]


def _complete_op(outcomes: Sequence[tuple[int, int, Any]]) -> Operation[set[int]]:
    if not outcomes:
        return set()
    results = [encode_json(result, "result") for _, _, result in outcomes]
    rows = yield _sql.statement("complete"), (
        [job_id for job_id, _, _ in outcomes],
        [fence for _, fence, _ in outcomes],
        results,
    )
    return {row[0] for row in rows}


def _fail_op(
    job_id: int, fence: int, error: dict[str, Any], retry_at: datetime | None
) -> Operation[JobStatus]:
    rows = yield _sql.statement("fail"), (job_id, fence, encode_json(error, "error"), retry_at)
    status = rows[0][0] if rows else None
    if status is None:
        raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the failure was not recorded")
    return JobStatus(status)


def _heartbeat_op(leases: Sequence[tuple[int, int, float]]) -> Operation[set[int]]:
    if not leases:
        return set()
    rows = yield _sql.statement("heartbeat"), (
        [job_id for job_id, _, _ in leases],
        [fence for _, fence, _ in leases],
        [_lease_seconds(seconds) for _, _, seconds in leases],
    )
    return {row[0] for row in rows}


def _install_schema_op() -> Operation[int]:
    """Bring the schema to the latest version; returns the version found before."""
    latest = _sql.latest_version()
    rows = yield "SELECT to_regclass('workhorse.schema_version') IS NOT NULL", ()
    if rows[0][0]:
        rows = yield "SELECT COALESCE(max(version), 0) FROM workhorse.schema_version", ()
        if rows[0][0] == latest:
            return int(latest)
    yield "SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,)
    yield "CREATE SCHEMA IF NOT EXISTS workhorse", ()
    yield (
        "CREATE TABLE IF NOT EXISTS workhorse.schema_version ("
        " version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())",
        (),
    )
    rows = yield "SELECT COALESCE(max(version), 0) FROM workhorse.schema_version", ()
    current = int(rows[0][0])
    if current > latest:
        raise SchemaVersionError(
            f"the database schema is at version {current}, newer than this workhorse "
            f"(version {latest}); upgrade workhorse"
        )
    for version, name, text in _sql.migrations():
        if version > current:
            yield text, None
            yield "INSERT INTO workhorse.schema_version (version, name) VALUES (%s, %s)", (
                version,
                name,
            )
    return current


# ---- drivers -------------------------------------------------------------------------------------


def _opens_caller_transaction(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
) -> bool:
    """True when a statement now would begin the caller's (non-autocommit) transaction."""
    return not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def _raise_translated(exc: psycopg.Error) -> None:
    translated = translate(exc)
    if translated is not None:
        raise translated from None


class Queue:
    """Enqueue, sync policies and inspect jobs on a caller-owned `psycopg.Connection`.

    >>> q = Queue(conn)                                           # doctest: +SKIP
    >>> job_id = q.enqueue("mail.send", {"args": [7], "kwargs": {}},
    ...                    EnqueueOptions(queue="mail", concurrency_key="tenant-1"))
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def _run(self, operation: Operation[T], *, transaction: bool = False) -> T:
        try:
            if transaction:
                if _opens_caller_transaction(self.conn):
                    # psycopg would BEGIN and COMMIT its own block on an idle connection: start
                    # the caller's transaction first, so that the block is only a savepoint in it.
                    self.conn.execute("SELECT 1")
                with self.conn.transaction():
                    return self._drive(operation)
            return self._drive(operation)
        except psycopg.Error as exc:
            _raise_translated(exc)
            raise

    def _drive(self, operation: Operation[T]) -> T:
        try:
            statement, params = next(operation)
            while True:
                with self.conn.cursor() as cur:
                    cur.execute(statement, params)
                    rows = cur.fetchall() if cur.description is not None else []
                statement, params = operation.send(rows)
        except StopIteration as stop:
            return stop.value

    def enqueue(self, task: str, payload: Any, options: EnqueueOptions | None = None) -> int:
        """Enqueue one job in the caller's transaction; returns its id."""
        return self._run(_enqueue_many_op([(task, payload, options)]))[0]

    def enqueue_many(
        self, jobs: Iterable[tuple[str, Any, EnqueueOptions | None]], **extra: Any
    ) -> list[int]:
        """Enqueue many jobs in one round trip; ids come back in input order."""
        return self._run(_enqueue_many_op(list(jobs), **extra))

    def sync_concurrency_policies(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> list[ConcurrencyPolicy]:
        """Make `namespace`'s stored policies equal `definitions`; returns that namespace's rows.

        Upserts each definition; with `prune`, deletes this namespace's other queues. A queue
        owned by another namespace raises PolicyConflictError and nothing is written.
        """
        return self._run(_sync_op(namespace, definitions, prune), transaction=True)[1]

    def sync_report(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """As `sync_concurrency_policies`, but returns what changed."""
        return self._run(_sync_op(namespace, definitions, prune), transaction=True)[0]

    def list_concurrency_policies(self, namespace: str | None = None) -> list[ConcurrencyPolicy]:
        return self._run(_list_policies_op(namespace))

    def health(self) -> QueueHealth:
        """Per-policy limit, active, available, blocked_ready, saturated keys; depth by status."""
        return self._run(_health_op())

    def get_job(self, job_id: int) -> Job | None:
        return self._run(_get_job_op(job_id))

    def install_schema(self) -> None:
        """Create or bring forward the `workhorse` schema. Idempotent; safe to race."""
        self._run(_install_schema_op(), transaction=True)

    # worker side
    def claim(self, queue: str, limit: int, lease: float) -> list[ClaimedJob]:
        return self._run(_claim_op(queue, limit, lease))

    def complete_many(self, outcomes: Sequence[tuple[int, int, Any]]) -> set[int]:
        return self._run(_complete_op(outcomes))

    def complete(self, job_id: int, fence: int, result: Any = None) -> None:
        if not self.complete_many([(job_id, fence, result)]):
            raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the result was discarded")

    def fail(
        self, job_id: int, fence: int, error: dict[str, Any], retry_at: datetime | None = None
    ) -> JobStatus:
        return self._run(_fail_op(job_id, fence, error, retry_at))

    def heartbeat(self, leases: Sequence[tuple[int, int, float]]) -> set[int]:
        """Extend `(job_id, fence, lease_seconds)` leases; returns the ids still held."""
        return self._run(_heartbeat_op(leases))


class AsyncQueue:
    """`Queue` on a `psycopg.AsyncConnection`: the same methods, awaitable."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def _run(self, operation: Operation[T], *, transaction: bool = False) -> T:
        try:
            if transaction:
                if _opens_caller_transaction(self.conn):
                    await self.conn.execute("SELECT 1")
                async with self.conn.transaction():
                    return await self._drive(operation)
            return await self._drive(operation)
        except psycopg.Error as exc:
            _raise_translated(exc)
            raise

    async def _drive(self, operation: Operation[T]) -> T:
        try:
            statement, params = next(operation)
            while True:
                async with self.conn.cursor() as cur:
                    await cur.execute(statement, params)
                    rows = await cur.fetchall() if cur.description is not None else []
                statement, params = operation.send(rows)
        except StopIteration as stop:
            return stop.value

    async def enqueue(self, task: str, payload: Any, options: EnqueueOptions | None = None) -> int:
        return (await self._run(_enqueue_many_op([(task, payload, options)])))[0]

    async def enqueue_many(
        self, jobs: Iterable[tuple[str, Any, EnqueueOptions | None]], **extra: Any
    ) -> list[int]:
        return await self._run(_enqueue_many_op(list(jobs), **extra))

    async def sync_concurrency_policies(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> list[ConcurrencyPolicy]:
        return (await self._run(_sync_op(namespace, definitions, prune), transaction=True))[1]

    async def sync_report(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> SyncReport:
        return (await self._run(_sync_op(namespace, definitions, prune), transaction=True))[0]

    async def list_concurrency_policies(
        self, namespace: str | None = None
    ) -> list[ConcurrencyPolicy]:
        return await self._run(_list_policies_op(namespace))

    async def health(self) -> QueueHealth:
        return await self._run(_health_op())

    async def get_job(self, job_id: int) -> Job | None:
        return await self._run(_get_job_op(job_id))

    async def install_schema(self) -> None:
        await self._run(_install_schema_op(), transaction=True)

    async def claim(self, queue: str, limit: int, lease: float) -> list[ClaimedJob]:
        return await self._run(_claim_op(queue, limit, lease))

    async def complete_many(self, outcomes: Sequence[tuple[int, int, Any]]) -> set[int]:
        return await self._run(_complete_op(outcomes))

    async def complete(self, job_id: int, fence: int, result: Any = None) -> None:
        if not await self.complete_many([(job_id, fence, result)]):
            raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the result was discarded")

    async def fail(
        self, job_id: int, fence: int, error: dict[str, Any], retry_at: datetime | None = None
    ) -> JobStatus:
        return await self._run(_fail_op(job_id, fence, error, retry_at))

    async def heartbeat(self, leases: Sequence[tuple[int, int, float]]) -> set[int]:
        return await self._run(_heartbeat_op(leases))


__all__ = ["AsyncQueue", "Queue", "WorkhorseError", "encode_json", "error_document"]
