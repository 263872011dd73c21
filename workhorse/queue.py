"""`Queue` and `AsyncQueue`: the database API on a caller-owned connection.

Each method drives one operation of `_ops.py` (where the statements and row mappings live), so
the sync and async twins share every statement and every row mapping.

The caller owns the connection and its transaction: nothing here commits. Worker-side calls
(claim, complete, fail, heartbeat) expect an autocommit connection, because a governed claim holds
its queue's admission lock until its transaction ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import psycopg

from . import _ops
from ._ops import PAYLOAD_LIMIT, Operation, T, encode_json, error_document
from .errors import StaleLeaseError, WorkhorseError
from .types import (
    ClaimedJob,
    ConcurrencyPolicy,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    Job,
    JobStatus,
    QueueControl,
    QueueHealth,
    QueueSummary,
    Schedule,
    ScheduleDefinition,
    SyncReport,
    WorkerInfo,
)


def _opens_caller_transaction(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
) -> bool:
    """True when a statement now would begin the caller's (non-autocommit) transaction."""
    return not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


class Queue:
    """Enqueue, sync policies and inspect jobs on a caller-owned `psycopg.Connection`.

    >>> q = Queue(conn)                                           # doctest: +SKIP
    >>> job_id = q.enqueue("mail.send", {"args": [7], "kwargs": {}},
    ...                    EnqueueOptions(queue="mail", concurrency_key="tenant-1"))
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def _run(self, operation: Operation[T], *, transaction: bool = False) -> T:
        if not transaction:
            return _ops.execute(self.conn, operation)
        try:
            if _opens_caller_transaction(self.conn):
                # psycopg would BEGIN and COMMIT its own block on an idle connection: start the
                # caller's transaction first, so that the block is only a savepoint in it.
                _ops.drive(self.conn, _ops.open_transaction())
            with self.conn.transaction():
                return _ops.drive(self.conn, operation)
        except psycopg.Error as exc:
            _ops.raise_translated(exc)
            raise

    def enqueue(self, task: str, payload: Any, options: EnqueueOptions | None = None) -> int:
        """Enqueue one job in the caller's transaction; returns its id."""
        return self._run(_ops.enqueue_many([(task, payload, options)]))[0]

    def enqueue_many(
        self, jobs: Iterable[tuple[str, Any, EnqueueOptions | None]], **extra: Any
    ) -> list[int]:
        """Enqueue many jobs in one round trip; ids come back in input order."""
        return self._run(_ops.enqueue_many(list(jobs), **extra))

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
        return self._run(_ops.sync_policies(namespace, definitions, prune), transaction=True)[1]

    def sync_report(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """As `sync_concurrency_policies`, but returns what changed."""
        return self._run(_ops.sync_policies(namespace, definitions, prune), transaction=True)[0]

    def list_concurrency_policies(self, namespace: str | None = None) -> list[ConcurrencyPolicy]:
        return self._run(_ops.list_policies(namespace))

    def sync_schedules(
        self,
        namespace: str,
        definitions: Iterable[ScheduleDefinition],
        prune: bool = True,
    ) -> list[Schedule]:
        """Make `namespace`'s stored schedules equal `definitions`; returns that namespace's rows.

        Upserts each definition (a changed cron, interval or zone takes effect from its next
        occurrence; an unchanged one moves nothing); with `prune`, deletes this namespace's other
        schedules, which stop firing at once. A name owned by another namespace raises
        ScheduleConflictError and nothing is written.
        """
        return self._run(_ops.sync_schedules(namespace, definitions, prune), transaction=True)[1]

    def sync_schedules_report(
        self,
        namespace: str,
        definitions: Iterable[ScheduleDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """As `sync_schedules`, but returns what changed, by schedule name."""
        return self._run(_ops.sync_schedules(namespace, definitions, prune), transaction=True)[0]

    def list_schedules(self, namespace: str | None = None) -> list[Schedule]:
        """Every stored schedule (or one namespace's), with its next and last run."""
        return self._run(_ops.list_schedules(namespace))

    def health(self) -> QueueHealth:
        """Per-policy limit, active, available, blocked_ready, saturated keys; depth by status."""
        return self._run(_ops.health())

    def get_job(self, job_id: int) -> Job | None:
        return self._run(_ops.get_job(job_id))

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: str | None = None,
        key: str | None = None,
        task: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """The newest jobs first, filtered by any of queue, status, key and task."""
        return self._run(
            _ops.list_jobs(queue=queue, status=status, key=key, task=task, limit=limit)
        )

    def retry_jobs(self, ids: Iterable[int]) -> list[int]:
        """Held, failed or canceled jobs become ready with a fresh set of attempts."""
        return self._run(_ops.retry_jobs(ids))

    def cancel_jobs(self, ids: Iterable[int]) -> list[int]:
        """Cancel jobs that have not finished (a running one by request: it ends canceled when
        its handler returns); returns the ids canceled or asked to cancel."""
        return self._run(_ops.cancel_jobs(ids))

    def prune_jobs(
        self,
        limit: int = 5000,
        *,
        older_than: float | None = None,
        statuses: Sequence[str] | None = None,
    ) -> int:
        """Delete up to `limit` finished jobs whose retention expired (or, with `older_than`
        seconds, those of `statuses` that finished that long ago); -1 while another pruner
        runs."""
        return self._run(_ops.prune_jobs(limit, older_than, statuses))

    def pause(self, queue: str) -> QueueControl:
        """A paused queue admits nothing (governed or not); running jobs finish. Claims in
        flight finish first; none admits after the pause commits. A sync never removes it."""
        return self._run(_ops.set_queue_control(queue, "pause"), transaction=True)

    def resume(self, queue: str) -> QueueControl:
        """Undo a pause; workers are woken at once."""
        return self._run(_ops.set_queue_control(queue, "resume"), transaction=True)

    def override_policy(
        self,
        queue: str,
        *,
        max_active: int | None = None,
        max_active_per_key: int | None = None,
        rate_limit: str | None = None,
        rate_limit_per_key: str | None = None,
        expires_in: float | None = None,
    ) -> QueueControl:
        """Replace the named fields of `queue`'s policy (any queue, governed or not) until
        `clear_override` or until `expires_in` seconds pass. A sync never removes it.

        >>> q.override_policy("openai-api", max_active=2, expires_in=3600)   # doctest: +SKIP
        """
        operation = _ops.set_queue_control(
            queue, "override", max_active=max_active, max_active_per_key=max_active_per_key,
            rate_limit=rate_limit, rate_limit_per_key=rate_limit_per_key, expires_in=expires_in,
        )
        return self._run(operation, transaction=True)

    def clear_override(self, queue: str) -> QueueControl:
        return self._run(_ops.set_queue_control(queue, "clear_override"), transaction=True)

    def list_queues(self) -> list[QueueSummary]:
        """Every queue with live jobs, a policy or a control: depth, limits, paused, override."""
        return self._run(_ops.list_queues())

    def list_workers(self) -> list[WorkerInfo]:
        return self._run(_ops.list_workers())

    def install_schema(self) -> None:
        """Create or bring forward the `workhorse` schema. Idempotent; safe to race."""
        self._run(_ops.install_schema(), transaction=True)

    def schema_version(self) -> int:
        return self._run(_ops.schema_version())

    # worker side
    def claim(self, queue: str, limit: int, lease: float) -> list[ClaimedJob]:
        return self._run(_ops.claim(queue, limit, lease))

    def complete_many(self, outcomes: Sequence[tuple[int, int, Any]]) -> set[int]:
        return self._run(_ops.complete(outcomes))

    def complete(self, job_id: int, fence: int, result: Any = None) -> None:
        if not self.complete_many([(job_id, fence, result)]):
            raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the result was discarded")

    def fail(
        self, job_id: int, fence: int, error: dict[str, Any], retry_at: datetime | None = None
    ) -> JobStatus:
        return self._run(_ops.fail(job_id, fence, error, retry_at))

    def heartbeat(self, leases: Sequence[tuple[int, int, float]]) -> set[int]:
        """Extend `(job_id, fence, lease_seconds)` leases; returns the ids still held."""
        return self._run(_ops.heartbeat(leases))


class AsyncQueue:
    """`Queue` on a `psycopg.AsyncConnection`: the same methods, awaitable."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def _run(self, operation: Operation[T], *, transaction: bool = False) -> T:
        if not transaction:
            return await _ops.execute_async(self.conn, operation)
        try:
            if _opens_caller_transaction(self.conn):
                await _ops.drive_async(self.conn, _ops.open_transaction())
            async with self.conn.transaction():
                return await _ops.drive_async(self.conn, operation)
        except psycopg.Error as exc:
            _ops.raise_translated(exc)
            raise

    async def enqueue(self, task: str, payload: Any, options: EnqueueOptions | None = None) -> int:
        return (await self._run(_ops.enqueue_many([(task, payload, options)])))[0]

    async def enqueue_many(
        self, jobs: Iterable[tuple[str, Any, EnqueueOptions | None]], **extra: Any
    ) -> list[int]:
        return await self._run(_ops.enqueue_many(list(jobs), **extra))

    async def sync_concurrency_policies(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> list[ConcurrencyPolicy]:
        operation = _ops.sync_policies(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[1]

    async def sync_report(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> SyncReport:
        operation = _ops.sync_policies(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[0]

    async def list_concurrency_policies(
        self, namespace: str | None = None
    ) -> list[ConcurrencyPolicy]:
        return await self._run(_ops.list_policies(namespace))

    async def sync_schedules(
        self,
        namespace: str,
        definitions: Iterable[ScheduleDefinition],
        prune: bool = True,
    ) -> list[Schedule]:
        operation = _ops.sync_schedules(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[1]

    async def sync_schedules_report(
        self,
        namespace: str,
        definitions: Iterable[ScheduleDefinition],
        prune: bool = True,
    ) -> SyncReport:
        operation = _ops.sync_schedules(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[0]

    async def list_schedules(self, namespace: str | None = None) -> list[Schedule]:
        return await self._run(_ops.list_schedules(namespace))

    async def health(self) -> QueueHealth:
        return await self._run(_ops.health())

    async def get_job(self, job_id: int) -> Job | None:
        return await self._run(_ops.get_job(job_id))

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: str | None = None,
        key: str | None = None,
        task: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        return await self._run(
            _ops.list_jobs(queue=queue, status=status, key=key, task=task, limit=limit)
        )

    async def retry_jobs(self, ids: Iterable[int]) -> list[int]:
        return await self._run(_ops.retry_jobs(ids))

    async def cancel_jobs(self, ids: Iterable[int]) -> list[int]:
        return await self._run(_ops.cancel_jobs(ids))

    async def prune_jobs(
        self,
        limit: int = 5000,
        *,
        older_than: float | None = None,
        statuses: Sequence[str] | None = None,
    ) -> int:
        return await self._run(_ops.prune_jobs(limit, older_than, statuses))

    async def pause(self, queue: str) -> QueueControl:
        return await self._run(_ops.set_queue_control(queue, "pause"), transaction=True)

    async def resume(self, queue: str) -> QueueControl:
        return await self._run(_ops.set_queue_control(queue, "resume"), transaction=True)

    async def override_policy(
        self,
        queue: str,
        *,
        max_active: int | None = None,
        max_active_per_key: int | None = None,
        rate_limit: str | None = None,
        rate_limit_per_key: str | None = None,
        expires_in: float | None = None,
    ) -> QueueControl:
        operation = _ops.set_queue_control(
            queue, "override", max_active=max_active, max_active_per_key=max_active_per_key,
            rate_limit=rate_limit, rate_limit_per_key=rate_limit_per_key, expires_in=expires_in,
        )
        return await self._run(operation, transaction=True)

    async def clear_override(self, queue: str) -> QueueControl:
        return await self._run(_ops.set_queue_control(queue, "clear_override"), transaction=True)

    async def list_queues(self) -> list[QueueSummary]:
        return await self._run(_ops.list_queues())

    async def list_workers(self) -> list[WorkerInfo]:
        return await self._run(_ops.list_workers())

    async def install_schema(self) -> None:
        await self._run(_ops.install_schema(), transaction=True)

    async def schema_version(self) -> int:
        return await self._run(_ops.schema_version())

    async def claim(self, queue: str, limit: int, lease: float) -> list[ClaimedJob]:
        return await self._run(_ops.claim(queue, limit, lease))

    async def complete_many(self, outcomes: Sequence[tuple[int, int, Any]]) -> set[int]:
        return await self._run(_ops.complete(outcomes))

    async def complete(self, job_id: int, fence: int, result: Any = None) -> None:
        if not await self.complete_many([(job_id, fence, result)]):
            raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the result was discarded")

    async def fail(
        self, job_id: int, fence: int, error: dict[str, Any], retry_at: datetime | None = None
    ) -> JobStatus:
        return await self._run(_ops.fail(job_id, fence, error, retry_at))

    async def heartbeat(self, leases: Sequence[tuple[int, int, float]]) -> set[int]:
        return await self._run(_ops.heartbeat(leases))


__all__ = [
    "PAYLOAD_LIMIT",
    "AsyncQueue",
    "Queue",
    "WorkhorseError",
    "encode_json",
    "error_document",
]
