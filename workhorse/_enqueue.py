"""How an App's calls reach the database: where it is, the pools, the caller's connection
(`app.using`), the diversions of `eager()`, and every call that sends a statement: enqueue, read,
cancel and retry here, and `App.sync` (app.py) through the same drivers.

Each call is written once, as a *plan*: a generator that yields `_ops` operations and receives each
one's result, as `_ops` itself does one level down for statements. `_run(plan)` drives a plan on a
`psycopg.Connection`, `_run_async(plan)` on a `psycopg.AsyncConnection`: the caller's when there
is one, else a pooled one that commits when the plan ends. An operation's error is thrown back into
the plan, so that what the plan holds open (the enqueue span) sees it.

`AppEnqueuer` is the half of App that Task and JobHandle talk to (handle.py's `Enqueuer`); App
adds the declarations and the registry.
"""

from __future__ import annotations

import contextvars
import os
import threading
import weakref
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Protocol, TypeVar, runtime_checkable

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from . import _ops, _results, database, telemetry
from ._calls import Call
from .errors import InvalidOptionsError
from .handle import Enqueuer, JobHandle, WorkflowHandle
from .types import Attempt, Job, Step

T = TypeVar("T")
# A call written once for both flavours: yields operations, receives their results, returns T.
Plan = Generator[_ops.Operation[Any], Any, T]

_current_connection: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "workhorse_connection", default=None
)
# Apps whose enqueues go elsewhere in this context (workhorse.testing.eager): (app, enqueuer).
_diversions: contextvars.ContextVar[tuple[tuple[AppEnqueuer, Enqueuer], ...]] = (
    contextvars.ContextVar("workhorse_diversions", default=())
)
# Every App of this process, so that a framework can close them all at once (Django, before it
# drops its test databases).
_apps: weakref.WeakSet[AppEnqueuer] = weakref.WeakSet()


@runtime_checkable
class WorkflowRunner(Protocol):
    """A diversion that runs a flattened canvas itself (`workhorse.testing.eager`'s does)."""

    def run_workflow(self, members: Sequence[_ops.WorkflowMember], result: Sequence[int],
                     kind: str) -> WorkflowHandle: ...


def close_every_app() -> None:
    """Close the pools of every App in this process (a later call opens new ones, on the
    database the rule then names).

    >>> close_every_app()
    """
    for app in list(_apps):
        app.close()


def _single(operation: _ops.Operation[T]) -> Plan[T]:
    """The plan of one operation."""
    result: T = yield operation
    return result


def _drive(conn: psycopg.Connection[Any], plan: Plan[T]) -> T:
    try:
        operation = next(plan)
        while True:
            try:
                result = _ops.execute(conn, operation)
            except BaseException as exc:
                operation = plan.throw(exc)
            else:
                operation = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


async def _drive_async(conn: psycopg.AsyncConnection[Any], plan: Plan[T]) -> T:
    try:
        operation = next(plan)
        while True:
            try:
                result = await _ops.execute_async(conn, operation)
            except BaseException as exc:
                operation = plan.throw(exc)
            else:
                operation = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


class AppEnqueuer(Enqueuer):
    """Where an app's database is, and how its calls reach it.

    >>> app = App("docs", database_url="postgresql://localhost/app")
    >>> app.database_url
    'postgresql://localhost/app'
    """

    # Set by App.
    name: str
    retention: dict[str, float | None]

    def __init__(self, database_url: str | None = None) -> None:
        self._database_url = database_url  # given in code (or by the CLI's flag)
        self._resolved_url: str | None = None  # what the rule named at first use, otherwise
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._async_pool: AsyncConnectionPool | None = None
        self._pool_pid = os.getpid()
        _apps.add(self)

    # ---- the database ------------------------------------------------------------------------

    @property
    def database_url(self) -> str:
        """The DSN: the constructor's (or the one set here), else the framework's (Django's
        database, under `workhorse.contrib.django`), else WORKHORSE_DATABASE_URL, else the
        embedded server; read at first use, not at import. Setting it (the CLI's
        --database-url) is allowed only before the pools open.

        >>> App("docs", database_url="postgresql://db.internal/billing").database_url
        'postgresql://db.internal/billing'
        """
        if self._database_url is not None:
            return str(self._database_url)
        if self._resolved_url is None:
            self._resolved_url = database.resolve_url(None)
        return self._resolved_url

    @database_url.setter
    def database_url(self, url: str) -> None:
        if self._pool is not None or self._async_pool is not None:
            raise InvalidOptionsError("the app's pools are open: set database_url before use")
        self._database_url = url

    @property
    def explicit_database_url(self) -> str | None:
        """The URL given in code (`App(database_url=...)`) or set on the app (the CLI's
        --database-url), or None when the app follows the rule.

        >>> App("docs").explicit_database_url is None
        True
        """
        return self._database_url

    def _forget_inherited_pools(self) -> None:
        # A forked child must not touch its parent's sockets: drop the pools without closing.
        if self._pool_pid != os.getpid():
            self._pool = None
            self._async_pool = None
            self._pool_pid = os.getpid()

    @property
    def pool(self) -> ConnectionPool:
        """The app's connection pool, opened (and the schema installed) on first use.

        >>> with app.pool.connection() as conn:                       # doctest: +SKIP
        ...     conn.execute("SELECT 1").fetchone()
        (1,)
        """
        self._forget_inherited_pools()
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    url = self.database_url
                    database.ensure_schema(url)
                    self._pool = ConnectionPool(
                        url, min_size=1, max_size=8, open=True, name=f"workhorse-{self.name}",
                        kwargs={"application_name": database.application_name("app")},
                    )
        return self._pool

    async def _get_async_pool(self) -> AsyncConnectionPool:
        self._forget_inherited_pools()
        if self._async_pool is None:
            url = self.database_url
            database.ensure_schema(url)
            pool = AsyncConnectionPool(
                url, min_size=1, max_size=8, open=False, name=f"workhorse-{self.name}-async",
                kwargs={"application_name": database.application_name("app-async")},
            )
            await pool.open()
            if self._async_pool is None:
                self._async_pool = pool
            else:
                await pool.close()
        return self._async_pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; its transaction commits when the block exits cleanly.

        >>> with app.connection() as conn:                            # doctest: +SKIP
        ...     Queue(conn).health().depth
        {'ready': 3}
        """
        with self.pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def async_connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled async connection; its transaction commits when the block exits cleanly.

        >>> async with app.async_connection() as conn:                # doctest: +SKIP
        ...     (await AsyncQueue(conn).health()).depth
        {'ready': 3}
        """
        pool = await self._get_async_pool()
        async with pool.connection() as conn:
            yield conn

    def close(self) -> None:
        """Close the app's pool (a later call opens a new one, on the database the rule names
        then: under `manage.py test`, the test database once it exists).

        >>> app.close()                                               # doctest: +SKIP
        """
        self._forget_inherited_pools()
        with self._lock:
            pool, self._pool = self._pool, None
            self._resolved_url = None
        if pool is not None:
            pool.close()

    async def close_async(self) -> None:
        """Close the app's pools, the async one and the sync one.

        >>> await app.close_async()                                   # doctest: +SKIP
        """
        self._forget_inherited_pools()
        if self._async_pool is not None:
            await self._async_pool.close()
            self._async_pool = None
        self.close()

    # ---- which connection --------------------------------------------------------------------

    @contextmanager
    def using(self, conn: Any) -> Iterator[Any]:
        """Enqueue on the caller's connection, inside its transaction, within this block.

        >>> with conn.transaction(), app.using(conn):                 # doctest: +SKIP
        ...     send.delay({"tenant": "t1"})      # commits or rolls back with the caller's writes
        """
        token = _current_connection.set(conn)
        try:
            yield conn
        finally:
            _current_connection.reset(token)

    @contextmanager
    def diverted(self, enqueuer: Enqueuer) -> Iterator[Enqueuer]:
        """Within this block (in this context: this thread, and the tasks and threads that copy
        it), this app's enqueues go to `enqueuer` instead of the database. How
        `workhorse.testing.eager` runs tasks in-process.

        >>> with app.diverted(recorder):                              # doctest: +SKIP
        ...     send.delay({"tenant": "t1"})      # reaches recorder.enqueue_calls
        """
        token = _diversions.set(((self, enqueuer), *_diversions.get()))
        try:
            yield enqueuer
        finally:
            _diversions.reset(token)

    def _diversion(self) -> Enqueuer | None:
        for app, enqueuer in _diversions.get():
            if app is self:
                return enqueuer
        return None

    def _caller(self, connection: Any, flavour: type[Any]) -> Any:
        """The connection an enqueue goes on: `connection=`, else the `using()` one, else the
        framework's transaction this app joins (None: a pooled one); InvalidOptionsError when
        it is not of the caller's flavour."""
        conn = connection if connection is not None else _current_connection.get()
        if conn is None:
            return self._joined(flavour)
        if not isinstance(conn, flavour):
            raise InvalidOptionsError(
                "this connection is async: use delay_async/enqueue_async"
                if flavour is psycopg.Connection
                else "this connection is not async: use delay/apply_async")
        return conn

    def _using(self, flavour: type[Any]) -> Any:
        """The `using()` connection when it is of this flavour, else the framework's
        transaction this app joins (None: a pooled one)."""
        conn = _current_connection.get()
        if conn is None:
            return self._joined(flavour)
        return conn if isinstance(conn, flavour) else None

    def _joined(self, flavour: type[Any]) -> Any:
        # Only sync code joins: a framework's transaction (Django's) is on a sync connection.
        if flavour is not psycopg.Connection:
            return None
        return database.framework_connection(self._database_url)

    def _run(self, plan: Plan[T], conn: psycopg.Connection[Any] | None = None, *,
             transaction: bool = False) -> T:
        """`plan` on `conn` (inside the caller's transaction), else on a pooled connection that
        commits when it ends (`transaction`: in one explicit transaction)."""
        if conn is not None:
            return _drive(conn, plan)
        with self.connection() as pooled:
            if not transaction:
                return _drive(pooled, plan)
            with pooled.transaction():
                return _drive(pooled, plan)

    async def _run_async(self, plan: Plan[T], conn: psycopg.AsyncConnection[Any] | None = None,
                         *, transaction: bool = False) -> T:
        if conn is not None:
            return await _drive_async(conn, plan)
        pool = await self._get_async_pool()
        async with pool.connection() as pooled:
            if not transaction:
                return await _drive_async(pooled, plan)
            async with pooled.transaction():
                return await _drive_async(pooled, plan)

    # ---- enqueue -----------------------------------------------------------------------------

    def _enqueue(self, calls: Sequence[Call]) -> Plan[list[JobHandle]]:
        with telemetry.enqueue_span(calls[0].task, calls[0].options.queue) as meta:
            unique = any(c.arguments is not None for c in calls)
            outcomes = yield _ops.enqueue_outcomes(
                [(c.task, c.payload, c.options) for c in calls],
                on_failure=[c.on_failure for c in calls], meta=[meta] * len(calls),
                arguments=[c.arguments for c in calls] if unique else None)
        return [JobHandle(job_id, self, duplicate) for job_id, duplicate in outcomes]

    def enqueue_calls(self, calls: Sequence[Call], connection: Any = None) -> list[JobHandle]:
        """Enqueue resolved calls in one round trip, on `connection`, the `using()` connection,
        or a pooled one (what `delay`, `apply_async` and `map` call).

        >>> [h] = app.enqueue_calls([send.call(({"tenant": "t1"},))])  # doctest: +SKIP
        """
        if not calls:
            return []
        diverted = self._diversion()
        if diverted is not None:
            return diverted.enqueue_calls(calls, connection)
        return self._run(self._enqueue(calls), self._caller(connection, psycopg.Connection))

    async def enqueue_calls_async(
        self, calls: Sequence[Call], connection: Any = None
    ) -> list[JobHandle]:
        """`enqueue_calls` for async code, on an async connection.

        >>> [h] = await app.enqueue_calls_async([send.call(({"tenant": "t1"},))])  # doctest: +SKIP
        """
        if not calls:
            return []
        diverted = self._diversion()
        if diverted is not None:
            return await diverted.enqueue_calls_async(calls, connection)
        conn = self._caller(connection, psycopg.AsyncConnection)
        return await self._run_async(self._enqueue(calls), conn)

    def enqueue_many(self, calls: Iterable[Call]) -> list[JobHandle]:
        """Bulk enqueue in one round trip.

        >>> handles = app.enqueue_many([send.call((m,)) for m in messages])  # doctest: +SKIP
        """
        return self.enqueue_calls(list(calls))

    # ---- workflows (docs/design.md "Workflows") --------------------------------------------------

    def _workflow_runner(self) -> WorkflowRunner | None:
        diverted = self._diversion()
        if diverted is None:
            return None
        if not isinstance(diverted, WorkflowRunner):
            raise InvalidOptionsError(f"{diverted!r} takes this app's enqueues but no workflow")
        return diverted

    def enqueue_workflow(self, members: Sequence[_ops.WorkflowMember], result: Sequence[int],
                         kind: str, on_error: Any = None,
                         connection: Any = None) -> WorkflowHandle:
        """Insert a flattened canvas in one transaction; its WorkflowHandle (handle.py).

        >>> app.enqueue_workflow(plan.members, plan.result, plan.kind)  # doctest: +SKIP
        WorkflowHandle(id=7)
        """
        runner = self._workflow_runner()
        if runner is not None:
            return runner.run_workflow(members, result, kind)
        operation = _ops.enqueue_workflow(members, result, kind, on_error)
        workflow_id, ids = self._run(_single(operation),
                                     self._caller(connection, psycopg.Connection),
                                     transaction=True)
        return WorkflowHandle(workflow_id, self, member_ids=tuple(ids))

    async def enqueue_workflow_async(
        self, members: Sequence[_ops.WorkflowMember], result: Sequence[int], kind: str,
        on_error: Any = None, connection: Any = None,
    ) -> WorkflowHandle:
        """`enqueue_workflow` for async code.

        >>> await app.enqueue_workflow_async(plan.members, plan.result, plan.kind)  # doctest: +SKIP
        WorkflowHandle(id=7)
        """
        runner = self._workflow_runner()
        if runner is not None:
            return runner.run_workflow(members, result, kind)
        operation = _ops.enqueue_workflow(members, result, kind, on_error)
        conn = self._caller(connection, psycopg.AsyncConnection)
        workflow_id, ids = await self._run_async(_single(operation), conn, transaction=True)
        return WorkflowHandle(workflow_id, self, member_ids=tuple(ids))

    def workflow(self, workflow_id: int) -> WorkflowHandle:
        """The WorkflowHandle of an existing workflow, from its id, in any process.

        >>> app.workflow(7).get(timeout=60)                           # doctest: +SKIP
        [1, 2, 3]
        """
        if isinstance(workflow_id, bool) or not isinstance(workflow_id, int):
            raise InvalidOptionsError(f"a workflow id is an int, got {workflow_id!r}")
        return WorkflowHandle(workflow_id, self)

    def workflow_jobs(self, workflow_id: int) -> list[Job]:
        """A workflow's members, in insertion order.

        >>> [j.status for j in app.workflow_jobs(7)]                # doctest: +SKIP
        [<JobStatus.SUCCEEDED: 'succeeded'>, <JobStatus.WAITING: 'waiting'>]
        """
        return self._run(_single(_ops.workflow_jobs(workflow_id)),
                         self._using(psycopg.Connection))

    def workflow_row(self, workflow_id: int) -> tuple[Any, ...] | None:
        """A workflow's own row (id, result members, result kind, on_error job, created_at).

        >>> app.workflow_row(7)[1:3]                                  # doctest: +SKIP
        ([12], 'one')
        """
        return self._run(_single(_ops.workflow_row(workflow_id)),
                         self._using(psycopg.Connection))

    # ---- results and control -----------------------------------------------------------------

    def get_job(self, job_id: int) -> Job | None:
        """The job with this id (on the `using()` connection, else a pooled one), or None.

        >>> app.get_job(42).status                                    # doctest: +SKIP
        <JobStatus.SUCCEEDED: 'succeeded'>
        """
        return self._run(_single(_ops.get_job(job_id)), self._using(psycopg.Connection))

    async def get_job_async(self, job_id: int) -> Job | None:
        """`get_job` for async code.

        >>> (await app.get_job_async(42)).status                      # doctest: +SKIP
        <JobStatus.SUCCEEDED: 'succeeded'>
        """
        conn = self._using(psycopg.AsyncConnection)
        return await self._run_async(_single(_ops.get_job(job_id)), conn)

    def get_attempts(self, job_id: int) -> list[Attempt] | None:
        """The attempts of the job with this id, oldest first (see `JobHandle.attempts`), or
        None when there is no such job.

        >>> [a.outcome for a in app.get_attempts(42)]                # doctest: +SKIP
        ['retried', 'succeeded']
        """
        return self._run(_single(_ops.job_attempts(job_id)), self._using(psycopg.Connection))

    async def get_attempts_async(self, job_id: int) -> list[Attempt] | None:
        """`get_attempts` for async code.

        >>> [a.outcome for a in await app.get_attempts_async(42)]    # doctest: +SKIP
        ['retried', 'succeeded']
        """
        conn = self._using(psycopg.AsyncConnection)
        return await self._run_async(_single(_ops.job_attempts(job_id)), conn)

    def signal(self, job: Any, name: str, payload: Any = None, key: str | None = None) -> bool:
        """Send signal `name` to a job (a JobHandle or an id) on the `using()` connection, else a
        pooled one, committed (docs/design.md "Signals"): a wait for it takes it, and the job, if
        suspended waiting for it, is ready again. With `key`, a repeat is ignored (False).

        >>> app.signal(handle, "approval", {"by": "ana"}, key="ticket-7")  # doctest: +SKIP
        True
        """
        operation = _ops.signal(_job_id_of(job), name, payload, key)
        return bool(self._run(_single(operation), self._using(psycopg.Connection)))

    async def signal_async(self, job: Any, name: str, payload: Any = None,
                           key: str | None = None) -> bool:
        """`signal` for async code.

        >>> await app.signal_async(42, "approval", {"by": "ana"})     # doctest: +SKIP
        True
        """
        operation = _ops.signal(_job_id_of(job), name, payload, key)
        return bool(await self._run_async(_single(operation), self._using(psycopg.AsyncConnection)))

    def get_steps(self, job_id: int) -> list[Step]:
        """The steps of the job with this id (see `JobHandle.steps`).

        >>> [s.name for s in app.get_steps(42)]                       # doctest: +SKIP
        ['charge', 'cool-off']
        """
        steps, _ = self._run(_single(_ops.job_steps(job_id)), self._using(psycopg.Connection))
        return list(steps)

    async def get_steps_async(self, job_id: int) -> list[Step]:
        """`get_steps` for async code.

        >>> [s.name for s in await app.get_steps_async(42)]           # doctest: +SKIP
        ['charge', 'cool-off']
        """
        conn = self._using(psycopg.AsyncConnection)
        steps, _ = await self._run_async(_single(_ops.job_steps(job_id)), conn)
        return list(steps)

    def handle(self, job_id: int) -> JobHandle:
        """The handle of an existing job, from its id, in any process.

        >>> app.handle(42).get(timeout=10)                            # doctest: +SKIP
        5
        """
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise InvalidOptionsError(f"a job id is an int, got {job_id!r}")
        return JobHandle(job_id, self)

    def cancel(self, ids: Sequence[int]) -> list[int]:
        """Cancel jobs: scheduled, ready or held ones at once, running ones by request (they
        end canceled when their handler returns). Returns the ids it changed.

        >>> app.cancel([41, 42])                                      # doctest: +SKIP
        [42]
        """
        operation = _ops.cancel_jobs(ids, _ops.retention_json(self.retention))
        return self._run(_single(operation), self._using(psycopg.Connection))

    def retry(self, ids: Sequence[int]) -> list[int]:
        """Failed, held or canceled jobs become ready with a fresh set of attempts. Returns the
        ids it changed.

        >>> app.retry([41, 42])                                       # doctest: +SKIP
        [41]
        """
        return self._run(_single(_ops.retry_jobs(ids)), self._using(psycopg.Connection))

    def wait_for(self, job_id: int, timeout: float | None) -> bool:
        """Block until the job may have reached a resting status (True) or `timeout` passed
        (what `JobHandle.wait` sleeps on).

        >>> app.wait_for(42, timeout=10)                              # doctest: +SKIP
        True
        """
        return _results.waiter(self.database_url).wait(job_id, timeout)

    async def wait_for_async(self, job_id: int, timeout: float | None) -> bool:
        """`wait_for` for async code.

        >>> await app.wait_for_async(42, timeout=10)                  # doctest: +SKIP
        True
        """
        return await _results.waiter(self.database_url).wait_async(job_id, timeout)


def _job_id_of(job: Any) -> int:
    """A job's id, from a JobHandle or the id itself (checked by the operation)."""
    return job.id if isinstance(job, JobHandle) else job
