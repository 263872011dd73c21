"""`Queue` and `AsyncQueue`: the database API on a caller-owned connection.

Each method drives one operation of `_ops` (where the statements and row mappings live), so
the sync and async twins share every statement and every row mapping.

The caller owns the connection and its transaction: nothing here commits. Worker-side calls
(claim, complete, fail, heartbeat) expect an autocommit connection, because a governed claim holds
its queue's admission lock until its transaction ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg

from . import _ops
from ._driver import PAYLOAD_LIMIT, Operation, T, encode_json, error_document
from ._queue_backoffs import AsyncBackoffMethods, BackoffMethods
from ._queue_dead import AsyncDeadLetterMethods, DeadLetterMethods
from ._queue_durable import AsyncDurableMethods, DurableMethods
from ._queue_history import AsyncHistoryMethods, HistoryMethods
from ._queue_key_limits import AsyncKeyLimitMethods, KeyLimitMethods
from .errors import StaleLeaseError, WorkhorseError
from .handle import dependencies
from .types import (
    Budget,
    BudgetDefinition,
    BudgetOverride,
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


Jobs = Iterable[tuple[str, Any, EnqueueOptions | None]]


def _with_dependencies_resolved(jobs: Jobs) -> list[tuple[str, Any, EnqueueOptions | None]]:
    """`jobs`, each `depends_on` handle turned into what the enqueue reads, with no I/O: job ids,
    and for a WorkflowHandle its workflow, whose result members the enqueue reads on this
    connection (inside the caller's transaction). A malformed job is left for the enqueue to
    refuse."""
    resolved = []
    for item in jobs:
        options = item[2] if isinstance(item, tuple) and len(item) == 3 else None
        if isinstance(options, EnqueueOptions) and options.depends_on:
            item = (item[0], item[1],
                    replace(options, depends_on=tuple(dependencies(options.depends_on))))
        resolved.append(item)
    return resolved


class Queue(DeadLetterMethods, HistoryMethods, BackoffMethods, KeyLimitMethods, DurableMethods):
    """Enqueue, sync policies and inspect jobs on a caller-owned `psycopg.Connection`.

    >>> q = Queue(conn)                                           # doctest: +SKIP
    >>> job_id = q.enqueue("mail.send", {"args": [7], "kwargs": {}},  # doctest: +SKIP
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
        """Enqueue one job in the caller's transaction; returns its id.

        >>> job_id = q.enqueue("mail.send", {"args": [7], "kwargs": {}},  # doctest: +SKIP
        ...                    EnqueueOptions(queue="mail", concurrency_key="t1"))
        """
        jobs = _with_dependencies_resolved([(task, payload, options)])
        return self._run(_ops.enqueue_many(jobs))[0]

    def enqueue_many(
        self, jobs: Iterable[tuple[str, Any, EnqueueOptions | None]], **extra: Any
    ) -> list[int]:
        """Enqueue many jobs in one round trip; ids come back in input order.

        >>> q.enqueue_many([("mail.send", {"args": [8], "kwargs": {}}, None),  # doctest: +SKIP
        ...                 ("mail.send", {"args": [9], "kwargs": {}}, None)])
        [43, 44]
        """
        return self._run(_ops.enqueue_many(_with_dependencies_resolved(jobs), **extra))

    def enqueue_outcomes(
        self, jobs: Iterable[tuple[str, Any, EnqueueOptions | None]], **extra: Any
    ) -> list[tuple[int, bool]]:
        """`enqueue_many`, with each job's `(id, duplicate)`: duplicate is True when no row was
        inserted (an idempotency hit, a unique duplicate, a job_key update: the id is the
        existing job's), what `JobHandle.duplicate` says at the app layer.

        >>> opts = EnqueueOptions(queue="sync", job_key="sync:42", delay=5)  # doctest: +SKIP
        >>> job = ("sync.user", {"args": [42], "kwargs": {}}, opts)      # doctest: +SKIP
        >>> q.enqueue_outcomes([job, job])                               # doctest: +SKIP
        [(45, False), (45, True)]
        """
        return self._run(_ops.enqueue_outcomes(_with_dependencies_resolved(jobs), **extra))

    def sync_concurrency_policies(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> list[ConcurrencyPolicy]:
        """Make `namespace`'s stored policies equal `definitions`; returns that namespace's rows.

        Upserts each definition; with `prune`, deletes this namespace's other queues. A queue
        owned by another namespace raises PolicyConflictError and nothing is written.

        >>> q.sync_concurrency_policies("workers", [                  # doctest: +SKIP
        ...     ConcurrencyPolicyDefinition(queue="mail", max_active=20, max_active_per_key=3)])
        [ConcurrencyPolicy(namespace='workers', queue='mail', max_active=20, ...)]
        """
        return self._run(_ops.sync_policies(namespace, definitions, prune), transaction=True)[1]

    def sync_report(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """As `sync_concurrency_policies`, but returns what changed.

        >>> q.sync_report("workers", [ConcurrencyPolicyDefinition("mail", 20)])  # doctest: +SKIP
        SyncReport(created=[], updated=['mail'], pruned=[], unchanged=[], schedules=None)
        """
        return self._run(_ops.sync_policies(namespace, definitions, prune), transaction=True)[0]

    def sync_budgets(
        self,
        namespace: str,
        definitions: Iterable[BudgetDefinition],
        prune: bool = True,
    ) -> list[Budget]:
        """Make `namespace`'s stored budgets equal `definitions` (docs/design.md "Named budgets");
        returns that namespace's budgets. With `prune`, deletes its other budgets. A budget
        another namespace owns raises PolicyConflictError and nothing is written.

        >>> q.sync_budgets("billing", [BudgetDefinition("openai", max_active=50)])  # doctest: +SKIP
        [Budget(namespace='billing', name='openai', max_active=50, ...)]
        """
        return self._run(_ops.sync_budgets(namespace, definitions, prune), transaction=True)[1]

    def sync_budgets_report(
        self,
        namespace: str,
        definitions: Iterable[BudgetDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """As `sync_budgets`, but returns what changed (budget names).

        >>> q.sync_budgets_report("billing", []).pruned               # doctest: +SKIP
        ['openai']
        """
        return self._run(_ops.sync_budgets(namespace, definitions, prune), transaction=True)[0]

    def list_budgets(self, namespace: str | None = None) -> list[Budget]:
        """Every declared budget, or one namespace's, each with its override.

        >>> [b.name for b in q.list_budgets()]                        # doctest: +SKIP
        ['openai']
        """
        return self._run(_ops.list_budgets(namespace))

    def override_budget(
        self,
        name: str,
        *,
        max_active: int | None = None,
        rate_limit: str | None = None,
        rate_burst: int | None = None,
        expires_in: float | None = None,
    ) -> BudgetOverride | None:
        """Replace the named fields of budget `name` (declared or not) until
        `clear_budget_override` or until `expires_in` seconds pass. A sync never removes it.

        >>> q.override_budget("openai", max_active=10, expires_in=3600).max_active  # doctest: +SKIP
        10
        """
        operation = _ops.set_budget_control(name, "override", max_active=max_active,
                                            rate_limit=rate_limit, rate_burst=rate_burst,
                                            expires_in=expires_in)
        return self._run(operation, transaction=True)

    def clear_budget_override(self, name: str) -> None:
        """Remove budget `name`'s override: its declared limits apply again.

        >>> q.clear_budget_override("openai")                         # doctest: +SKIP
        """
        self._run(_ops.set_budget_control(name, "clear_override"), transaction=True)

    def list_concurrency_policies(self, namespace: str | None = None) -> list[ConcurrencyPolicy]:
        """Every stored policy, or one namespace's.

        >>> [policy.queue for policy in q.list_concurrency_policies("workers")]  # doctest: +SKIP
        ['mail']
        """
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

        >>> q.sync_schedules("billing", [                             # doctest: +SKIP
        ...     ScheduleDefinition(name="digest", task="mail.digest", cron="0 9 * * *")])
        [Schedule(namespace='billing', name='digest', ...)]
        """
        return self._run(_ops.sync_schedules(namespace, definitions, prune), transaction=True)[1]

    def sync_schedules_report(
        self,
        namespace: str,
        definitions: Iterable[ScheduleDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """As `sync_schedules`, but returns what changed, by schedule name.

        >>> q.sync_schedules_report("billing", [], prune=True).pruned  # doctest: +SKIP
        ['digest']
        """
        return self._run(_ops.sync_schedules(namespace, definitions, prune), transaction=True)[0]

    def list_schedules(self, namespace: str | None = None) -> list[Schedule]:
        """Every stored schedule (or one namespace's), with its next and last run.

        >>> [schedule.name for schedule in q.list_schedules("billing")]  # doctest: +SKIP
        ['digest']
        """
        return self._run(_ops.list_schedules(namespace))

    def health(self) -> QueueHealth:
        """Per-policy limit, active, available, blocked_ready, saturated keys; depth by status.

        >>> health = q.health()                                       # doctest: +SKIP
        >>> health.depth["ready"], [p.available for p in health.policies]  # doctest: +SKIP
        (3, [17])
        """
        return self._run(_ops.health())

    def get_job(self, job_id: int) -> Job | None:
        """The job with this id, or None when there is none (or retention pruned it).

        >>> q.get_job(job_id).status                                  # doctest: +SKIP
        <JobStatus.READY: 'ready'>
        """
        return self._run(_ops.get_job(job_id))

    def workflow_jobs(self, workflow_id: int) -> list[Job]:
        """A workflow's members in insertion order (empty: no such workflow).

        >>> [j.status for j in q.workflow_jobs(7)]                    # doctest: +SKIP
        [<JobStatus.SUCCEEDED: 'succeeded'>, <JobStatus.WAITING: 'waiting'>]
        """
        return self._run(_ops.workflow_jobs(workflow_id))

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: str | None = None,
        key: str | None = None,
        task: str | None = None,
        tag: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """The newest jobs first, filtered by any of queue, status, key, task and tag.

        >>> [job.id for job in q.list_jobs(queue="mail", status="failed")]  # doctest: +SKIP
        [41, 40]
        >>> [job.id for job in q.list_jobs(tag="order-1234")]         # doctest: +SKIP
        [57, 56]
        """
        return self._run(
            _ops.list_jobs(queue=queue, status=status, key=key, task=task, tag=tag, limit=limit)
        )

    def retry_jobs(self, ids: Iterable[int] = (), *, tag: str | None = None) -> list[int]:
        """Held, failed or canceled jobs become ready with a fresh set of attempts: these, and
        every such job of `tag`.

        >>> q.retry_jobs([40, 41])          # 40 had already succeeded  # doctest: +SKIP
        [41]
        >>> q.retry_jobs(tag="order-1234")                             # doctest: +SKIP
        [56]
        """
        return self._run(_ops.retry_jobs(ids, tag))

    def cancel_jobs(self, ids: Iterable[int] = (), *, tag: str | None = None) -> list[int]:
        """Cancel jobs that have not finished (a running one by request: it ends canceled when
        its handler returns): these, and every such job of `tag`; returns the ids canceled or
        asked to cancel.

        >>> q.cancel_jobs([42])                                       # doctest: +SKIP
        [42]
        >>> q.cancel_jobs(tag="tenant:acme")                           # doctest: +SKIP
        [57, 58]
        """
        return self._run(_ops.cancel_jobs(ids, tag=tag))

    def prune_jobs(
        self,
        limit: int = 5000,
        *,
        older_than: float | None = None,
        statuses: Sequence[str] | None = None,
    ) -> int:
        """Delete up to `limit` finished jobs whose retention expired (or, with `older_than`
        seconds, those of `statuses` that finished that long ago); -1 while another pruner
        runs.

        >>> q.prune_jobs(older_than=86400, statuses=["succeeded"])    # doctest: +SKIP
        120
        """
        return self._run(_ops.prune_jobs(limit, older_than, statuses))

    def pause(self, queue: str) -> QueueControl:
        """A paused queue admits nothing (governed or not); running jobs finish. Claims in
        flight finish first; none admits after the pause commits. A sync never removes it.

        >>> q.pause("mail").paused                                    # doctest: +SKIP
        True
        """
        return self._run(_ops.set_queue_control(queue, "pause"), transaction=True)

    def resume(self, queue: str) -> QueueControl:
        """Undo a pause; workers are woken at once.

        >>> q.resume("mail").paused                                   # doctest: +SKIP
        False
        """
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
        rate_burst: int | None = None,
        rate_burst_per_key: int | None = None,
    ) -> QueueControl:
        """Replace the named fields of `queue`'s policy (any queue, governed or not) until
        `clear_override` or until `expires_in` seconds pass. A sync never removes it. Bursts
        must fit the rates in force (the claim enforces them in a later step).

        >>> q.override_policy("openai-api", max_active=2, expires_in=3600)   # doctest: +SKIP
        """
        operation = _ops.set_queue_control(
            queue, "override", max_active=max_active, max_active_per_key=max_active_per_key,
            rate_limit=rate_limit, rate_limit_per_key=rate_limit_per_key, expires_in=expires_in,
            rate_burst=rate_burst, rate_burst_per_key=rate_burst_per_key,
        )
        return self._run(operation, transaction=True)

    def clear_override(self, queue: str) -> QueueControl:
        """Remove `queue`'s override: its synced policy applies again.

        >>> q.clear_override("openai-api").override is None           # doctest: +SKIP
        True
        """
        return self._run(_ops.set_queue_control(queue, "clear_override"), transaction=True)

    def list_queues(self) -> list[QueueSummary]:
        """Every queue with live jobs, a policy or a control: depth, limits, paused, override.

        >>> [summary.queue for summary in q.list_queues()]            # doctest: +SKIP
        ['mail', 'openai-api']
        """
        return self._run(_ops.list_queues())

    def list_workers(self) -> list[WorkerInfo]:
        """The registered supervisors, live ones and those not yet pruned.

        >>> [worker.hostname for worker in q.list_workers()]          # doctest: +SKIP
        ['web-1']
        """
        return self._run(_ops.list_workers())

    def install_schema(self) -> None:
        """Create or bring forward the `workhorse` schema. Idempotent; safe to race.

        >>> q.install_schema()                                        # doctest: +SKIP
        """
        self._run(_ops.install_schema(), transaction=True)

    def schema_version(self) -> int:
        """The version of the installed `workhorse` schema (0: none yet).

        >>> q.schema_version() > 0                                    # doctest: +SKIP
        True
        """
        return self._run(_ops.schema_version())

    # worker side
    def claim(self, queue: str, limit: int, lease: float) -> list[ClaimedJob]:
        """Worker side: claim up to `limit` ready jobs of `queue` within its limits, each with
        a lease of `lease` seconds and a new fence (on an autocommit connection).

        >>> [job] = q.claim("mail", 1, 30.0)                          # doctest: +SKIP
        """
        return self._run(_ops.claim(queue, limit, lease))

    def complete_many(self, outcomes: Sequence[tuple[int, int, Any]]) -> set[int]:
        """Worker side: record `(job_id, fence, result)` successes; returns the ids accepted
        (a stale fence records nothing).

        >>> q.complete_many([(job.id, job.fence, {"sent": True})])    # doctest: +SKIP
        {42}
        """
        return self._run(_ops.complete(outcomes))

    def complete(self, job_id: int, fence: int, result: Any = None) -> None:
        """Worker side: record one success; StaleLeaseError when the fence is stale.

        >>> q.complete(job.id, job.fence, {"sent": True})             # doctest: +SKIP
        """
        if not self.complete_many([(job_id, fence, result)]):
            raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the result was discarded")

    def fail(
        self, job_id: int, fence: int, error: dict[str, Any], retry_at: datetime | None = None
    ) -> JobStatus:
        """Worker side: record a failed attempt. The job retries at `retry_at`, or with None
        ends failed (or held, if its task says so). Returns its status afterwards.

        >>> error = {"type": "ValueError", "message": "bad", "traceback": None}
        >>> q.fail(job.id, job.fence, error)                          # doctest: +SKIP
        <JobStatus.FAILED: 'failed'>
        """
        return self._run(_ops.fail(job_id, fence, error, retry_at))

    def heartbeat(self, leases: Sequence[tuple[int, int, float]]) -> set[int]:
        """Extend `(job_id, fence, lease_seconds)` leases; returns the ids still held.

        >>> q.heartbeat([(job.id, job.fence, 30.0)])                  # doctest: +SKIP
        {42}
        """
        return self._run(_ops.heartbeat(leases))


class AsyncQueue(AsyncDeadLetterMethods, AsyncHistoryMethods, AsyncBackoffMethods,
                 AsyncKeyLimitMethods, AsyncDurableMethods):
    """`Queue` on a `psycopg.AsyncConnection`: the same methods, awaitable.

    >>> aq = AsyncQueue(aconn)                                        # doctest: +SKIP
    >>> job_id = await aq.enqueue("mail.send", {"args": [7], "kwargs": {}})  # doctest: +SKIP
    """

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
        """`Queue.enqueue`, awaitable.

        >>> job_id = await aq.enqueue("mail.send", {"args": [7], "kwargs": {}})  # doctest: +SKIP
        """
        jobs = _with_dependencies_resolved([(task, payload, options)])
        return (await self._run(_ops.enqueue_many(jobs)))[0]

    async def enqueue_many(
        self, jobs: Iterable[tuple[str, Any, EnqueueOptions | None]], **extra: Any
    ) -> list[int]:
        """`Queue.enqueue_many`, awaitable.

        >>> await aq.enqueue_many([("mail.send", {"args": [8]}, None)])  # doctest: +SKIP
        [43]
        """
        return await self._run(_ops.enqueue_many(_with_dependencies_resolved(jobs), **extra))

    async def enqueue_outcomes(
        self, jobs: Iterable[tuple[str, Any, EnqueueOptions | None]], **extra: Any
    ) -> list[tuple[int, bool]]:
        """`Queue.enqueue_outcomes`, awaitable.

        >>> await aq.enqueue_outcomes([("sync.user", {"args": [42]}, opts)])  # doctest: +SKIP
        [(45, False)]
        """
        return await self._run(_ops.enqueue_outcomes(_with_dependencies_resolved(jobs), **extra))

    async def sync_concurrency_policies(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> list[ConcurrencyPolicy]:
        """`Queue.sync_concurrency_policies`, awaitable.

        >>> definitions = [ConcurrencyPolicyDefinition("mail", max_active=20)]
        >>> await aq.sync_concurrency_policies("workers", definitions)  # doctest: +SKIP
        [ConcurrencyPolicy(namespace='workers', queue='mail', max_active=20, ...)]
        """
        operation = _ops.sync_policies(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[1]

    async def sync_report(
        self,
        namespace: str,
        definitions: Iterable[ConcurrencyPolicyDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """`Queue.sync_report`, awaitable.

        >>> (await aq.sync_report("workers", [])).pruned              # doctest: +SKIP
        ['mail']
        """
        operation = _ops.sync_policies(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[0]

    async def sync_budgets(
        self,
        namespace: str,
        definitions: Iterable[BudgetDefinition],
        prune: bool = True,
    ) -> list[Budget]:
        """`Queue.sync_budgets`, awaitable.

        >>> defs = [BudgetDefinition("db", max_active=8)]
        >>> await aq.sync_budgets("billing", defs)                    # doctest: +SKIP
        [Budget(namespace='billing', name='db', max_active=8, ...)]
        """
        operation = _ops.sync_budgets(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[1]

    async def sync_budgets_report(
        self,
        namespace: str,
        definitions: Iterable[BudgetDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """`Queue.sync_budgets_report`, awaitable.

        >>> (await aq.sync_budgets_report("billing", [])).pruned      # doctest: +SKIP
        ['db']
        """
        operation = _ops.sync_budgets(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[0]

    async def list_budgets(self, namespace: str | None = None) -> list[Budget]:
        """`Queue.list_budgets`, awaitable.

        >>> [b.name for b in await aq.list_budgets()]                 # doctest: +SKIP
        ['db']
        """
        return await self._run(_ops.list_budgets(namespace))

    async def override_budget(
        self,
        name: str,
        *,
        max_active: int | None = None,
        rate_limit: str | None = None,
        rate_burst: int | None = None,
        expires_in: float | None = None,
    ) -> BudgetOverride | None:
        """`Queue.override_budget`, awaitable.

        >>> await aq.override_budget("db", max_active=2)              # doctest: +SKIP
        """
        operation = _ops.set_budget_control(name, "override", max_active=max_active,
                                            rate_limit=rate_limit, rate_burst=rate_burst,
                                            expires_in=expires_in)
        return await self._run(operation, transaction=True)

    async def clear_budget_override(self, name: str) -> None:
        """`Queue.clear_budget_override`, awaitable.

        >>> await aq.clear_budget_override("db")                      # doctest: +SKIP
        """
        await self._run(_ops.set_budget_control(name, "clear_override"), transaction=True)

    async def list_concurrency_policies(
        self, namespace: str | None = None
    ) -> list[ConcurrencyPolicy]:
        """`Queue.list_concurrency_policies`, awaitable.

        >>> [p.queue for p in await aq.list_concurrency_policies()]   # doctest: +SKIP
        ['mail']
        """
        return await self._run(_ops.list_policies(namespace))

    async def sync_schedules(
        self,
        namespace: str,
        definitions: Iterable[ScheduleDefinition],
        prune: bool = True,
    ) -> list[Schedule]:
        """`Queue.sync_schedules`, awaitable.

        >>> await aq.sync_schedules("billing", [])                    # doctest: +SKIP
        []
        """
        operation = _ops.sync_schedules(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[1]

    async def sync_schedules_report(
        self,
        namespace: str,
        definitions: Iterable[ScheduleDefinition],
        prune: bool = True,
    ) -> SyncReport:
        """`Queue.sync_schedules_report`, awaitable.

        >>> (await aq.sync_schedules_report("billing", [])).pruned    # doctest: +SKIP
        ['digest']
        """
        operation = _ops.sync_schedules(namespace, definitions, prune)
        return (await self._run(operation, transaction=True))[0]

    async def list_schedules(self, namespace: str | None = None) -> list[Schedule]:
        """`Queue.list_schedules`, awaitable.

        >>> [s.name for s in await aq.list_schedules("billing")]      # doctest: +SKIP
        ['digest']
        """
        return await self._run(_ops.list_schedules(namespace))

    async def health(self) -> QueueHealth:
        """`Queue.health`, awaitable.

        >>> (await aq.health()).depth["ready"]                        # doctest: +SKIP
        3
        """
        return await self._run(_ops.health())

    async def get_job(self, job_id: int) -> Job | None:
        """`Queue.get_job`, awaitable.

        >>> (await aq.get_job(job_id)).status                         # doctest: +SKIP
        <JobStatus.READY: 'ready'>
        """
        return await self._run(_ops.get_job(job_id))

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: str | None = None,
        key: str | None = None,
        task: str | None = None,
        tag: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """`Queue.list_jobs`, awaitable.

        >>> [job.id for job in await aq.list_jobs(status="failed")]   # doctest: +SKIP
        [41, 40]
        """
        return await self._run(
            _ops.list_jobs(queue=queue, status=status, key=key, task=task, tag=tag, limit=limit)
        )

    async def retry_jobs(self, ids: Iterable[int] = (), *, tag: str | None = None) -> list[int]:
        """`Queue.retry_jobs`, awaitable.

        >>> await aq.retry_jobs([41])                                 # doctest: +SKIP
        [41]
        """
        return await self._run(_ops.retry_jobs(ids, tag))

    async def cancel_jobs(self, ids: Iterable[int] = (), *, tag: str | None = None
                          ) -> list[int]:
        """`Queue.cancel_jobs`, awaitable.

        >>> await aq.cancel_jobs([42])                                # doctest: +SKIP
        [42]
        """
        return await self._run(_ops.cancel_jobs(ids, tag=tag))

    async def prune_jobs(
        self,
        limit: int = 5000,
        *,
        older_than: float | None = None,
        statuses: Sequence[str] | None = None,
    ) -> int:
        """`Queue.prune_jobs`, awaitable.

        >>> await aq.prune_jobs(limit=1000)                           # doctest: +SKIP
        120
        """
        return await self._run(_ops.prune_jobs(limit, older_than, statuses))

    async def pause(self, queue: str) -> QueueControl:
        """`Queue.pause`, awaitable.

        >>> (await aq.pause("mail")).paused                           # doctest: +SKIP
        True
        """
        return await self._run(_ops.set_queue_control(queue, "pause"), transaction=True)

    async def resume(self, queue: str) -> QueueControl:
        """`Queue.resume`, awaitable.

        >>> (await aq.resume("mail")).paused                          # doctest: +SKIP
        False
        """
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
        rate_burst: int | None = None,
        rate_burst_per_key: int | None = None,
    ) -> QueueControl:
        """`Queue.override_policy`, awaitable.

        >>> await aq.override_policy("openai-api", max_active=2, expires_in=3600)  # doctest: +SKIP
        """
        operation = _ops.set_queue_control(
            queue, "override", max_active=max_active, max_active_per_key=max_active_per_key,
            rate_limit=rate_limit, rate_limit_per_key=rate_limit_per_key, expires_in=expires_in,
            rate_burst=rate_burst, rate_burst_per_key=rate_burst_per_key,
        )
        return await self._run(operation, transaction=True)

    async def clear_override(self, queue: str) -> QueueControl:
        """`Queue.clear_override`, awaitable.

        >>> (await aq.clear_override("openai-api")).override is None  # doctest: +SKIP
        True
        """
        return await self._run(_ops.set_queue_control(queue, "clear_override"), transaction=True)

    async def list_queues(self) -> list[QueueSummary]:
        """`Queue.list_queues`, awaitable.

        >>> [summary.queue for summary in await aq.list_queues()]     # doctest: +SKIP
        ['mail']
        """
        return await self._run(_ops.list_queues())

    async def list_workers(self) -> list[WorkerInfo]:
        """`Queue.list_workers`, awaitable.

        >>> [worker.hostname for worker in await aq.list_workers()]   # doctest: +SKIP
        ['web-1']
        """
        return await self._run(_ops.list_workers())

    async def install_schema(self) -> None:
        """`Queue.install_schema`, awaitable.

        >>> await aq.install_schema()                                 # doctest: +SKIP
        """
        await self._run(_ops.install_schema(), transaction=True)

    async def schema_version(self) -> int:
        """`Queue.schema_version`, awaitable.

        >>> await aq.schema_version() > 0                             # doctest: +SKIP
        True
        """
        return await self._run(_ops.schema_version())

    async def claim(self, queue: str, limit: int, lease: float) -> list[ClaimedJob]:
        """`Queue.claim`, awaitable.

        >>> [job] = await aq.claim("mail", 1, 30.0)                   # doctest: +SKIP
        """
        return await self._run(_ops.claim(queue, limit, lease))

    async def complete_many(self, outcomes: Sequence[tuple[int, int, Any]]) -> set[int]:
        """`Queue.complete_many`, awaitable.

        >>> await aq.complete_many([(job.id, job.fence, None)])       # doctest: +SKIP
        {42}
        """
        return await self._run(_ops.complete(outcomes))

    async def complete(self, job_id: int, fence: int, result: Any = None) -> None:
        """`Queue.complete`, awaitable.

        >>> await aq.complete(job.id, job.fence, {"sent": True})      # doctest: +SKIP
        """
        if not await self.complete_many([(job_id, fence, result)]):
            raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the result was discarded")

    async def fail(
        self, job_id: int, fence: int, error: dict[str, Any], retry_at: datetime | None = None
    ) -> JobStatus:
        """`Queue.fail`, awaitable.

        >>> error = {"type": "ValueError", "message": "bad", "traceback": None}
        >>> await aq.fail(job.id, job.fence, error)                   # doctest: +SKIP
        <JobStatus.SCHEDULED: 'scheduled'>
        """
        return await self._run(_ops.fail(job_id, fence, error, retry_at))

    async def heartbeat(self, leases: Sequence[tuple[int, int, float]]) -> set[int]:
        """`Queue.heartbeat`, awaitable.

        >>> await aq.heartbeat([(job.id, job.fence, 30.0)])           # doctest: +SKIP
        {42}
        """
        return await self._run(_ops.heartbeat(leases))


__all__ = [
    "PAYLOAD_LIMIT",
    "AsyncQueue",
    "Queue",
    "WorkhorseError",
    "encode_json",
    "error_document",
]
