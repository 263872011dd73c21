"""The executor: runs one claimed job in this process and says how it ended.

It knows nothing about processes, sockets or connections, so a slot, a test, or an in-process
drain can all run it. For one job it:
  1. finds the task (an unknown one fails the job at once: no retry could change that);
  2. unpacks the payload `{"args": [...], "kwargs": {...}}` into `fn(*args, **kwargs)`;
  3. calls an async handler on the running loop, a sync one in a worker thread, with
     `current_job()` giving the job's JobContext; an async handler past the task's `timeout` is
     cancelled, a sync one cannot be, so it runs on (its job still active, its place held) and
     its attempt then fails with JobTimeoutError, its result discarded;
  4. turns what happened into an `Outcome`: the result as JSON text (encoded here, once); or the
     error document, with a retry time while attempts remain and the task retries that error
     (`retry_on`; `Retry(delay)` always does, after its own delay); or, for `Snooze(delay)`, the
     delay after which the job comes back without using an attempt; or, for `Backoff(...)`, the
     backoff to record (the job goes back to ready without using an attempt).

A job whose lease was lost meanwhile (`Execution.lost`, set by the slot when a heartbeat is
refused) has no outcome: its result is discarded, because another claim may own the job now.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry import trace

from .. import _ops, context, telemetry
from .._ops import encode_json, error_document
from ..context import Backoff, JobContext, Retry, Snooze
from ..durable import AsyncSteps, Steps, StepStore, Suspended, no_retry, steps_for
from ..errors import JobTimeoutError, PayloadError, UnknownTaskError
from ..retry import backoff_delay
from ..task import Task
from ..types import ClaimedJob
from ._threads import HandlerThreads, InCallerThread


@dataclass(eq=False, slots=True)
class Execution:
    """One claimed job while this process runs it (the lease keeper reads id, fence, lease)."""

    job: ClaimedJob
    task: Task[Any, Any] | None
    lease: float
    governed: bool = False
    handle: asyncio.Task[Any] | None = None  # set while an async handler can be cancelled
    lost: bool = False
    holds: bool = True  # still counted against the slot's capacity
    retention: str = _ops.DEFAULT_RETENTION_JSON  # how long the job is kept once it ends
    cancel_requested: bool = False  # an operator asked; the job ends canceled when it stops
    began: float = 0.0  # perf_counter when the slot started its handler
    # monotonic: when the claim was sent, then each renewal sent (the lease lasts at least
    # `lease` from there), so a job whose lease may have run out unseen is never started
    renewed: float = 0.0
    # The handler's latest progress as (seq, done, total, message), replaced whole on each call
    # (one assignment: a reader in another thread never sees a torn value); seq counts the calls.
    progress: tuple[int, int | float, int | float | None, str | None] | None = None
    progress_written: int = 0  # the highest seq sent to the database
    steps: Any = None  # this run's durable steps, made at the handler's first step call

    def report(self, done: int | float, total: int | float | None, message: str | None) -> None:
        """current_job().progress(): keep the latest value (checked already); no round trip."""
        last = self.progress
        self.progress = (1 if last is None else last[0] + 1, done, total, message)

    def unwritten_progress(self) -> tuple[int, int | float, int | float | None, str | None] | None:
        """The latest progress when it is newer than what was sent, else None."""
        value = self.progress
        return value if value is not None and value[0] > self.progress_written else None

    def lease_may_have_expired(self, now: float) -> bool:
        return now - self.renewed >= self.lease

    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def fence(self) -> int:
        return self.job.fence


@dataclass(slots=True)  # not frozen: one is made per job, and frozen __init__ costs more
class Outcome:
    """How one attempt ended: `result` (JSON text) on success, else `error` and `retry_at`
    (None: no retry, the job ends failed or held)."""

    execution: Execution
    result: str | None = None
    error: dict[str, Any] | None = None
    retry_at: datetime | None = None
    snooze: float | None = None  # Snooze(delay): seconds until the job comes back
    backoff: Backoff | None = None  # raised Backoff: its scope backs off, the job is ready again
    suspend: Suspended | None = None  # a durable step suspended the job
    duration: float = 0.0  # seconds the handler ran

    @property
    def succeeded(self) -> bool:
        return (self.error is None and self.snooze is None and self.backoff is None
                and self.suspend is None)

    @property
    def retry_delay(self) -> float | None:
        if self.retry_at is None:
            return None
        return max((self.retry_at - datetime.now(UTC)).total_seconds(), 0.0)


def tracing_enabled() -> bool:
    """Whether an OpenTelemetry SDK is installed: without one, `run_span` is pure overhead."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def storable(error: dict[str, Any]) -> dict[str, Any]:
    """The error document with NULs and lone surrogates escaped, so that jsonb accepts it."""
    return {
        key: value.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
        if isinstance(value, str) else value
        for key, value in error.items()
    }


def arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """`(args, kwargs)` from an app task's payload, or PayloadError."""
    if isinstance(payload, dict):
        args = payload.get("args", [])
        kwargs = payload.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    raise PayloadError(f'payload must be {{"args": [...], "kwargs": {{...}}}}, got {payload!r}')


class Executor:
    """Runs claimed jobs of one app's tasks; `await executor.run(execution)` -> Outcome | None.

    `threads` are the threads sync handlers run in (None: threads of its own, unbounded: the
    caller bounds how many jobs it runs at once; `InCallerThread()`: the calling thread itself,
    as `eager()` runs them).
    """

    def __init__(
        self,
        tasks: Mapping[str, Task[Any, Any]],
        *,
        app_name: str,
        default_lease: float,
        threads: HandlerThreads | InCallerThread | None = None,
        traced: bool | None = None,
        retention: str = _ops.DEFAULT_RETENTION_JSON,
        renew: Callable[[Execution], None] | None = None,
        back_off: Callable[[Execution, Backoff], None] | None = None,
        step_store: StepStore | None = None,
    ) -> None:
        self.tasks = dict(tasks)
        # Where durable steps are read and recorded (None: a step call raises).
        self.step_store = step_store
        # JobContext.heartbeat(): renew this job's lease now (StaleLeaseError when it is lost).
        self.renew = renew
        # JobContext.backoff(): have this backoff written (thread-safe; None: not recorded).
        self.back_off = back_off
        self.retention = retention  # the app's, for jobs whose task it does not know
        self.app_name = app_name
        self.default_lease = default_lease
        self.threads: HandlerThreads | InCallerThread = (
            threads if threads is not None else HandlerThreads())
        self.traced = tracing_enabled() if traced is None else traced

    def prepare(self, job: ClaimedJob, governed: bool = False) -> Execution:
        """The Execution for a job just claimed: its task, and the lease to keep renewing."""
        task = self.tasks.get(job.task)
        lease = task.lease if task is not None and task.lease else self.default_lease
        retention = task.retention_json if task is not None else self.retention
        return Execution(job, task, lease, governed, retention=retention)

    def context(self, execution: Execution) -> JobContext:
        """The JobContext `current_job()` gives the handler (made only when it asks)."""
        renew, back_off = self.renew, self.back_off
        return JobContext.for_claimed(
            execution.job, cancel_check=lambda: execution.cancel_requested,
            renew=(lambda: renew(execution)) if renew is not None else _no_renewal,
            report=execution.report,
            back_off=(lambda signal: back_off(execution, signal)) if back_off is not None
            else _not_recorded,
            steps=functools.partial(self._steps, execution))

    def _steps(self, execution: Execution) -> Steps | AsyncSteps:
        if execution.steps is None:
            task = execution.task
            execution.steps = steps_for(execution.job.id, execution.job.fence, self.step_store,
                                        task is not None and task.is_async,
                                        lambda: execution.lost)
        return execution.steps

    async def run(self, execution: Execution) -> Outcome | None:
        job, task = execution.job, execution.task
        attributes = telemetry.attributes(job.queue)
        started = time.perf_counter()
        outcome: Outcome | None = None
        try:
            if execution.lost:
                return None
            try:
                if task is None:
                    raise UnknownTaskError(f"app {self.app_name!r} has no task named {job.task!r}")
                args, kwargs = arguments(job.payload)
            except (UnknownTaskError, PayloadError) as exc:
                # Nothing a retry could change.
                outcome = self._failure(execution, exc, final=True)
                return outcome
            token = context.enter(functools.partial(self.context, execution))
            try:
                if self.traced:
                    with telemetry.run_span(task.name, job.queue, job.id, job.attempts, job.meta):
                        value = await self._call(execution, task, args, kwargs)
                else:
                    value = await self._call(execution, task, args, kwargs)
                result = encode_json(value, "result")  # not JSON: this attempt fails
            except asyncio.CancelledError as exc:
                if not execution.lost and not execution.cancel_requested:
                    raise
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                if execution.lost:
                    return None
                # Cancelled on an operator's request: the database ends it `canceled`.
                outcome = self._failure(execution, exc, final=True)
                return outcome
            except Snooze as exc:
                if execution.lost:
                    return None
                outcome = Outcome(execution, snooze=exc.delay)
                return outcome
            except Backoff as exc:
                if execution.lost:
                    return None
                outcome = Outcome(execution, backoff=exc)
                return outcome
            except Suspended as exc:
                if execution.lost:
                    return None
                outcome = Outcome(execution, suspend=exc)
                return outcome
            except Exception as exc:
                outcome = self._failure(execution, exc)
                return outcome
            except (SystemExit, KeyboardInterrupt) as exc:  # a handler must not end the slot
                outcome = self._failure(execution, exc)
                return outcome
            finally:
                context.leave(token)
            if execution.lost:
                return None
            outcome = Outcome(execution, result=result)
            return outcome
        finally:
            took = time.perf_counter() - started
            if outcome is not None:
                outcome.duration = took
            telemetry.job_duration.record(took, attributes)

    async def _call(
        self, execution: Execution, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        timeout = task.timeout
        if task.is_async:
            execution.handle = asyncio.current_task()
            if execution.cancel_requested and execution.handle is not None:
                execution.handle.cancel()  # asked before it started: it must not run on
            try:
                if timeout is None:
                    return await task.fn(*args, **kwargs)
                limit = asyncio.timeout(timeout)
                try:
                    async with limit:
                        return await task.fn(*args, **kwargs)
                except TimeoutError as exc:
                    if not limit.expired() or execution.lost or execution.cancel_requested:
                        raise
                    raise JobTimeoutError(
                        f"{task.name} ran past its timeout of {timeout:g}s and was cancelled"
                    ) from exc
            finally:
                execution.handle = None
        value = await self.threads.run(
            functools.partial(_call_sync, task.fn, args, kwargs, timeout))
        if isinstance(value, _Raised):
            raise value.exc
        return value

    def _failure(
        self, execution: Execution, exc: BaseException, final: bool = False
    ) -> Outcome | None:
        if execution.lost:
            return None
        job, task = execution.job, execution.task
        retry_at = None
        final = final or no_retry(exc)  # a step's usage error: no retry could change it
        if not final and task is not None and job.attempts < job.max_attempts:
            if isinstance(exc, Retry):
                delay = exc.delay if exc.delay is not None else backoff_delay(
                    task.retry_backoff, job.attempts)
                retry_at = datetime.now(UTC) + timedelta(seconds=delay)
            elif task.should_retry(exc):
                delay = backoff_delay(task.retry_backoff, job.attempts)
                retry_at = datetime.now(UTC) + timedelta(seconds=delay)
        return Outcome(execution, error=storable(error_document(exc)), retry_at=retry_at)


def _no_renewal() -> None:
    return None


def _not_recorded(signal: Backoff) -> None:
    return None


@dataclass(frozen=True, slots=True)
class _Raised:
    exc: BaseException


def _call_sync(
    fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], timeout: float | None
) -> Any:
    """Runs in the worker thread. SystemExit and KeyboardInterrupt come back as values, so that a
    handler that raises them fails its job instead of escaping into the loop. A thread cannot be
    stopped: past `timeout` (timed from here, when a thread took it) what it returned or raised
    is discarded and the attempt fails with JobTimeoutError, once it returns."""
    began = time.perf_counter()
    raised: BaseException | None = None
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # handed on below, unless the attempt had timed out
        raised = exc
    if timeout is not None and (took := time.perf_counter() - began) > timeout:
        error = JobTimeoutError(
            f"the attempt ran {took:.3g}s, past its timeout of {timeout:g}s; a sync handler "
            "cannot be interrupted, so it ran to its end and what it returned or raised was "
            "discarded")
        error.__cause__ = raised  # a late exception still shows in the traceback
        return _Raised(error)
    if raised is not None:
        if isinstance(raised, (SystemExit, KeyboardInterrupt, Suspended)):
            return _Raised(raised)
        raise raised
    return value
