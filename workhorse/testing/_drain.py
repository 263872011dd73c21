"""`drain()` and `drain_async()`: run every ready job of an app through the real claim path,
one at a time, and report what became of them."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import psycopg

from .. import _ops, database
from ..app import App
from ..errors import InvalidOptionsError, StaleLeaseError
from ..types import ClaimedJob, JobStatus
from ._assertions import framework_connection
from ._loops import on_a_loop, without_loop


@dataclass(frozen=True, slots=True)
class DrainReport:
    """What one `drain()` recorded: jobs by the outcome recorded in this drain (`succeeded`,
    `failed`, `held`), and `retried`, the attempts that ended in a retry."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    held: int = 0


# A drain claims with a lease at least this long, so that no job's lease runs out while it runs
# one at a time with no lease keeper (the drain's own timeout is longer when it is).
DRAIN_MIN_LEASE = 60.0


def drain(
    app: App,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    timeout: float = 60,
) -> DrainReport:
    """Run every ready (and due) job of `queues` (default: every queue the app declares)
    through the real claim path and the worker's executor, in this process, one at a time,
    until none is left; jobs that enqueue more jobs are drained too. `with_scheduled=True` also
    runs future jobs and retries waiting out a backoff. Raises TimeoutError when `timeout`
    seconds pass first (the job running then finishes).

    Limits, pauses and rate limits apply as in a worker: a job a limit holds back stays (a rate
    limit's next start, and the end of a backoff that holds jobs back, is waited for, within
    the timeout).

    Sync handlers run in this thread with no event loop, as under `eager()` (Django's ORM works
    there, on this thread's connection); async ones on a loop of their own. Under
    `workhorse.contrib.django`, inside an atomic block or a `TestCase`, the drain claims and
    records on Django's own connection, so that it sees the jobs enqueued in that transaction.
    Its own connections are closed when it returns.

    >>> drain(app)                                                    # doctest: +SKIP
    DrainReport(succeeded=3, failed=0, retried=1, held=0)
    """
    served = _drain_checks(app, queues, with_scheduled, timeout)
    groups = app.queues_by_database(served)
    if list(groups) == [database.DEFAULT_DATABASE]:
        return without_loop(_drain(app, served, with_scheduled, timeout,
                                   joined=framework_connection(app), loopless=True))

    return without_loop(_each_database(app, groups, with_scheduled, timeout, loopless=True))


async def drain_async(
    app: App,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    timeout: float = 60,
) -> DrainReport:
    """`drain()` for async code (it runs on the caller's loop; sync handlers in threads)."""
    served = _drain_checks(app, queues, with_scheduled, timeout)
    groups = app.queues_by_database(served)
    if list(groups) == [database.DEFAULT_DATABASE]:
        return await _drain(app, served, with_scheduled, timeout, joined=None, loopless=False)
    return await _each_database(app, groups, with_scheduled, timeout, loopless=False)


async def _each_database(app: App, groups: dict[str, list[str]], with_scheduled: bool,
                         timeout: float, *, loopless: bool) -> DrainReport:
    """An app's queues on several databases (docs/design.md "Several databases"): each
    database's in turn, again until a round finds nothing (a job may enqueue on another)."""
    deadline = time.monotonic() + timeout
    total = DrainReport()
    while True:
        before = total
        for name, served in groups.items():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(_timed_out(timeout, dataclasses.asdict(total)))
            joined = (framework_connection(app)
                      if loopless and name == database.DEFAULT_DATABASE else None)
            report = await _drain(app, served, with_scheduled, left, joined=joined,
                                  loopless=loopless, database_name=name)
            total = DrainReport(*(a + b for a, b in zip(
                dataclasses.astuple(total), dataclasses.astuple(report), strict=True)))
        if total == before:
            return total


def _drain_checks(app: App, queues: Sequence[str] | None, with_scheduled: bool,
                  timeout: float) -> list[str]:
    served = _drain_queues(app, queues)
    if not isinstance(with_scheduled, bool):
        raise InvalidOptionsError(f"with_scheduled must be a bool, got {with_scheduled!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise InvalidOptionsError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return served


async def _drain(
    app: App, served: list[str], with_scheduled: bool, timeout: float, *,
    joined: Any, loopless: bool, database_name: str = database.DEFAULT_DATABASE,
) -> DrainReport:
    """The drain, written once. On the caller's loop (`loopless=False`): an async connection of
    its own, sync handlers in threads. Driven with no loop (`loopless=True`, by `drain()`):
    statements on a sync connection (the framework's `joined` one, else its own) that never
    suspend, sync handlers in this thread, async ones on a loop of their own."""
    # The worker's own parts, imported here: `import workhorse.testing` stays light.
    from ..durable import StepStore
    from ..worker._threads import InCallerThread
    from ..worker.executor import Execution, Executor, Outcome
    from ..worker.recorder import OutcomeRecorder, Recorded

    deadline = time.monotonic() + timeout
    lease = max(DRAIN_MIN_LEASE, float(timeout),
                *(task.lease or 0.0 for task in app.tasks.values()))
    conn: Any
    if joined is not None:
        # Django's connection in the caller's transaction: the schema is the migration's.
        url = None
        heartbeats = _Heartbeats(None, lease, joined)
        conn = _AwaitableConnection(joined, owned=False)
    else:
        url = app.database_url_of(database_name)
        if loopless:
            database.ensure_schema(url)
            heartbeats = _Heartbeats(url, lease)
            conn = _AwaitableConnection(database.connect(url, role="drain", autocommit=True),
                                        owned=True)
        else:
            await anyio.to_thread.run_sync(database.ensure_schema, url)
            heartbeats = _Heartbeats(url, lease)
            conn = await psycopg.AsyncConnection.connect(
                url, autocommit=True, application_name=database.application_name("drain"))
    backoffs: list[tuple[Execution, Any]] = []  # current_job().backoff(): for the recorder
    # Durable steps on the framework's connection (its transaction holds the jobs), else on
    # connections of their own.
    steps = (StepStore(None, app.enqueue_calls, connection=joined, tasks=app.tasks,
                       placed=app.database_of)
             if joined is not None
             else StepStore(lambda: database.connect(url or app.database_url,
                                                     role="drain-steps", autocommit=True),
                            app.enqueue_calls, tasks=app.tasks, database=database_name,
                            placed=app.database_of))
    executor = Executor(app.tasks, app_name=app.name, default_lease=lease,
                        retention=_ops.retention_json(app.retention), step_store=steps,
                        threads=InCallerThread() if loopless else None,
                        renew=lambda execution: heartbeats.renewer(execution.job, execution)(),
                        back_off=lambda execution, signal: backoffs.append((execution, signal)))

    async def run(execution: Execution) -> Outcome | None:
        task = execution.task
        if loopless and task is not None and task.is_async:
            return on_a_loop(lambda: executor.run(execution), "workhorse-drain")
        return await executor.run(execution)
    counts = {"succeeded": 0, "failed": 0, "retried": 0, "held": 0}
    by_status = {JobStatus.SUCCEEDED: "succeeded", JobStatus.FAILED: "failed",
                 JobStatus.SCHEDULED: "retried", JobStatus.HELD: "held"}

    def recorded(outcomes: list[Recorded], reused: bool = False) -> None:
        # `reused`: the recorder's newer callback also says whether a claim already took the
        # capacity these freed; a drain claims one job at a time, so it does not care.
        for outcome, status in outcomes:
            if status in by_status and outcome.snooze is None:  # a snooze is no retry
                counts[by_status[status]] += 1

    async def same_connection() -> Any:
        return conn

    recorder = OutcomeRecorder(same_connection, recorded, name="drain")
    # Progress is written while a handler runs, as a worker's slot writes it (on a connection of
    # its own: not on a framework's, whose transaction holds the jobs only it can see).
    running: dict[int, Execution] = {}
    progress = None
    if url is not None:
        from ..worker.leases import LeaseKeeper

        progress = LeaseKeeper(url, running, lambda lost: None, lease, name="workhorse-drain",
                               renew=False)
        progress.start()
    try:
        while True:
            if with_scheduled:
                await _ops.execute_async(conn, _ops.make_due(served))
            ran = False
            next_starts: list[float] = []
            for queue in served:
                if time.monotonic() >= deadline:
                    raise TimeoutError(_timed_out(timeout, counts))
                jobs, next_start, _ = await _ops.execute_async(
                    conn, _ops.complete_and_claim(queue, 1, lease, [], app.tasks))
                if next_start is not None:
                    next_starts.append(next_start)
                for job in jobs:
                    ran = True
                    execution = executor.prepare(job)
                    running[job.id] = execution
                    try:
                        outcome = await run(execution)
                    finally:
                        running.pop(job.id, None)
                    for execution_, signal in backoffs:
                        recorder.queue_backoff(execution_, signal)
                    backoffs.clear()
                    if outcome is not None:
                        recorder.add(outcome)
                    await recorder.flush()
            if ran:
                continue
            if not next_starts:
                # A backed-off key is passed over and the claim does not say until when: wait
                # for the first key backoff that holds ready jobs back, as workers poll for it.
                held = await _key_backoff_ends(conn, served)
                if held is None:
                    break
                next_starts.append(held)
            # Only a rate limit or a backoff holds work back: wait for the next allowed start.
            wait = min(next_starts)
            if time.monotonic() + wait >= deadline:
                raise TimeoutError(_timed_out(timeout, counts) + " (a rate limit held jobs back)")
            if loopless:
                time.sleep(wait)
            else:
                await anyio.sleep(wait)
    finally:
        if progress is not None:
            progress.stop()
        executor.threads.close()
        steps.close()
        heartbeats.close()
        await conn.close()  # the recorder's too: it flushed each outcome as it came
    return DrainReport(**counts)


async def _key_backoff_ends(conn: Any, served: Sequence[str]) -> float | None:
    """Seconds until the first backoff in force of a key of `served` that has ready jobs ends
    (None: no such backoff), so that a drain waits it out as workers do."""
    soonest: float | None = None
    for state in await _ops.execute_async(conn, _ops.list_backoffs()):
        if state.scope != "key" or state.name not in served:
            continue
        if not await _ops.execute_async(conn, _ops.list_jobs(
                queue=state.name, status="ready", key=state.key, limit=1)):
            continue
        left = max((state.until - datetime.now(UTC)).total_seconds(), 0.05)
        soonest = left if soonest is None else min(soonest, left)
    return soonest


class _AwaitableConnection:
    """An AsyncConnection's face on a sync connection, each call done at once: how a drain with
    no event loop drives the worker's async parts (the claim, the recorder) on a sync
    connection, its own or a framework's whose open transaction only that connection sees.
    `close()` closes only a connection it `owned`."""

    def __init__(self, conn: Any, *, owned: bool) -> None:
        self.conn = conn
        self.owned = owned

    @property
    def closed(self) -> bool:
        return bool(self.conn.closed)

    @property
    def info(self) -> Any:
        return self.conn.info

    def cursor(self) -> _AwaitableCursor:
        return _AwaitableCursor(self.conn.cursor())

    async def close(self) -> None:
        if self.owned:
            self.conn.close()


class _AwaitableCursor:
    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    async def __aenter__(self) -> _AwaitableCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.cursor.close()

    async def execute(self, statement: Any, params: Any = None, **kwargs: Any) -> None:
        self.cursor.execute(statement, params, **kwargs)

    @property
    def pgresult(self) -> Any:
        return self.cursor.pgresult

    async def fetchall(self) -> list[Any]:
        return list(self.cursor.fetchall())


def _drain_queues(app: App, queues: Sequence[str] | None) -> list[str]:
    if queues is None:
        served = app.declared_queues()
    elif isinstance(queues, str) or not all(isinstance(q, str) for q in queues):
        raise InvalidOptionsError(f"queues must be a list of queue names, got {queues!r}")
    else:
        served = list(dict.fromkeys(queues))
    if not served:
        raise InvalidOptionsError(f"app {app.name!r} declares no queue: nothing to drain")
    return served


def _timed_out(timeout: float, counts: dict[str, int]) -> str:
    so_far = ", ".join(f"{name}={n}" for name, n in counts.items())
    return f"drain() did not finish within {timeout:g}s ({so_far} so far)"


class _Heartbeats:
    """`JobContext.heartbeat()` under drain: renews the lease on a connection of its own (the
    drain's is idle while a handler runs, but a handler's thread cannot use an async one)."""

    def __init__(self, url: str | None, lease: float, joined: Any = None) -> None:
        self.url = url
        self.lease = lease
        # On a framework's connection (joined), the jobs exist only in its transaction: renew
        # there (the handler runs in the drain's thread, where that connection belongs).
        self.joined = joined
        self.conn: Any = None
        self.lock = threading.Lock()

    def renewer(self, job: ClaimedJob, execution: Any) -> Callable[[], None]:
        def renew() -> None:
            with self.lock:
                if self.joined is not None:
                    self.conn = self.joined
                elif self.conn is None or self.conn.closed:
                    assert self.url is not None
                    self.conn = database.connect(self.url, role="drain-leases", autocommit=True)
                held = _ops.execute(self.conn, _ops.renew_leases([(job.id, job.fence,
                                                                   self.lease)]))
            if job.id not in held:
                execution.lost = True
                raise StaleLeaseError(f"job {job.id}: its lease was lost")
            if held[job.id]:
                execution.cancel_requested = True

        return renew

    def close(self) -> None:
        if self.conn is not None and self.joined is None:
            self.conn.close()
