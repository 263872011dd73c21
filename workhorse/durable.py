"""Durable execution: `current_job().step` (docs/design.md "Durable execution", docs/durable.md).

    @app.task
    def fulfil(order_id):
        step = current_job().step
        charge = step.run("charge", charge_card, order_id)       # runs once per job
        step.sleep("cool-off", "2h")                              # holds no place meanwhile
        approval = step.wait_for("approve", signal="approval", timeout="1d")
        labels = step.children("labels", [label.s(order_id, n) for n in (1, 2)])
        return {"charge": charge, "approval": approval, "labels": labels}

A step's result is recorded under the job's fence the moment it returns; when the job runs
again (a retry, or a resume after a suspension) the handler starts from its top and every
recorded step returns its result without being called. A suspension point whose condition is not
met yet (a sleep not over, no signal yet, children running) raises `Suspended`, a
BaseException that ends the handler call: the worker records the job `suspended`, its lease, its
place and its units free at once, its attempt given back, until the timer, the signal or the last
child wakes it. In an async handler the same calls are awaited (`await step.run(...)`).

The steps of the running job reach the database through a `StepStore`: the worker's slot keeps
one per process (a few connections of its own, opened at the first step), so a job that calls
no step costs nothing, and each step call costs one round trip (the first of a run two: its
recorded steps are read once).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import psycopg

from . import _ops
from ._durations import parse_duration
from .errors import (
    InvalidOptionsError,
    SignalTimeoutError,
    StaleLeaseError,
    TaskCanceledError,
    TaskFailedError,
    WorkhorseError,
)
from .retry import RetryPolicy, backoff_delay
from .types import JobStatus, Step

if TYPE_CHECKING:
    from ._calls import Call

# A durable sleep or a wait's timeout is at most this far ahead (the CLI's durations' bound).
MAX_SUSPEND_SECONDS = 366 * 86400.0
# Connections a store opens at most: step calls of one process beyond this wait their turn.
STORE_CONNECTIONS = 4

_FAILED = (JobStatus.FAILED, JobStatus.HELD)
_CANCELED = (JobStatus.CANCELED, JobStatus.EXPIRED)
_ENDED = frozenset({JobStatus.SUCCEEDED, *_FAILED, *_CANCELED})


def usage_error(message: str) -> InvalidOptionsError:
    """The InvalidOptionsError of a step called in a way no retry can change (a name used twice
    in one run, a name recorded as another kind of step, a bad name, duration or child), marked
    so that the runner fails the job at once instead of using its retries (`no_retry`).

    >>> type(usage_error("step name 'a' is used twice")).__name__
    'InvalidOptionsError'
    """
    error = InvalidOptionsError(message)
    error.workhorse_no_retry = True  # type: ignore[attr-defined]
    return error


def no_retry(exc: BaseException) -> bool:
    """Whether `exc` is a step's usage error (see usage_error): no retry could change it."""
    return getattr(exc, "workhorse_no_retry", False) is True


class Suspended(BaseException):
    """Raised by a suspension point whose condition is not met yet: the handler call ends here and
    the runner records the job `suspended` (docs/design.md "Durable execution"). A BaseException,
    so that a handler's `except Exception` does not swallow it; do not catch it."""

    def __init__(self, name: str, kind: str, reason: str, wake_at: datetime | None,
                 signal: str | None) -> None:
        super().__init__(f"suspended at step {name!r} ({reason})")
        self.name = name
        self.kind = kind
        self.reason = reason
        self.wake_at = wake_at
        self.signal = signal


class StepStore:
    """The database side of the running jobs' steps, for one process: up to `STORE_CONNECTIONS`
    sync connections made by `connect()` (or the one `connection` given, a framework's, used as
    it is), each call one statement in its own transaction. Thread-safe. `enqueue(calls, conn)`
    enqueues children on a connection in its open transaction (the app's `enqueue_calls`)."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]] | None,
        enqueue: Callable[[Sequence[Call], Any], list[Any]],
        *,
        connection: psycopg.Connection[Any] | None = None,
        tasks: Collection[str] | None = None,
        database: str = "default",
        placed: Callable[[str], str] | None = None,
    ) -> None:
        self._connect = connect
        self._enqueue = enqueue
        self._shared = connection
        # The app's task names: a child of a task it does not declare would never run (no
        # worker of this app claims it), and its parent would wait for ever.
        self.tasks = tasks
        # The app's database these jobs live in, and where each queue lives (App.database_of):
        # a child is adopted in its parent's transaction, so it must live in its database.
        self.database = database
        self.placed = placed
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._turns = threading.BoundedSemaphore(STORE_CONNECTIONS)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._shared is not None:
            with self._lock:
                yield self._shared
            return
        with self._turns:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                assert self._connect is not None
                conn = self._connect()
            try:
                yield conn
            except BaseException:
                # A broken connection is not kept; a healthy one rolled back its transaction.
                if conn.broken or conn.closed:
                    raise
                with self._lock:
                    self._idle.append(conn)
                raise
            with self._lock:
                self._idle.append(conn)

    def _execute(self, operation: _ops.Operation[Any]) -> Any:
        # Each of these operations is one statement: on an autocommit connection it is its own
        # transaction, one round trip (BEGIN and COMMIT around it would make three).
        with self._connection() as conn:
            return _ops.execute(conn, operation)

    def steps(self, job_id: int) -> tuple[list[Step], datetime | None]:
        return self._execute(_ops.job_steps(job_id))

    def children(self, job_id: int) -> dict[str, list[tuple[int, JobStatus, Any, Any]]]:
        return self._execute(_ops.job_children(job_id))

    def record(self, job_id: int, fence: int, name: str, kind: str, *,
               encoded: str | None = None, error: dict[str, Any] | None = None) -> None:
        self._execute(_ops.record_step(job_id, fence, name, kind, error=error, encoded=encoded))

    def wait_signal(self, job_id: int, fence: int, name: str, signal: str) -> tuple[bool, Any]:
        return self._execute(_ops.wait_signal(job_id, fence, name, signal))

    def spawn(self, job_id: int, fence: int, name: str, calls: Sequence[Call]) -> list[int]:
        """Enqueue the children and adopt them in one transaction (none when the fence is
        stale: StaleLeaseError, rolled back)."""
        with self._connection() as conn:
            transaction = (contextlib.nullcontext() if self._shared is not None
                           else conn.transaction())
            with transaction:
                handles = self._enqueue(calls, conn)
                taken = [call.task for call, handle in zip(calls, handles, strict=True)
                         if getattr(handle, "duplicate", False)]
                if taken:
                    # A unique, idempotent or keyed child that found an existing job would
                    # adopt someone else's job (and leave that job's parent waiting for ever).
                    raise usage_error(
                        f"step {name!r}: a child must be a new job, but {taken[0]!r} found an "
                        "existing one (unique=, idempotency_key= or job_key=): give children "
                        "no duplicate rule")
                ids = [handle.id for handle in handles]
                _ops.execute(conn, _ops.adopt_children(job_id, fence, name, ids))
                return ids

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()


class _Run:
    """What the steps of one run of one job share: the job, its store, the steps recorded before
    this run (read at the first step call, with the database's clock), the names used."""

    def __init__(self, job_id: int, fence: int, store: StepStore | None,
                 lost: Callable[[], bool] = lambda: False) -> None:
        self.job_id = job_id
        self.fence = fence
        self.store = store
        self.lost = lost
        self.recorded: dict[str, Step] | None = None
        self.clock: tuple[datetime, float] | None = None  # database time, monotonic then
        self.used: set[str] = set()

    def use(self, name: object) -> str:
        name = _usage(_ops.check_step_name, name)
        if name in self.used:
            raise usage_error(
                f"step name {name!r} is used twice in one run of job {self.job_id}: each step "
                "of a job needs its own name")
        self.used.add(name)
        return name

    def check_lease(self, name: str) -> None:
        """StaleLeaseError when this run lost its lease: another claim may own the job now, and
        may have recorded the step this run would call again."""
        if self.lost():
            raise StaleLeaseError(
                f"job {self.job_id}: its lease was lost; step {name!r} was not run (another "
                "claim may own the job)")

    def get_store(self) -> StepStore:
        if self.store is None:
            raise WorkhorseError(
                "durable steps need a worker (or workhorse.testing.drain): this runner keeps no "
                "record of them")
        return self.store

    def load(self) -> dict[str, Step]:
        if self.recorded is None:
            steps, now = self.get_store().steps(self.job_id)
            self.recorded = {step.name: step for step in steps}
            if now is not None:
                self.clock = (now, time.monotonic())
        return self.recorded

    def now(self) -> datetime:
        """The database's clock, as read at the first step call and advanced since."""
        assert self.clock is not None
        at, then = self.clock
        return at + timedelta(seconds=time.monotonic() - then)

    def recorded_step(self, name: str, kind: str) -> Step | None:
        step = self.load().get(name)
        if step is not None and step.kind != kind:
            raise usage_error(
                f"step {name!r} of job {self.job_id} was recorded as a {step.kind} step, and is "
                f"now a {kind}: a deploy changed the handler's steps (give the new step a new "
                "name)")
        return step

    def wake_at(self, name: str, step: Step | None, until: Any, what: str) -> datetime:
        """When a sleep ends or a wait times out: as first given (a pending step's), else from
        `until` (a duration from now, or an aware datetime)."""
        if step is not None and step.wake_at is not None:
            return step.wake_at
        if isinstance(until, datetime):
            if until.tzinfo is None or until.utcoffset() is None:
                raise usage_error(
                    f"{what} {name!r}: a datetime must be aware, got {until!r}")
            return until
        try:
            seconds = parse_duration(until, maximum=MAX_SUSPEND_SECONDS)
        except (TypeError, ValueError) as exc:
            raise usage_error(f"{what} {name!r}: bad duration {until!r}: {exc}") from None
        return self.now() + timedelta(seconds=seconds)

    def record_json(self, name: str, kind: str, value: Any) -> Any:
        text = _ops.encode_json(value, f"step {name!r}'s result")
        self.get_store().record(self.job_id, self.fence, name, kind, encoded=text)
        return json.loads(text)

    def children_outcome(self, name: str, kind: str, count: int | None) -> tuple[bool, Any]:
        """(True, results) when the step's children have all ended (recorded now), (False,
        None) while some run; raises what a failed or canceled child makes it raise."""
        kids = self.get_store().children(self.job_id).get(name)
        if not kids:
            return False, None
        if any(status not in _ENDED for _, status, _, _ in kids):
            return True, None
        for child, status, _, error in kids:
            if status in _FAILED or status in _CANCELED:
                failure = {
                    "type": "TaskFailedError" if status in _FAILED else "TaskCanceledError",
                    "message": _child_message(child, status, error), "child": child}
                self.get_store().record(self.job_id, self.fence, name, kind, error=failure)
                raise _child_error(failure)
        results = [result for _, _, result, _ in kids]
        self.record_json(name, kind, results)
        return True, results

    def replay(self, step: Step) -> Any:
        """A recorded step's result, or the error it recorded."""
        if step.error is not None:
            if step.kind == "wait":
                raise SignalTimeoutError(str(step.error.get("message")))
            raise _child_error(step.error)
        return step.result


def _child_message(child: int, status: JobStatus, error: Any) -> str:
    detail = ""
    if isinstance(error, dict) and error.get("type"):
        detail = f": {error.get('type')}: {error.get('message')}"
    return f"child job {child} ended {status}{detail}"


def _child_error(failure: dict[str, Any]) -> WorkhorseError:
    message = str(failure.get("message"))
    return (TaskCanceledError(message) if failure.get("type") == "TaskCanceledError"
            else TaskFailedError(message))


def _signal_name(signal: object) -> str:
    return _usage(_ops.check_step_name, signal, "a signal's name")


def _usage(check: Callable[..., str], *args: Any) -> str:
    """`check(*args)`, its InvalidOptionsError marked as a usage error (inside a running job)."""
    try:
        return check(*args)
    except InvalidOptionsError as exc:
        raise usage_error(str(exc)) from None  # the same type, marked


def _calls(name: str, signatures: Sequence[Any], store: StepStore) -> list[Call]:
    from .canvas import Signature

    if isinstance(signatures, str | bytes) or not isinstance(signatures, Sequence) or not all(
            isinstance(signature, Signature) for signature in signatures):
        raise usage_error(
            f"step {name!r}: children are a list of task signatures (task.s(...)), got "
            f"{signatures!r:.100}")
    if not signatures:
        raise usage_error(f"step {name!r}: children need at least one signature")
    calls = [signature.call(incoming=False) for signature in signatures]
    tasks = store.tasks
    strangers = sorted({call.task for call in calls
                        if tasks is not None and call.task not in tasks})
    if strangers:
        raise usage_error(
            f"step {name!r}: {', '.join(map(repr, strangers))} is not a task of this app; a "
            "child must be one (no worker of this app would run it, and the parent would wait "
            "for ever)")
    if store.placed is not None:
        for call in calls:
            where = store.placed(call.options.queue)
            if where != store.database:
                raise usage_error(
                    f"step {name!r}: the child's queue {call.options.queue!r} lives in database "
                    f"{where!r} and this job in {store.database!r}; a child lives in its "
                    "parent's database (docs/design.md \"Several databases\")")
    return calls


class Steps:
    """`current_job().step` in a sync handler: each call returns its value."""

    def __init__(self, run: _Run) -> None:
        self._run = run

    def run(self, name: str, fn: Callable[..., Any], *args: Any,
            retry: RetryPolicy | None = None, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` once per job and name; its JSON result is recorded, and a later
        run of the job returns it without calling `fn`. An exception records nothing and
        propagates (after `retry`'s attempts, if given).

        >>> charge = current_job().step.run("charge", charge_card, order_id)  # doctest: +SKIP
        """
        run = self._run
        name = run.use(name)
        _check_retry(retry)
        step = run.recorded_step(name, "run")
        if step is not None and step.recorded_at is not None:
            return run.replay(step)
        attempt = 1
        while True:
            run.check_lease(name)
            try:
                value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    with contextlib.suppress(Exception):
                        value.close()  # type: ignore[attr-defined]
                    raise usage_error(
                        f"step {name!r}: {fn!r} returned an awaitable; a sync handler's step "
                        "runs a sync function")
                break
            except Exception as exc:
                if no_retry(exc) or not _again(
                        retry, attempt, exc):
                    raise
                time.sleep(backoff_delay(retry.backoff, attempt))  # type: ignore[union-attr]
                attempt += 1
        return run.record_json(name, "run", value)

    def sleep(self, name: str, duration: str | float | timedelta | datetime) -> None:
        """Suspend the job until `duration` has passed (or until an aware datetime), holding no
        place and no unit meanwhile; a later run passes through once it is over.

        >>> current_job().step.sleep("cool-off", "2h")  # doctest: +SKIP
        """
        run = self._run
        name = run.use(name)
        step = run.recorded_step(name, "sleep")
        if step is not None and step.recorded_at is not None:
            return
        wake_at = run.wake_at(name, step, duration, "sleep")
        if wake_at <= run.now():
            run.get_store().record(run.job_id, run.fence, name, "sleep", encoded="null")
            return
        raise Suspended(name, "sleep", "sleep", wake_at, None)

    def wait_for(self, name: str, signal: str, timeout: str | float | timedelta | None = None
                 ) -> Any:
        """The payload of the next signal `signal` sent to this job (`app.signal(...)`): one
        sent before is taken at once; otherwise the job suspends until one comes, or raises
        SignalTimeoutError once `timeout` has passed.

        >>> step = current_job().step                                 # doctest: +SKIP
        >>> approval = step.wait_for("approve", signal="approval", timeout="1d")  # doctest: +SKIP
        """
        run = self._run
        name = run.use(name)
        signal = _signal_name(signal)
        step = run.recorded_step(name, "wait")
        if step is not None and step.recorded_at is not None:
            return run.replay(step)
        wake_at = None if timeout is None else run.wake_at(name, step, timeout, "wait_for")
        found, payload = run.get_store().wait_signal(run.job_id, run.fence, name, signal)
        if found:
            return payload
        if wake_at is not None and wake_at <= run.now():
            message = f"no signal {signal!r} came for step {name!r} before its timeout"
            run.get_store().record(run.job_id, run.fence, name, "wait", error={
                "type": "SignalTimeoutError", "message": message})
            raise SignalTimeoutError(message)
        raise Suspended(name, "wait", "signal", wake_at, signal)

    def child(self, name: str, signature: Any) -> Any:
        """Enqueue `signature` as this job's child (once per job and name) and suspend until it
        ends: its result, or TaskFailedError / TaskCanceledError as `JobHandle.get` raises.

        >>> label = current_job().step.child("label", print_label.s(order_id))  # doctest: +SKIP
        """
        return self._children(name, [signature], "child")[0]

    def children(self, name: str, signatures: Sequence[Any]) -> list[Any]:
        """`child` for several signatures at once: their results in order, once all ended."""
        return self._children(name, signatures, "children")

    def _children(self, name: str, signatures: Sequence[Any], kind: str) -> list[Any]:
        run = self._run
        name = run.use(name)
        step = run.recorded_step(name, kind)
        if step is not None and step.recorded_at is not None:
            return run.replay(step)
        calls = _calls(name, signatures, run.get_store())
        spawned, results = run.children_outcome(name, kind, len(calls))
        if results is not None:
            return results
        if not spawned and step is not None:
            # Pending: this job suspended on its children, which are gone (a hand-run prune).
            # Enqueueing them again would run them twice.
            raise WorkhorseError(
                f"step {name!r} of job {run.job_id}: its children are gone (pruned before it "
                "resumed); their outcome is lost, and they are not enqueued again")
        if not spawned:
            run.check_lease(name)
            run.get_store().spawn(run.job_id, run.fence, name, calls)
        raise Suspended(name, kind, "children", None, None)


class AsyncSteps:
    """`current_job().step` in an async handler: the same calls, awaited. Their database round
    trips run in a worker thread (the store's connections are sync), never on the loop."""

    def __init__(self, run: _Run) -> None:
        self._run = run
        self._sync = Steps(run)

    async def run(self, name: str, fn: Callable[..., Any], *args: Any,
                  retry: RetryPolicy | None = None, **kwargs: Any) -> Any:
        """`Steps.run`, awaited; `fn` may be sync or async.

        >>> charge = await current_job().step.run("charge", charge_card, order_id)  # doctest: +SKIP
        """
        run = self._run
        name = run.use(name)
        _check_retry(retry)
        step = await anyio.to_thread.run_sync(run.recorded_step, name, "run")
        if step is not None and step.recorded_at is not None:
            return run.replay(step)
        attempt = 1
        while True:
            run.check_lease(name)
            try:
                if inspect.iscoroutinefunction(fn):
                    value = await fn(*args, **kwargs)
                else:
                    # A sync function runs in a worker thread: on the loop it would stall the
                    # slot's heartbeats, claims and records for as long as it blocks.
                    value = await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
                    if inspect.isawaitable(value):
                        value = await value
                break
            except Exception as exc:
                if no_retry(exc) or not _again(
                        retry, attempt, exc):
                    raise
                await anyio.sleep(backoff_delay(retry.backoff, attempt))  # type: ignore[union-attr]
                attempt += 1
        return await anyio.to_thread.run_sync(run.record_json, name, "run", value)

    async def sleep(self, name: str, duration: str | float | timedelta | datetime) -> None:
        """`Steps.sleep`, awaited."""
        await self._in_thread(self._sync.sleep, name, duration)

    async def wait_for(self, name: str, signal: str,
                       timeout: str | float | timedelta | None = None) -> Any:
        """`Steps.wait_for`, awaited."""
        return await self._in_thread(self._sync.wait_for, name, signal, timeout)

    async def child(self, name: str, signature: Any) -> Any:
        """`Steps.child`, awaited."""
        return await self._in_thread(self._sync.child, name, signature)

    async def children(self, name: str, signatures: Sequence[Any]) -> list[Any]:
        """`Steps.children`, awaited."""
        return await self._in_thread(self._sync.children, name, signatures)

    @staticmethod
    async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except Suspended as suspended:
            raise Suspended(suspended.name, suspended.kind, suspended.reason, suspended.wake_at,
                            suspended.signal) from None


def _check_retry(retry: object) -> None:
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise usage_error(f"retry= takes a RetryPolicy, got {retry!r:.80}")


def _again(retry: RetryPolicy | None, attempt: int, exc: Exception) -> bool:
    return retry is not None and attempt < retry.max_attempts and isinstance(exc, retry.retry_on)


def steps_for(job_id: int, fence: int, store: StepStore | None, is_async: bool,
              lost: Callable[[], bool] = lambda: False) -> Steps | AsyncSteps:
    """The `step` of one run of a job: sync or async as its handler is; `lost()` says whether
    the run's lease was lost (its steps then refuse to run)."""
    run = _Run(job_id, fence, store, lost)
    return AsyncSteps(run) if is_async else Steps(run)
