"""One slot: a forked process with an anyio event loop and at most `concurrency` jobs in flight.

The loop, per round:
  1. free = concurrency - in flight (and, with --max-concurrent-tasks, as many tokens of the
     supervisor's shared budget as it can take without waiting). Nothing is claimed beyond what
     can start at once.
  2. Claim round-robin across the served queues, starting one queue further each round; one
     `claim_v1` call per queue (it takes one queue's admission lock), on an autocommit connection.
  3. Start each job: async handlers on the loop, sync ones in a thread (limiter of size
     `concurrency`); the payload `{"args": [...], "kwargs": {...}}` becomes `fn(*args, **kwargs)`.
  4. When no queue can give anything, wait for a wake-up (relayed NOTIFY, a job ending, the
     flusher freeing governed capacity) or a poll timeout.

A queue whose claim came back short is "dry" until a hint names it again or its poll interval
passes: `--dequeue-timeout` for an empty queue, a short poll for a governed (maybe saturated) one.

Outcomes go through one flusher on a second connection: successes are batched into one
`complete_v1` call (the batch is whatever finished while the previous flush was in flight, so a
busy slot pays one round trip for many jobs and an idle one pays no delay); failures go one by one
to `fail_v1`, with a retry time from the task's backoff while attempts remain. Leases are renewed
by `LeaseKeeper` on a third connection, in its own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import psycopg
from opentelemetry import trace

from .. import telemetry
from ..errors import PayloadError, StaleLeaseError, UnknownTaskError
from ..queue import AsyncQueue, encode_json, error_document
from ..retry import backoff_delay
from ..task import Task
from ..types import ClaimedJob, JobStatus
from . import _shared
from ._shared import Budget, Stats
from .leases import LeaseKeeper
from .wakeups import GOVERNED, HINT, WakeupReceiver

log = logging.getLogger("workhorse.worker")

# How often a slot checks that its supervisor is still its parent.
PARENT_CHECK = 1.0
# A governed queue that came back short is polled this often (at most) without a hint.
SATURATION_POLL = 1.0
# With --max-concurrent-tasks spent by other slots, look again this often.
BUDGET_POLL = 0.02
# While jobs are still running and less than half the slot is free, wait this long at most for
# more room before claiming, so that short jobs finishing one by one are not claimed for one by
# one (a claim costs the database about as much for 1 job as for 10).
CLAIM_COALESCE = 0.002


@dataclass(frozen=True, slots=True)
class SlotConfig:
    index: int
    url: str
    queues: tuple[str, ...]
    concurrency: int
    lease: float
    dequeue_timeout: float
    grace: float
    heartbeat_interval: float
    flush_interval: float = 0.0
    saturation_poll: float = SATURATION_POLL


@dataclass(eq=False, slots=True)
class _Running:
    job: ClaimedJob
    task: Task[Any, Any] | None
    job_id: int
    fence: int
    lease: float
    governed: bool = False
    handle: asyncio.Task[None] | None = None  # set while an async handler can be cancelled
    lost: bool = False
    holds: bool = True  # still counted against the slot's capacity


@dataclass(eq=False, slots=True)
class _Failure:
    running: _Running
    error: dict[str, Any]
    retry_at: datetime | None


class _Flag:
    """A resettable event: `set()` from the loop; `wait()` consumes it."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float | None = None) -> bool:
        if not self._event.is_set():
            if timeout is None:
                await self._event.wait()
            elif timeout > 0:
                with anyio.move_on_after(timeout):
                    await self._event.wait()
        fired = self._event.is_set()
        if fired:
            self._event = anyio.Event()
        return fired


@dataclass(eq=False)
class _QueueState:
    name: str
    attributes: dict[str, str]
    dry_since: float | None = None  # monotonic; None: worth a claim
    hints: int = 0  # bumped by every hint, so a claim can tell a hint raced it
    local_due: float | None = None  # monotonic; a retry this slot scheduled
    governed: bool = False
    relayed: bool = False  # a governed hint came to this slot alone: pass it on if room is left


def _storable(error: dict[str, Any]) -> dict[str, Any]:
    """The error document with NULs and lone surrogates escaped, so that jsonb accepts it."""
    return {
        key: value.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
        if isinstance(value, str) else value
        for key, value in error.items()
    }


def _tracing_enabled() -> bool:
    """Whether an OpenTelemetry SDK is installed: without one, `run_span` is pure overhead."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    if not isinstance(payload, dict):
        raise PayloadError(f'payload must be {{"args": [...], "kwargs": {{...}}}}, got {payload!r}')
    args = payload.get("args", [])
    kwargs = payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise PayloadError(f'payload must be {{"args": [...], "kwargs": {{...}}}}, got {payload!r}')
    return args, kwargs


class Slot:
    """Runs in the forked child: `Slot(...).run()` returns the process exit code."""

    def __init__(
        self,
        app: Any,
        config: SlotConfig,
        *,
        channel: socket.socket | None = None,
        budget: Budget | None = None,
        stats: Stats | None = None,
        parent_pid: int | None = None,
        governed: set[str] | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.index = config.index
        self.channel = channel
        self.budget = budget
        self.stats = stats or Stats(config.index + 1)
        self.parent_pid = parent_pid
        self._tasks: dict[str, Task[Any, Any]] = dict(app.tasks)
        governed = governed or set()
        self._queues = [
            _QueueState(q, telemetry.attributes(q), governed=q in governed) for q in config.queues
        ]
        self._by_name = {state.name: state for state in self._queues}
        self._running: dict[int, _Running] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        # Capacity in use: running handlers, plus governed jobs whose outcome is not recorded
        # yet (the database still counts them active, so claiming in their place would only
        # come back empty).
        self._in_flight = 0
        self._draining = False
        self._closing = False
        self._done: list[tuple[_Running, Any]] = []
        self._failed: list[_Failure] = []
        self._claim_conn: psycopg.AsyncConnection[Any] | None = None
        self._outcome_conn: psycopg.AsyncConnection[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._receiver: WakeupReceiver | None = None
        self._rotation = 0
        self._coalesce_at = max(1, config.concurrency // 2)

    # ---- process ---------------------------------------------------------------------------

    def run(self) -> int:
        return anyio.run(self._main, backend="asyncio")

    async def _main(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._wake = _Flag()
        self._outcomes = _Flag()
        self._limiter = anyio.CapacityLimiter(self.config.concurrency)
        keeper = LeaseKeeper(
            self.config.url, self._running, self._lost_from_thread,
            self.config.heartbeat_interval, name=f"workhorse-leases-{self.index}",
        )
        keeper.start()
        try:
            async with anyio.create_task_group() as services:
                services.start_soon(self._watch_signals)
                if self.parent_pid is not None:
                    services.start_soon(self._watch_parent)
                if self.channel is not None:
                    self._receiver = WakeupReceiver(self.channel, self._on_message)
                    services.start_soon(self._receiver.run)
                async with anyio.create_task_group() as outcomes:
                    outcomes.start_soon(self._flusher)
                    await self._claim_loop()
                    while self._handlers:
                        await self._wake.wait()
                    # Every job has ended: let the flusher record the last outcomes and stop.
                    self._closing = True
                    self._outcomes.set()
                services.cancel_scope.cancel()
        finally:
            keeper.stop()
            for conn in (self._claim_conn, self._outcome_conn):
                if conn is not None and not conn.closed:
                    with anyio.CancelScope(shield=True):
                        await conn.close()
        return 0

    def _begin_drain(self, why: str) -> None:
        if not self._draining:
            log.debug("slot %d: draining (%s)", self.index, why)
        self._draining = True
        self._wake.set()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                self._begin_drain("SIGTERM")

    async def _watch_parent(self) -> None:
        while os.getppid() == self.parent_pid:
            await anyio.sleep(PARENT_CHECK)
        # The supervisor is gone (PR_SET_PDEATHSIG has most likely said so already): finish
        # what is running, within the grace period nobody else will enforce now.
        self._begin_drain("supervisor died")
        await anyio.sleep(self.config.grace)
        log.warning("slot %d: orphaned and grace expired; exiting", self.index)
        os._exit(1)

    def _on_message(self, kind: bytes, names: set[str]) -> None:
        if kind == HINT:
            for name in names:
                state = self._by_name.get(name)
                if state is not None:
                    state.hints += 1
                    state.dry_since = None
                    if state.governed:
                        state.relayed = True
            self._wake.set()
        elif kind == GOVERNED:
            for state in self._queues:
                state.governed = state.name in names

    # ---- claiming --------------------------------------------------------------------------

    async def _connect(self, role: str) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self.config.url, autocommit=True, connect_timeout=10,
            application_name=f"workhorse-slot{self.index}-{role}",
        )

    def _eligible(self, now: float) -> list[_QueueState]:
        queues = self._queues
        start = self._rotation % len(queues)
        ordered = queues[start:] + queues[:start]
        out = []
        for state in ordered:
            if state.dry_since is not None:
                if state.local_due is not None and state.local_due <= now:
                    state.local_due = None
                    state.dry_since = None
                elif now - state.dry_since >= self._poll_interval(state):
                    state.dry_since = None
            if state.dry_since is None:
                out.append(state)
        return out

    def _poll_interval(self, state: _QueueState) -> float:
        if state.governed:
            return min(self.config.dequeue_timeout, self.config.saturation_poll)
        return self.config.dequeue_timeout

    def _idle_timeout(self, now: float) -> float:
        soonest = self.config.dequeue_timeout
        for state in self._queues:
            if state.dry_since is not None:
                soonest = min(soonest, state.dry_since + self._poll_interval(state) - now)
            if state.local_due is not None:
                soonest = min(soonest, state.local_due - now)
        return max(soonest, 0.001)

    async def _claim_loop(self) -> None:
        backoff = 0.5
        budget = self.budget
        while not self._draining:
            free = self.config.concurrency - self._in_flight
            if free <= 0:
                await self._wake.wait()
                continue
            if free < self._coalesce_at and self._handlers:
                deadline = time.monotonic() + CLAIM_COALESCE
                while (self.config.concurrency - self._in_flight < self._coalesce_at
                       and self._handlers and not self._draining):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    await self._wake.wait(left)
                free = self.config.concurrency - self._in_flight
            now = time.monotonic()
            eligible = self._eligible(now)
            if not eligible:
                await self._wake.wait(self._idle_timeout(now))
                continue
            want = free
            if budget is not None:
                want = budget.try_acquire(self.index, free)
                if want == 0:
                    await self._wake.wait(BUDGET_POLL)
                    continue
            got = 0
            try:
                if self._claim_conn is None or self._claim_conn.closed:
                    self._claim_conn = await self._connect("claim")
                claimer = AsyncQueue(self._claim_conn)
                for state in eligible:
                    need = want - got
                    if need <= 0 or self._draining:
                        break
                    hints = state.hints
                    relayed, state.relayed = state.relayed, False
                    claimed = await claimer.claim(state.name, need, self.config.lease)
                    if len(claimed) < need and state.hints == hints:
                        state.dry_since = time.monotonic()
                    elif relayed and self._receiver is not None:
                        # We were the one slot told; the queue may have room for more.
                        self._receiver.pass_on(state.name)
                    if claimed:
                        got += len(claimed)
                        self._start(state, claimed)
                backoff = 0.5
            except psycopg.Error as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                log.warning("slot %d: claim failed (%s); retrying in %.1fs",
                            self.index, first, backoff)
                await self._close_quietly(self._claim_conn)
                self._claim_conn = None
                await self._wake.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            finally:
                if budget is not None and want > got:
                    budget.release(self.index, want - got)
            self._rotation += 1

    def _start(self, state: _QueueState, claimed: list[ClaimedJob]) -> None:
        attributes = state.attributes
        telemetry.jobs_claimed.add(len(claimed), attributes)
        self.stats.add(self.index, _shared.CLAIMED, len(claimed))
        self._in_flight += len(claimed)
        self.stats.set(self.index, _shared.IN_FLIGHT, self._in_flight)
        now = datetime.now(UTC)
        worker_lease = self.config.lease
        tasks = self._tasks
        traced = _tracing_enabled()
        create_task = self._loop.create_task  # type: ignore[union-attr]
        handlers = self._handlers
        for job in claimed:
            task = tasks.get(job.task)
            lease = task.lease if task is not None and task.lease else worker_lease
            running = _Running(job, task, job.id, job.fence, lease, state.governed)
            self._running[job.id] = running
            waited = (now - max(job.run_at, job.enqueued_at)).total_seconds()
            telemetry.job_queue_wait.record(max(waited, 0.0), attributes)
            # A plain asyncio task per job: a task group's per-task cancel scopes cost more than
            # a no-op handler. Lost leases cancel the task itself (see _mark_lost).
            handler = create_task(self._execute(running, attributes, traced))
            handlers.add(handler)
            handler.add_done_callback(self._handler_done)

    def _handler_done(self, handler: asyncio.Task[None]) -> None:
        self._handlers.discard(handler)
        self._wake.set()
        if not handler.cancelled() and handler.exception() is not None:
            log.error("slot %d: internal error running a job", self.index,
                      exc_info=handler.exception())

    # ---- running ---------------------------------------------------------------------------

    async def _execute(
        self, running: _Running, attributes: dict[str, str], traced: bool
    ) -> None:
        job, task = running.job, running.task
        started = time.perf_counter()
        try:
            if running.lost:
                return
            try:
                if task is None:
                    raise UnknownTaskError(
                        f"app {self.app.name!r} has no task named {job.task!r}"
                    )
                args, kwargs = _arguments(job.payload)
            except (UnknownTaskError, PayloadError) as exc:
                # Nothing a retry could change: the job ends now (failed, or held).
                self._record_failure(running, exc, final=True)
                return
            try:
                if traced:
                    with telemetry.run_span(task.name, job.queue, job.id, job.attempts, job.meta):
                        result = await self._call(running, task, args, kwargs)
                else:
                    result = await self._call(running, task, args, kwargs)
                if result is not None:
                    encode_json(result, "result")  # not JSON: this attempt fails
            except asyncio.CancelledError:
                if not running.lost:
                    raise
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                return
            except Exception as exc:
                self._record_failure(running, exc)
            except (SystemExit, KeyboardInterrupt) as exc:  # a handler must not end the slot
                self._record_failure(running, exc)
            else:
                if not running.lost:
                    self._done.append((running, result))
                    self._outcomes.set()
        finally:
            telemetry.job_duration.record(time.perf_counter() - started, attributes)
            self._running.pop(job.id, None)
            if running.lost:
                self.stats.add(self.index, _shared.LOST)
                log.warning(
                    "slot %d: job %d (%s) lost its lease; its outcome was discarded",
                    self.index, job.id, job.task,
                )
            if self.budget is not None:
                self.budget.release(self.index)
            if running.lost or not running.governed:
                self._release(running)
            self._wake.set()

    async def _call(
        self, running: _Running, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        if task.is_async:
            running.handle = asyncio.current_task()
            try:
                return await task.fn(*args, **kwargs)
            finally:
                running.handle = None
        result = await anyio.to_thread.run_sync(
            functools.partial(_call_sync, task.fn, args, kwargs), limiter=self._limiter
        )
        if isinstance(result, _Raised):
            raise result.exc
        return result

    def _release(self, running: _Running) -> None:
        """The job no longer counts against this slot's capacity."""
        if running.holds:
            running.holds = False
            self._in_flight -= 1
            self.stats.set(self.index, _shared.IN_FLIGHT, self._in_flight)

    def _record_failure(self, running: _Running, exc: BaseException, final: bool = False) -> None:
        if running.lost:
            return
        job, task = running.job, running.task
        retry_at = None
        if not final and task is not None and job.attempts < job.max_attempts:
            delay = backoff_delay(task.retry_backoff, job.attempts)
            retry_at = datetime.now(UTC) + timedelta(seconds=delay)
            state = self._by_name.get(job.queue)
            if state is not None:
                due = time.monotonic() + delay
                state.local_due = due if state.local_due is None else min(state.local_due, due)
        self._failed.append(_Failure(running, error_document(exc), retry_at))
        self._outcomes.set()

    def _lost_from_thread(self, lost: list[tuple[int, int]]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._mark_lost, lost)

    def _mark_lost(self, lost: list[tuple[int, int]]) -> None:
        for job_id, fence in lost:
            running = self._running.get(job_id)
            if running is None or running.fence != fence:
                continue  # it ended between the snapshot and the heartbeat
            running.lost = True
            if running.handle is not None:
                running.handle.cancel()  # async: cooperative cancel; sync: result discarded

    # ---- outcomes --------------------------------------------------------------------------

    async def _flusher(self) -> None:
        backoff = 0.5
        while True:
            if not self._done and not self._failed:
                if self._closing:
                    return
                await self._outcomes.wait()
                continue
            if self.config.flush_interval > 0 and not self._closing:
                await anyio.sleep(self.config.flush_interval)
            try:
                await self._flush()
                backoff = 0.5
            except psycopg.Error as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                log.warning("slot %d: recording outcomes failed (%s); retrying in %.1fs",
                            self.index, first, backoff)
                await self._close_quietly(self._outcome_conn)
                self._outcome_conn = None
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _flush(self) -> None:
        if self._outcome_conn is None or self._outcome_conn.closed:
            self._outcome_conn = await self._connect("outcomes")
            if self._receiver is not None:
                self._receiver.report_backend(self._outcome_conn.info.backend_pid)
        queue = AsyncQueue(self._outcome_conn)
        done, self._done = self._done, []
        if done:
            try:
                try:
                    accepted = await queue.complete_many(
                        [(r.job_id, r.fence, result) for r, result in done]
                    )
                except PayloadError:
                    # A result changed after it was checked: record the others, fail that one.
                    accepted = await self._complete_one_by_one(queue, done)
            except BaseException:
                self._done[:0] = done
                raise
            self._count_completed(done, accepted)
        while self._failed:
            failure = self._failed[0]
            running = failure.running
            try:
                try:
                    status = await queue.fail(
                        running.job_id, running.fence, failure.error, failure.retry_at
                    )
                except PayloadError:  # a message PostgreSQL cannot store (NUL, lone surrogate)
                    failure.error = _storable(failure.error)
                    status = await queue.fail(
                        running.job_id, running.fence, failure.error, failure.retry_at
                    )
            except StaleLeaseError:
                status = None
            self._failed.pop(0)
            self._count_failed(failure, status)

    async def _complete_one_by_one(
        self, queue: AsyncQueue, done: list[tuple[_Running, Any]]
    ) -> set[int]:
        accepted: set[int] = set()
        for running, result in done:
            try:
                accepted |= await queue.complete_many([(running.job_id, running.fence, result)])
            except PayloadError as exc:
                self._record_failure(running, exc)
                accepted.add(running.job_id)  # reported as a failure, not as stale
        return accepted

    def _count_completed(self, done: list[tuple[_Running, Any]], accepted: set[int]) -> None:
        freed: set[str] = set()
        per_queue: dict[str, int] = {}
        stale = 0
        for running, _ in done:
            self._release(running)
            queue = running.job.queue
            if running.job_id in accepted:
                per_queue[queue] = per_queue.get(queue, 0) + 1
                freed.add(queue)
            else:
                stale += 1
                log.warning(
                    "slot %d: job %d's result was rejected: its lease had been lost",
                    self.index, running.job_id,
                )
        for queue, n in per_queue.items():
            state = self._by_name.get(queue)
            attributes = state.attributes if state else telemetry.attributes(queue)
            telemetry.jobs_succeeded.add(n, attributes)
        self.stats.add(self.index, _shared.SUCCEEDED, sum(per_queue.values()))
        if stale:
            self.stats.add(self.index, _shared.STALE, stale)
        self._freed(freed)

    def _count_failed(self, failure: _Failure, status: str | None) -> None:
        self._release(failure.running)
        job = failure.running.job
        state = self._by_name.get(job.queue)
        attributes = state.attributes if state else telemetry.attributes(job.queue)
        error = failure.error
        what = f"{error['type']}: {error['message']}"
        if status is None:
            self.stats.add(self.index, _shared.STALE)
            log.warning("slot %d: job %d's failure was rejected: its lease had been lost",
                        self.index, job.id)
        elif status == JobStatus.SCHEDULED:
            telemetry.jobs_retried.add(1, attributes)
            self.stats.add(self.index, _shared.RETRIED)
            log.info("job %d (%s) attempt %d/%d failed, retrying: %s",
                     job.id, job.task, job.attempts, job.max_attempts, what)
        elif status == JobStatus.HELD:
            telemetry.jobs_held.add(1, attributes)
            self.stats.add(self.index, _shared.HELD)
            log.warning("job %d (%s) held after attempt %d/%d: %s",
                        job.id, job.task, job.attempts, job.max_attempts, what)
        else:
            telemetry.jobs_failed.add(1, attributes)
            self.stats.add(self.index, _shared.FAILED)
            log.warning("job %d (%s) failed after attempt %d/%d: %s",
                        job.id, job.task, job.attempts, job.max_attempts, what)
        if status is not None:
            self._freed({job.queue})

    def _freed(self, queues: set[str]) -> None:
        """Our own outcomes freed capacity in these governed queues. Their NOTIFY is not relayed
        back to this supervisor's slots (the listener knows our connections), so this slot acts
        on it: it claims at once, and passes the hint on if that claim comes back full; with no
        room of its own, it passes the hint on straight away."""
        woke = False
        room = self.config.concurrency - self._in_flight > 0
        for name in queues:
            state = self._by_name.get(name)
            if state is None or not state.governed:
                continue
            if room:
                state.dry_since = None
                state.relayed = True
                woke = True
            elif self._receiver is not None:
                self._receiver.pass_on(name)
        if woke:
            self._wake.set()

    @staticmethod
    async def _close_quietly(conn: psycopg.AsyncConnection[Any] | None) -> None:
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                await conn.close()


@dataclass(frozen=True, slots=True)
class _Raised:
    exc: BaseException = field()


def _call_sync(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Runs in the worker thread. SystemExit and KeyboardInterrupt come back as values, so that a
    handler that raises them fails its job instead of escaping into the loop."""
    try:
        return fn(*args, **kwargs)
    except (SystemExit, KeyboardInterrupt) as exc:
        return _Raised(exc)
