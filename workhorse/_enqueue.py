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

import asyncio
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
from .types import Attempt, Job, Step, check_database_name

DEFAULT = database.DEFAULT_DATABASE

T = TypeVar("T")
# A call written once for both flavours: yields operations, receives their results, returns T.
Plan = Generator[_ops.Operation[Any], Any, T]

# The `using()` connection and the name of the app's database it is a connection to.
_current_connection: contextvars.ContextVar[tuple[Any, str] | None] = contextvars.ContextVar(
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


class _Pools:
    """One database's pools, opened at first use (the schema installed first)."""

    def __init__(self) -> None:
        self.sync: ConnectionPool | None = None
        self.async_: AsyncConnectionPool | None = None
        # The event loop the async pool was opened in: a pool serves that loop only.
        self.async_loop: asyncio.AbstractEventLoop | None = None


class AppEnqueuer(Enqueuer):
    """Where an app's databases are, and how its calls reach them.

    >>> app = App("docs", database_url="postgresql://localhost/app")
    >>> app.database_url
    'postgresql://localhost/app'
    """

    # Set by App.
    name: str
    retention: dict[str, float | None]

    def __init__(self, database_url: str | None = None,
                 databases: dict[str, str] | None = None) -> None:
        # docs/design.md "Several databases": the names and URLs given in code; the default
        # database's URL given in code (or by the CLI's flag) as database_url, or in databases.
        self._databases = database.check_databases(databases) if databases is not None else None
        in_mapping = (self._databases or {}).get(DEFAULT)
        if database_url is not None and in_mapping is not None and in_mapping != database_url:
            raise InvalidOptionsError(
                "database_url= and databases['default'] name two databases: give one")
        self._database_url = database_url if database_url is not None else in_mapping
        self._environment: dict[str, str] | None = None  # WORKHORSE_DATABASES, at first use
        self._resolved_url: str | None = None  # what the rule named at first use, otherwise
        self._lock = threading.Lock()
        self._pools: dict[str, _Pools] = {}
        self._pool_pid = os.getpid()
        _apps.add(self)

    # ---- the databases -----------------------------------------------------------------------

    def _named_urls(self) -> dict[str, str]:
        """The databases named in code, else in WORKHORSE_DATABASES (read once)."""
        if self._databases is not None:
            return self._databases
        if self._environment is None:
            self._environment = database.databases_from_environment() or {}
        return self._environment

    @property
    def database_names(self) -> list[str]:
        """The names of the app's databases, the default one first (docs/design.md "Several
        databases"): `databases=` in code, else WORKHORSE_DATABASES, and always `default`.

        >>> App("docs", databases={"eu": "postgresql://eu.internal/app"}).database_names
        ['default', 'eu']
        """
        named = [n for n in self._named_urls() if n != DEFAULT]
        return [DEFAULT, *named]

    def database_url_of(self, name: str = DEFAULT) -> str:
        """The URL of the app's database `name` (InvalidOptionsError for a name the app does not
        have); `default` is `database_url`.

        >>> App("docs", databases={"eu": "postgresql://eu.internal/app"}).database_url_of("eu")
        'postgresql://eu.internal/app'
        """
        check_database_name(name)
        if name == DEFAULT:
            return self.database_url
        url = self._named_urls().get(name)
        if url is None:
            raise InvalidOptionsError(
                f"app {self.name!r} has no database {name!r} (its databases: "
                f"{', '.join(self.database_names)})")
        return url

    @property
    def database_url(self) -> str:
        """The default database's DSN: the constructor's (or the one set here), else
        `databases["default"]` (in code, else WORKHORSE_DATABASES), else the framework's
        (Django's database, under `workhorse.contrib.django`), else WORKHORSE_DATABASE_URL,
        else the embedded server; read at first use, not at import. Setting it (the CLI's
        --database-url) is allowed only before the pools open.

        >>> App("docs", database_url="postgresql://db.internal/billing").database_url
        'postgresql://db.internal/billing'
        """
        if self._database_url is not None:
            return str(self._database_url)
        if self._resolved_url is None:
            self._resolved_url = database.resolve_url(
                self._named_urls().get(DEFAULT))
        return self._resolved_url

    @database_url.setter
    def database_url(self, url: str) -> None:
        if self._open():
            raise InvalidOptionsError("the app's pools are open: set database_url before use")
        self._database_url = url

    @property
    def explicit_database_url(self) -> str | None:
        """The default database's URL given in code (`App(database_url=...)`, or
        `databases["default"]`), set on the app (the CLI's --database-url) or named by
        WORKHORSE_DATABASES, or None when the app follows the rule (and so may join a
        framework's transaction).

        >>> App("docs").explicit_database_url is None
        True
        """
        if self._database_url is not None:
            return self._database_url
        return self._named_urls().get(DEFAULT)

    def _open(self) -> bool:
        return any(p.sync is not None or p.async_ is not None for p in self._pools.values())

    def _forget_inherited_pools(self) -> None:
        # A forked child must not touch its parent's sockets: drop the pools without closing.
        if self._pool_pid != os.getpid():
            self._pools = {}
            self._pool_pid = os.getpid()

    def _pools_of(self, name: str) -> _Pools:
        check_database_name(name)
        pools = self._pools.get(name)
        if pools is None:
            pools = self._pools.setdefault(name, _Pools())
        return pools

    @property
    def pool(self) -> ConnectionPool:
        """The default database's connection pool, opened (and the schema installed) on first
        use.

        >>> with app.pool.connection() as conn:                       # doctest: +SKIP
        ...     conn.execute("SELECT 1").fetchone()
        (1,)
        """
        return self.pool_of(DEFAULT)

    def pool_of(self, name: str) -> ConnectionPool:
        """The connection pool of the app's database `name` (see `pool`).

        >>> with app.pool_of("eu").connection() as conn:              # doctest: +SKIP
        ...     conn.execute("SELECT 1").fetchone()
        (1,)
        """
        self._forget_inherited_pools()
        pools = self._pools_of(name)
        if pools.sync is None:
            url = self.database_url_of(name)
            with self._lock:
                if pools.sync is None:
                    database.ensure_schema(url)
                    suffix = "" if name == DEFAULT else f"-{name}"
                    pools.sync = ConnectionPool(
                        url, min_size=1, max_size=8, open=True,
                        name=f"workhorse-{self.name}{suffix}",
                        kwargs={"application_name": database.application_name("app")},
                    )
        return pools.sync

    async def _get_async_pool(self, name: str = DEFAULT) -> AsyncConnectionPool:
        self._forget_inherited_pools()
        pools = self._pools_of(name)
        loop = asyncio.get_running_loop()
        if pools.async_ is not None and pools.async_loop is not loop:
            # Opened in another event loop (an earlier `asyncio.run`): its locks and tasks
            # belong to that loop, which may be closed. A new pool serves this one; the old
            # one's connections go with it when it is collected.
            pools.async_, pools.async_loop = None, None
        if pools.async_ is None:
            url = self.database_url_of(name)
            database.ensure_schema(url)
            suffix = "" if name == DEFAULT else f"-{name}"
            pool = AsyncConnectionPool(
                url, min_size=1, max_size=8, open=False,
                name=f"workhorse-{self.name}{suffix}-async",
                kwargs={"application_name": database.application_name("app-async")},
            )
            # With its first connection made, not on its way: a pool still connecting when the
            # caller's `asyncio.run` ends swallows the cancel of that connect, and `asyncio.run`
            # then waits for it forever (psycopg_pool 3.3; docs/budgets.md's async hold hung
            # one run in a dozen on a loaded machine).
            await pool.open(wait=True)
            if pools.async_ is None:
                pools.async_, pools.async_loop = pool, loop
            else:
                await pool.close()
        return pools.async_

    @contextmanager
    def connection(self, database: str = DEFAULT
                   ) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection to the app's database (the default one unless named); its
        transaction commits when the block exits cleanly.

        >>> with app.connection() as conn:                            # doctest: +SKIP
        ...     Queue(conn).health().depth
        {'ready': 3}
        """
        with self.pool_of(database).connection() as conn:
            yield conn

    @asynccontextmanager
    async def async_connection(self, database: str = DEFAULT
                               ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled async connection; its transaction commits when the block exits cleanly.

        >>> async with app.async_connection() as conn:                # doctest: +SKIP
        ...     (await AsyncQueue(conn).health()).depth
        {'ready': 3}
        """
        pool = await self._get_async_pool(database)
        async with pool.connection() as conn:
            yield conn

    def close(self) -> None:
        """Close the app's pools (a later call opens new ones, on the database the rule names
        then: under `manage.py test`, the test database once it exists).

        >>> app.close()                                               # doctest: +SKIP
        """
        self._forget_inherited_pools()
        with self._lock:
            closing = [p.sync for p in self._pools.values() if p.sync is not None]
            for pools in self._pools.values():
                pools.sync = None
            self._resolved_url = None
        for pool in closing:
            pool.close()

    async def close_async(self) -> None:
        """Close the app's pools, the async ones and the sync ones.

        >>> await app.close_async()                                   # doctest: +SKIP
        """
        self._forget_inherited_pools()
        for pools in list(self._pools.values()):
            if pools.async_ is not None:
                pool, loop = pools.async_, pools.async_loop
                pools.async_, pools.async_loop = None, None
                if loop is asyncio.get_running_loop():  # (another loop's pool is only dropped)
                    await pool.close()
        self.close()

    # ---- which connection --------------------------------------------------------------------

    @contextmanager
    def using(self, conn: Any, database: str = DEFAULT) -> Iterator[Any]:
        """Enqueue on the caller's connection, inside its transaction, within this block.
        `database` names which of the app's databases `conn` is connected to: an enqueue to a
        queue that lives elsewhere is refused (InvalidOptionsError), reads of another
        database take a pooled connection.

        >>> with conn.transaction(), app.using(conn):                 # doctest: +SKIP
        ...     send.delay({"tenant": "t1"})      # commits or rolls back with the caller's writes
        """
        check_database_name(database)
        if database != DEFAULT:  # InvalidOptionsError for a name the app does not have
            self.database_url_of(database)
        token = _current_connection.set((conn, database))
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

    def _caller(self, connection: Any, flavour: type[Any], database_name: str = DEFAULT) -> Any:
        """The connection an enqueue to `database_name` goes on: `connection=` (the caller's,
        taken to be that database's), else the `using()` one, else the framework's transaction
        this app joins (None: a pooled one); InvalidOptionsError when it is not of the caller's
        flavour, or when the `using()` connection is another database's."""
        conn = connection
        if conn is None:
            using = _current_connection.get()
            if using is not None:
                conn, using_database = using
                if using_database != database_name:
                    raise InvalidOptionsError(
                        f"this enqueue's queue lives on database {database_name!r}, and the "
                        f"using() connection is database {using_database!r}'s: a transaction "
                        "belongs to one database (enqueue outside the block, or use "
                        f"app.using(conn, database={database_name!r}) with a connection to it)")
        if conn is None:
            return self._joined(flavour, database_name)
        if not isinstance(conn, flavour):
            raise InvalidOptionsError(
                "this connection is async: use delay_async/enqueue_async"
                if flavour is psycopg.Connection
                else "this connection is not async: use delay/apply_async")
        return conn

    def _using(self, flavour: type[Any], database_name: str = DEFAULT) -> Any:
        """The `using()` connection when it is of this flavour and to `database_name`, else the
        framework's transaction this app joins (None: a pooled one)."""
        using = _current_connection.get()
        if using is None:
            return self._joined(flavour, database_name)
        conn, using_database = using
        if using_database != database_name:
            return None
        return conn if isinstance(conn, flavour) else None

    def _joined(self, flavour: type[Any], database_name: str = DEFAULT) -> Any:
        # Only sync code joins: a framework's transaction (Django's) is on a sync connection,
        # to the default database.
        if flavour is not psycopg.Connection or database_name != DEFAULT:
            return None
        return database.framework_connection(self.explicit_database_url)

    def _run(self, plan: Plan[T], conn: psycopg.Connection[Any] | None = None, *,
             transaction: bool = False, database: str = DEFAULT) -> T:
        """`plan` on `conn` (inside the caller's transaction), else on a pooled connection to
        `database` that commits when it ends (`transaction`: in one explicit transaction)."""
        if conn is not None:
            return _drive(conn, plan)
        with self.connection(database) as pooled:
            if not transaction:
                return _drive(pooled, plan)
            with pooled.transaction():
                return _drive(pooled, plan)

    async def _run_async(self, plan: Plan[T], conn: psycopg.AsyncConnection[Any] | None = None,
                         *, transaction: bool = False, database: str = DEFAULT) -> T:
        if conn is not None:
            return await _drive_async(conn, plan)
        pool = await self._get_async_pool(database)
        async with pool.connection() as pooled:
            if not transaction:
                return await _drive_async(pooled, plan)
            async with pooled.transaction():
                return await _drive_async(pooled, plan)

    # ---- enqueue -----------------------------------------------------------------------------

    # ---- placement (docs/design.md "Several databases"; App places its queues) ---------------

    def database_of(self, queue: str) -> str:
        """The name of the app's database that `queue` lives in (`default` unless placed).

        >>> App("docs").database_of("mail")
        'default'
        """
        return DEFAULT

    def check_budget_placement(self, budget: str, database_name: str) -> None:
        """InvalidOptionsError when a job of a queue on `database_name` names a budget that lives
        in another of the app's databases (App knows where its budgets live).

        >>> App("docs").check_budget_placement("db", "default")
        """

    def _database_of_calls(self, options: Sequence[Any]) -> str:
        """The one database of these jobs' queues; InvalidOptionsError when they span several
        (one enqueue is one transaction, and a transaction belongs to one database)."""
        first = self.database_of(options[0].queue)
        for each in options:
            where = self.database_of(each.queue)
            if where != first:
                raise InvalidOptionsError(
                    f"one enqueue is one transaction on one database, and these jobs' queues "
                    f"live on two: {options[0].queue!r} on {first!r}, {each.queue!r} on "
                    f"{where!r}; enqueue them separately")
            if each.budget is not None:
                self.check_budget_placement(each.budget, where)
        return first

    def on_database(self, name: str) -> Enqueuer:
        """What a handle of a job in the app's database `name` reads and controls it through:
        the app itself for the default database, else a view of the app bound to `name`.

        >>> App("docs").on_database("default").name
        'docs'
        """
        if name == DEFAULT:
            return self
        self.database_url_of(name)  # InvalidOptionsError for a name the app does not have
        return DatabaseView(self, name)

    def _enqueue(self, calls: Sequence[Call], database_name: str = DEFAULT
                 ) -> Plan[list[JobHandle]]:
        with telemetry.enqueue_span(calls[0].task, calls[0].options.queue) as meta:
            unique = any(c.arguments is not None for c in calls)
            outcomes = yield _ops.enqueue_outcomes(
                [(c.task, c.payload, c.options) for c in calls],
                on_failure=[c.on_failure for c in calls], meta=[meta] * len(calls),
                arguments=[c.arguments for c in calls] if unique else None)
        enqueuer = self.on_database(database_name)
        return [JobHandle(job_id, enqueuer, duplicate, database_name)
                for job_id, duplicate in outcomes]

    def enqueue_calls(self, calls: Sequence[Call], connection: Any = None) -> list[JobHandle]:
        """Enqueue resolved calls in one round trip, on `connection`, the `using()` connection,
        or a pooled one (what `delay`, `apply_async` and `map` call).

        >>> [h] = app.enqueue_calls([send.call(({"tenant": "t1"},))])  # doctest: +SKIP
        """
        if not calls:
            return []
        where = self._database_of_calls([c.options for c in calls])
        diverted = self._diversion()
        if diverted is not None:
            return diverted.enqueue_calls(calls, connection)
        return self._run(self._enqueue(calls, where),
                         self._caller(connection, psycopg.Connection, where), database=where)

    async def enqueue_calls_async(
        self, calls: Sequence[Call], connection: Any = None
    ) -> list[JobHandle]:
        """`enqueue_calls` for async code, on an async connection.

        >>> [h] = await app.enqueue_calls_async([send.call(({"tenant": "t1"},))])  # doctest: +SKIP
        """
        if not calls:
            return []
        where = self._database_of_calls([c.options for c in calls])
        diverted = self._diversion()
        if diverted is not None:
            return await diverted.enqueue_calls_async(calls, connection)
        conn = self._caller(connection, psycopg.AsyncConnection, where)
        return await self._run_async(self._enqueue(calls, where), conn, database=where)

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
        where = self._database_of_workflow(members, on_error)
        runner = self._workflow_runner()
        if runner is not None:
            return runner.run_workflow(members, result, kind)
        operation = _ops.enqueue_workflow(members, result, kind, on_error)
        workflow_id, ids = self._run(_single(operation),
                                     self._caller(connection, psycopg.Connection, where),
                                     transaction=True, database=where)
        return WorkflowHandle(workflow_id, self.on_database(where), member_ids=tuple(ids))

    async def enqueue_workflow_async(
        self, members: Sequence[_ops.WorkflowMember], result: Sequence[int], kind: str,
        on_error: Any = None, connection: Any = None,
    ) -> WorkflowHandle:
        """`enqueue_workflow` for async code.

        >>> await app.enqueue_workflow_async(plan.members, plan.result, plan.kind)  # doctest: +SKIP
        WorkflowHandle(id=7)
        """
        where = self._database_of_workflow(members, on_error)
        runner = self._workflow_runner()
        if runner is not None:
            return runner.run_workflow(members, result, kind)
        operation = _ops.enqueue_workflow(members, result, kind, on_error)
        conn = self._caller(connection, psycopg.AsyncConnection, where)
        workflow_id, ids = await self._run_async(_single(operation), conn, transaction=True,
                                                 database=where)
        return WorkflowHandle(workflow_id, self.on_database(where), member_ids=tuple(ids))

    def _database_of_workflow(self, members: Sequence[_ops.WorkflowMember],
                              on_error: Any) -> str:
        """The one database of a workflow's members (and its error callback); a workflow
        across databases is refused: its releases run in the database's own triggers."""
        options = [m.options for m in members]
        if on_error is not None:  # (task, payload, options, on_failure)
            options.append(on_error[2])
        try:
            return self._database_of_calls(options)
        except InvalidOptionsError as exc:
            raise InvalidOptionsError(
                "a workflow's members must share a database (docs/design.md \"Several "
                f"databases\"): {exc}") from None

    def workflow(self, workflow_id: int, database: str = DEFAULT) -> WorkflowHandle:
        """The WorkflowHandle of an existing workflow, from its id, in any process.

        >>> app.workflow(7).get(timeout=60)                           # doctest: +SKIP
        [1, 2, 3]
        """
        if isinstance(workflow_id, bool) or not isinstance(workflow_id, int):
            raise InvalidOptionsError(f"a workflow id is an int, got {workflow_id!r}")
        return WorkflowHandle(workflow_id, self.on_database(database))

    def workflow_jobs(self, workflow_id: int, database: str = DEFAULT) -> list[Job]:
        """A workflow's members, in insertion order.

        >>> [j.status for j in app.workflow_jobs(7)]                # doctest: +SKIP
        [<JobStatus.SUCCEEDED: 'succeeded'>, <JobStatus.WAITING: 'waiting'>]
        """
        return self._run(_single(_ops.workflow_jobs(workflow_id)),
                         self._using(psycopg.Connection, database), database=database)

    def workflow_row(self, workflow_id: int, database: str = DEFAULT
                     ) -> tuple[Any, ...] | None:
        """A workflow's own row (id, result members, result kind, on_error job, created_at).

        >>> app.workflow_row(7)[1:3]                                  # doctest: +SKIP
        ([12], 'one')
        """
        return self._run(_single(_ops.workflow_row(workflow_id)),
                         self._using(psycopg.Connection, database), database=database)

    # ---- results and control -----------------------------------------------------------------

    def get_job(self, job_id: int, database: str = DEFAULT) -> Job | None:
        """The job with this id (on the `using()` connection, else a pooled one), or None.

        >>> app.get_job(42).status                                    # doctest: +SKIP
        <JobStatus.SUCCEEDED: 'succeeded'>
        """
        return self._run(_single(_ops.get_job(job_id)),
                         self._using(psycopg.Connection, database), database=database)

    async def get_job_async(self, job_id: int, database: str = DEFAULT) -> Job | None:
        """`get_job` for async code.

        >>> (await app.get_job_async(42)).status                      # doctest: +SKIP
        <JobStatus.SUCCEEDED: 'succeeded'>
        """
        conn = self._using(psycopg.AsyncConnection, database)
        return await self._run_async(_single(_ops.get_job(job_id)), conn, database=database)

    def get_attempts(self, job_id: int, database: str = DEFAULT) -> list[Attempt] | None:
        """The attempts of the job with this id, oldest first (see `JobHandle.attempts`), or
        None when there is no such job.

        >>> [a.outcome for a in app.get_attempts(42)]                # doctest: +SKIP
        ['retried', 'succeeded']
        """
        return self._run(_single(_ops.job_attempts(job_id)),
                         self._using(psycopg.Connection, database), database=database)

    async def get_attempts_async(self, job_id: int, database: str = DEFAULT
                                 ) -> list[Attempt] | None:
        """`get_attempts` for async code.

        >>> [a.outcome for a in await app.get_attempts_async(42)]    # doctest: +SKIP
        ['retried', 'succeeded']
        """
        conn = self._using(psycopg.AsyncConnection, database)
        return await self._run_async(_single(_ops.job_attempts(job_id)), conn, database=database)

    def signal(self, job: Any, name: str, payload: Any = None, key: str | None = None,
               database: str | None = None) -> bool:
        """Send signal `name` to a job (a JobHandle or an id) on the `using()` connection, else a
        pooled one, committed (docs/design.md "Signals"): a wait for it takes it, and the job, if
        suspended waiting for it, is ready again. With `key`, a repeat is ignored (False). The
        job lives in its handle's database, else `database`, else the default one.

        >>> app.signal(handle, "approval", {"by": "ana"}, key="ticket-7")  # doctest: +SKIP
        True
        """
        operation = _ops.signal(_job_id_of(job), name, payload, key)
        where = _database_of_job(job, database)
        return bool(self._run(_single(operation), self._using(psycopg.Connection, where),
                              database=where))

    async def signal_async(self, job: Any, name: str, payload: Any = None,
                           key: str | None = None, database: str | None = None) -> bool:
        """`signal` for async code.

        >>> await app.signal_async(42, "approval", {"by": "ana"})     # doctest: +SKIP
        True
        """
        operation = _ops.signal(_job_id_of(job), name, payload, key)
        where = _database_of_job(job, database)
        return bool(await self._run_async(
            _single(operation), self._using(psycopg.AsyncConnection, where), database=where))

    def get_steps(self, job_id: int, database: str = DEFAULT) -> list[Step]:
        """The steps of the job with this id (see `JobHandle.steps`).

        >>> [s.name for s in app.get_steps(42)]                       # doctest: +SKIP
        ['charge', 'cool-off']
        """
        steps, _ = self._run(_single(_ops.job_steps(job_id)),
                         self._using(psycopg.Connection, database), database=database)
        return list(steps)

    async def get_steps_async(self, job_id: int, database: str = DEFAULT) -> list[Step]:
        """`get_steps` for async code.

        >>> [s.name for s in await app.get_steps_async(42)]           # doctest: +SKIP
        ['charge', 'cool-off']
        """
        conn = self._using(psycopg.AsyncConnection, database)
        steps, _ = await self._run_async(_single(_ops.job_steps(job_id)), conn, database=database)
        return list(steps)

    def handle(self, job_id: int, database: str = DEFAULT) -> JobHandle:
        """The handle of an existing job, from its id, in any process.

        >>> app.handle(42).get(timeout=10)                            # doctest: +SKIP
        5
        """
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise InvalidOptionsError(f"a job id is an int, got {job_id!r}")
        return JobHandle(job_id, self.on_database(database), database=database)

    def job(self, job_id: int, database: str = DEFAULT) -> JobHandle:
        """The handle of an existing job of the app's database `database` (docs/design.md
        "Several databases"); `handle` with the database named.

        >>> app.job(42, database="eu").database                       # doctest: +SKIP
        'eu'
        """
        return self.handle(job_id, database)

    def cancel(self, ids: Sequence[int], database: str = DEFAULT) -> list[int]:
        """Cancel jobs: scheduled, ready or held ones at once, running ones by request (they
        end canceled when their handler returns). Returns the ids it changed.

        >>> app.cancel([41, 42])                                      # doctest: +SKIP
        [42]
        """
        operation = _ops.cancel_jobs(ids, _ops.retention_json(self.retention))
        return self._run(_single(operation),
                         self._using(psycopg.Connection, database), database=database)

    def retry(self, ids: Sequence[int], database: str = DEFAULT) -> list[int]:
        """Failed, held or canceled jobs become ready with a fresh set of attempts. Returns the
        ids it changed.

        >>> app.retry([41, 42])                                       # doctest: +SKIP
        [41]
        """
        return self._run(_single(_ops.retry_jobs(ids)),
                         self._using(psycopg.Connection, database), database=database)

    def wait_for(self, job_id: int, timeout: float | None, database: str = DEFAULT) -> bool:
        """Block until the job may have reached a resting status (True) or `timeout` passed
        (what `JobHandle.wait` sleeps on).

        >>> app.wait_for(42, timeout=10)                              # doctest: +SKIP
        True
        """
        return _results.waiter(self.database_url_of(database)).wait(job_id, timeout)

    async def wait_for_async(self, job_id: int, timeout: float | None,
                             database: str = DEFAULT) -> bool:
        """`wait_for` for async code.

        >>> await app.wait_for_async(42, timeout=10)                  # doctest: +SKIP
        True
        """
        return await _results.waiter(self.database_url_of(database)).wait_async(job_id, timeout)


def _database_of_job(job: Any, database_name: str | None) -> str:
    """Where a job lives: its handle's database, else the one named, else the default."""
    if isinstance(job, JobHandle):
        return job.database
    return database_name if database_name is not None else DEFAULT


def _job_id_of(job: Any) -> int:
    """A job's id, from a JobHandle or the id itself (checked by the operation)."""
    return job.id if isinstance(job, JobHandle) else job


class DatabaseView:
    """An app bound to one of its databases other than the default: what the handles of that
    database's jobs (and workflows) read and control them through (handle.py's `Enqueuer`).

    >>> view = App("docs", databases={"eu": "postgresql://eu/app"}).on_database("eu")
    >>> view.database
    'eu'
    """

    def __init__(self, app: AppEnqueuer, name: str) -> None:
        self.app = app
        self.database = name
        self.name = app.name

    def __repr__(self) -> str:
        return f"<DatabaseView {self.app.name}:{self.database}>"

    def enqueue_calls(self, calls: Sequence[Any], connection: Any = None) -> list[JobHandle]:
        return self.app.enqueue_calls(calls, connection)

    async def enqueue_calls_async(self, calls: Sequence[Any],
                                  connection: Any = None) -> list[JobHandle]:
        return await self.app.enqueue_calls_async(calls, connection)

    def get_job(self, job_id: int) -> Job | None:
        return self.app.get_job(job_id, self.database)

    async def get_job_async(self, job_id: int) -> Job | None:
        return await self.app.get_job_async(job_id, self.database)

    def get_attempts(self, job_id: int) -> list[Attempt] | None:
        return self.app.get_attempts(job_id, self.database)

    async def get_attempts_async(self, job_id: int) -> list[Attempt] | None:
        return await self.app.get_attempts_async(job_id, self.database)

    def get_steps(self, job_id: int) -> list[Step]:
        return self.app.get_steps(job_id, self.database)

    async def get_steps_async(self, job_id: int) -> list[Step]:
        return await self.app.get_steps_async(job_id, self.database)

    def wait_for(self, job_id: int, timeout: float | None) -> bool:
        return self.app.wait_for(job_id, timeout, self.database)

    async def wait_for_async(self, job_id: int, timeout: float | None) -> bool:
        return await self.app.wait_for_async(job_id, timeout, self.database)

    def cancel(self, ids: Sequence[int]) -> list[int]:
        return self.app.cancel(ids, self.database)

    def retry(self, ids: Sequence[int]) -> list[int]:
        return self.app.retry(ids, self.database)

    def workflow_jobs(self, workflow_id: int) -> list[Job]:
        return self.app.workflow_jobs(workflow_id, self.database)

    def workflow_row(self, workflow_id: int) -> tuple[Any, ...] | None:
        return self.app.workflow_row(workflow_id, self.database)
