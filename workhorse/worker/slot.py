"""One slot: a forked process with an anyio event loop and at most `concurrency` jobs in flight.

The slot wires three parts together and owns what is about processes:
  - the `Claimer` (claimer.py) decides when, from which queue and how much to claim;
  - the `Executor` (executor.py) runs each claimed job: async handlers on the loop, sync ones in
    a thread (at most `concurrency` of them, _threads.py);
  - the `OutcomeRecorder` (recorder.py) batches completions and failures on a second connection.
Leases are renewed by `LeaseKeeper` (leases.py) on a third connection, in its own thread; wake-ups
arrive from the supervisor over a socketpair (wakeups.py).

The loop, per round:
  1. free = concurrency - in flight (and, with --max-concurrent-tasks, as many tokens of the
     supervisor's shared budget as it can take without waiting). Nothing is claimed beyond what
     can start at once.
  2. The claimer claims round-robin across the served queues; each job starts at once.
  3. When no queue can give anything, wait for a wake-up (relayed NOTIFY, a job ending, the
     recorder freeing governed capacity) or a poll timeout.

Capacity in use counts running handlers, plus governed jobs whose outcome is not recorded yet:
the database still counts those active, so claiming in their place would only come back empty.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import psycopg

from .. import _ops, telemetry
from ..context import Backoff
from ..durable import StepStore
from ..errors import StaleLeaseError, first_line
from ..types import ClaimedJob, JobStatus
from . import _shared, hooks
from ._reconnect import Reconnect
from ._shared import Budget, Stats
from .claimer import SATURATION_POLL, Claimer, QueueState
from .executor import Execution, Executor, Outcome
from .leases import LeaseKeeper
from .recorder import OutcomeRecorder, Recorded
from .wakeups import GOVERNED, HINT, SHARES, WakeupReceiver, decode_shares

log = logging.getLogger("workhorse.worker")

# How often a slot checks that its supervisor is still its parent.
PARENT_CHECK = 1.0
# With --max-concurrent-tasks spent by other slots, look again this often.
BUDGET_POLL = 0.02
# While jobs are still running and less than half the slot is free, wait this long at most for
# more room before claiming, so that short jobs finishing one by one are not claimed for one by
# one (a claim costs the database about as much for 1 job as for 10).
CLAIM_COALESCE = 0.002
# Claiming ahead (ungoverned queues only, up to --prefetch jobs): as many as this slot's places
# will start within PREFETCH_WINDOW seconds at the handlers' measured pace, so short jobs start
# without a round trip between them while a long job never keeps others waiting behind it for
# long (nothing is claimed ahead until a job has been timed, nor for jobs slower than this).
PREFETCH_WINDOW = 0.05
# Governed claims in a stream, not in one batch that the whole budget waits on. A governed queue
# claims nothing ahead, so every place freed waits for a claim: one claim for the whole budget
# (jobs of one batch ending together) keeps every place idle for the claim's whole round trip,
# where small claims refill the first places at once while the next claim is on its way. Small
# claims cost a claim's round trip each time, so a claim takes at least enough to refill the
# slot's places in half the handlers' time, at the claims' measured round trip (the claimer's
# moving average, at least GOVERNED_CLAIM_COST), and at least GOVERNED_CHUNK_MIN. The round trip
# is measured, not assumed: with several supervisors on one budget a claim waits for the queue's
# admission lock behind the others', and chunks sized for an idle lock (8 jobs where 20 ms is
# spent waiting) kept a 256-place budget 84% idle (issue #40).
GOVERNED_CHUNK_MIN = 8
GOVERNED_CLAIM_COST = 0.001


def governed_chunk(
    concurrency: int, pace: float | None, claim_cost: float = GOVERNED_CLAIM_COST
) -> int | None:
    """The most jobs one governed claim should take at `pace` (the handlers' moving-average
    seconds a job) when a claim takes `claim_cost` seconds, or None for no cap: no job timed yet,
    or jobs so short (or claims so slow) that the slot's places need claims of its whole
    concurrency."""
    if pace is None or pace <= 0:
        return None
    cost = max(claim_cost, GOVERNED_CLAIM_COST)
    chunk = max(GOVERNED_CHUNK_MIN, math.ceil(2 * cost * concurrency / pace))
    return None if chunk >= concurrency else chunk


_RECORDED_STAT = {
    JobStatus.SUCCEEDED: _shared.SUCCEEDED,
    JobStatus.READY: _shared.RELEASED,  # it raised Backoff: ready again, its attempt given back
    JobStatus.SUSPENDED: _shared.RELEASED,  # a durable step: its place given back until it wakes
    JobStatus.SCHEDULED: _shared.RETRIED,
    JobStatus.HELD: _shared.HELD,
    JobStatus.FAILED: _shared.FAILED,
    JobStatus.CANCELED: _shared.CANCELED,
}


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
    ride: bool = True  # successes ride on the next claim of their queue
    prefetch: int = 0  # at most this many jobs of ungoverned queues claimed ahead of a place
    database: str = "default"  # the app's database `url` is (docs/design.md "Several databases")


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
        shares: dict[str, float] | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.index = config.index
        self.channel = channel
        self.budget = budget
        self.stats = stats or Stats(config.index + 1)
        self.parent_pid = parent_pid
        self.claimer = Claimer(
            config.queues, lease=config.lease, dequeue_timeout=config.dequeue_timeout,
            saturation_poll=config.saturation_poll, governed=governed or (),
            pass_on=self._pass_on, tasks=app.tasks, runs_jobs_in=self._runs_jobs_in,
            holds_in=self._holds_in, shares=shares,
        )
        self._running: dict[int, Execution] = {}  # claimed by this slot: running or ahead
        self._ahead: collections.deque[Execution] = collections.deque()  # claimed, not started
        self._to_release: list[Execution] = []  # claimed ahead, to give back
        self._pace: float | None = None  # seconds per job and place, a moving average
        self._handlers: set[asyncio.Task[Outcome | None]] = set()
        self._in_flight = 0
        self._started_this_round = 0
        self._draining = False
        self._claim_conn: psycopg.AsyncConnection[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._receiver: WakeupReceiver | None = None
        self._coalesce_at = max(1, config.concurrency // 2)

    # ---- process ---------------------------------------------------------------------------

    def run(self) -> int:
        return anyio.run(self._main, backend="asyncio")

    async def _main(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = _Flag()
        # Durable steps (docs/design.md "Durable execution") on connections of their own, opened
        # at the first step a job of this slot calls.
        self.step_store = StepStore(self._connect_steps, self.app.enqueue_calls,
                                    tasks=self.app.tasks, database=self.config.database,
                                    placed=self.app.database_of)
        self.executor = Executor(
            self.app.tasks, app_name=self.app.name, default_lease=self.config.lease,
            threads=hooks.handler_threads(self.config.concurrency, f"workhorse-slot{self.index}"),
            retention=_ops.retention_json(self.app.retention), renew=self._renew_now,
            back_off=self._back_off_from_handler, step_store=self.step_store,
        )
        self.recorder = OutcomeRecorder(
            lambda: self._connect("outcomes"), self._recorded,
            flush_interval=self.config.flush_interval, on_connected=self._outcomes_connected,
            name=f"slot {self.index}", ride=self.config.queues if self.config.ride else (),
            on_riding=self._wake.set,
        )
        keeper = self._keeper = LeaseKeeper(
            self.config.url, self._running, self._lost_from_thread,
            self.config.heartbeat_interval, name=f"workhorse-leases-{self.index}",
            on_cancel=self._cancel_from_thread,
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
                    outcomes.start_soon(self.recorder.run)
                    await self._claim_loop()
                    while self._handlers:
                        await self._wake.wait()
                    # Every job has ended: let the recorder record the last outcomes and stop.
                    self.recorder.close()
                services.cancel_scope.cancel()
        finally:
            keeper.stop()
            self.step_store.close()
            await _close_quietly(self._claim_conn)
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
            self.claimer.hinted(names)
            self._wake.set()
        elif kind == GOVERNED:
            self.claimer.set_governed(names)
            # A queue governed now (a policy, a pause, an override) admits in the claim only:
            # what was claimed ahead from it goes back.
            self._give_back(lambda execution: execution.job.queue in names)
            # And a dry one is polled at the governed pace from now on: a sleep begun at the
            # ungoverned one (--dequeue-timeout) ends to be timed again. A queue whose first jobs
            # naming a budget found it full would otherwise wait that long for units that come
            # back with no NOTIFY (a lapsed hold's).
            self._wake.set()
        elif kind == SHARES:
            self.claimer.set_shares(decode_shares(names))

    def _runs_jobs_in(self, queue: str) -> bool:
        return any(execution.job.queue == queue for execution in self._running.values())

    def _holds_in(self, queue: str) -> int:
        """The places this slot holds in `queue`: its jobs there, running or finished with their
        success still to ride on a claim."""
        return sum(1 for execution in self._running.values() if execution.job.queue == queue)

    def _pass_on(self, queue: str) -> None:
        if self._receiver is not None:
            self._receiver.pass_on(queue)

    def _outcomes_connected(self, backend_pid: int) -> None:
        if self._receiver is not None:
            self._receiver.report_backend(backend_pid)

    async def _connect(self, role: str) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(
            self.config.url, autocommit=True, connect_timeout=10,
            application_name=f"workhorse-slot{self.index}-{role}",
        )
        conn.add_notice_handler(_log_server_warning)
        _ops.use_fast_json(conn)
        return conn

    def _connect_steps(self) -> psycopg.Connection[Any]:
        """A connection for durable steps (called in a handler's thread, never on the loop)."""
        # No prepared statements: PgBouncer in transaction mode keeps no session for them.
        conn = psycopg.connect(self.config.url, autocommit=True, connect_timeout=10,
                               prepare_threshold=None,
                               application_name=f"workhorse-slot{self.index}-steps")
        conn.add_notice_handler(_log_server_warning)
        return conn

    # ---- claiming --------------------------------------------------------------------------

    def _free(self) -> int:
        """Places free for a claim: the slot's capacity less what is in flight, plus the
        governed places whose success rides on the claim (it frees them first)."""
        free = self.config.concurrency - self._in_flight
        for outcomes in self.recorder.riding().values():
            for outcome in outcomes:
                if outcome.execution.holds:
                    free += 1
        return free

    def _ahead_room(self) -> int:
        """How many more jobs to claim ahead of a free place (see PREFETCH_WINDOW)."""
        if not self.config.prefetch or self._pace is None or self.budget is not None:
            return 0
        target = min(self.config.prefetch,
                     int(PREFETCH_WINDOW * self.config.concurrency / max(self._pace, 1e-6)))
        return max(target - len(self._ahead), 0)

    async def _claim_loop(self) -> None:
        reconnect = Reconnect()
        budget = self.budget
        claimer = self.claimer
        recorder = self.recorder
        while not self._draining:
            if self._to_release:
                await self._release_ahead()
                continue
            free = self._free()
            ahead = self._ahead_room()
            # With no free place, a claim only to fill the ahead buffer waits until it would be
            # a batch worth a round trip: half the prefetch, and half the slot's concurrency
            # (a top-up of a few jobs only makes claims smaller, and starts no job sooner).
            if free <= 0 and ahead < max(1, self.config.prefetch // 2, self._coalesce_at):
                await self._wake.wait()
                continue
            if 0 < free < self._coalesce_at and self._handlers and not ahead:
                deadline = time.monotonic() + CLAIM_COALESCE
                while (self._free() < self._coalesce_at
                       and self._handlers and not self._draining):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    await self._wake.wait(left)
                free = self._free()
            now = time.monotonic()
            riding = recorder.riding()
            eligible = claimer.eligible(now, riding)
            if riding:
                # Successes of a queue not claimed this round are flushed instead.
                names = {state.name for state in eligible}
                for queue in [q for q in riding if q not in names]:
                    recorder.release_riding(recorder.take_riding(queue))
            if ahead and all(state.governed for state in eligible):
                ahead = 0  # nothing may be claimed ahead from these
            if not eligible or (free <= 0 and not ahead):
                await self._wake.wait(claimer.idle_timeout(now))
                continue
            free = max(free, 0)
            want = free
            if budget is not None:
                want = budget.try_acquire(self.index, free)
                if want == 0 and free > 0:
                    recorder.release_riding()
                    await self._wake.wait(BUDGET_POLL)
                    continue
            self._started_this_round = 0
            try:
                if self._claim_conn is None or self._claim_conn.closed:
                    self._claim_conn = await self._connect("claim")
                sent = claimer.statements
                await claimer.claim(self._claim_conn, eligible, want + ahead, self._start,
                                    stop=lambda: self._draining, recorder=recorder,
                                    governed_limit=want,
                                    governed_chunk=governed_chunk(
                                        self.config.concurrency, self._pace,
                                        claimer.governed_claim_seconds))
                reconnect.succeeded()
                if claimer.statements == sent:  # nothing was worth a claim: never spin
                    await self._wake.wait(claimer.idle_timeout(time.monotonic()))
            except psycopg.Error as exc:
                delay = reconnect.failed()
                log.warning("slot %d: claim failed (%s); retrying in %.1fs",
                            self.index, first_line(exc), delay)
                await _close_quietly(self._claim_conn)
                self._claim_conn = None
                await self._wake.wait(delay)
            finally:
                # Tokens for jobs that started are given back as each job ends; the rest now.
                if budget is not None and want > self._started_this_round:
                    budget.release(self.index, want - self._started_this_round)
        # Draining: what was claimed ahead goes back at once, and no claim will come, so
        # successes (those riding too) go to the flush.
        self._give_back(lambda execution: True)
        if self._to_release:
            await self._release_ahead()
        recorder.stop_riding()

    def _give_back(self, which: Callable[[Execution], bool]) -> None:
        """Move the jobs claimed ahead that `which` names to the release list."""
        if not self._ahead:
            return
        keep: collections.deque[Execution] = collections.deque()
        for execution in self._ahead:
            (self._to_release if which(execution) else keep).append(execution)
        self._ahead = keep
        if self._to_release:
            self._wake.set()

    async def _release_ahead(self) -> None:
        """Give back the jobs claimed ahead on the release list: ready again, attempt unused."""
        executions, self._to_release = self._to_release, []
        for execution in executions:
            self._running.pop(execution.job_id, None)  # no more renewals, whatever happens
        retention = _ops.retention_json(self.app.retention)
        try:
            if self._claim_conn is None or self._claim_conn.closed:
                self._claim_conn = await self._connect("claim")
            released = await _ops.execute_async(self._claim_conn, _ops.release(
                [(e.job_id, e.fence) for e in executions], retention))
        except psycopg.Error as exc:
            # Their leases run out without renewals; they are claimable again then.
            log.warning("slot %d: giving back %d jobs claimed ahead failed (%s); they are "
                        "claimable again when their leases expire", self.index,
                        len(executions), first_line(exc))
            await _close_quietly(self._claim_conn)
            self._claim_conn = None
            return
        self.stats.add(self.index, _shared.RELEASED, len(released))
        log.debug("slot %d: gave back %d jobs claimed ahead", self.index, len(released))

    def _start(self, state: QueueState, claimed: list[ClaimedJob]) -> None:
        """Claimed jobs start at once while there are free places; the rest (of an ungoverned
        queue, claimed ahead) wait in `_ahead` for a place."""
        telemetry.jobs_claimed.add(len(claimed), telemetry.attributes(state.name))
        self.stats.add(self.index, _shared.CLAIMED, len(claimed))
        running = self._running
        for job in claimed:
            execution = self.executor.prepare(job, state.governed)
            execution.renewed = state.claim_sent
            running[job.id] = execution
            if self._in_flight < self.config.concurrency or state.governed:
                self._launch(execution)
            else:
                self._ahead.append(execution)
        self.stats.set(self.index, _shared.IN_FLIGHT, self._in_flight)

    def _launch(self, execution: Execution) -> None:
        """Start one job's handler: a plain asyncio task running the executor itself (a task
        group's per-task cancel scopes, or a wrapping coroutine, cost more than a no-op
        handler). Lost leases cancel the task (see _mark_lost)."""
        job = execution.job
        if execution.lease_may_have_expired(time.monotonic()):
            # Claimed (or last renewed) a whole lease ago, unseen: the slot was frozen or the
            # reply was that late. Another claim may own the job now: it must not run here.
            execution.lost = True
        self._in_flight += 1
        self._started_this_round += 1
        waited = (datetime.now(UTC) - max(job.run_at, job.enqueued_at)).total_seconds()
        telemetry.job_queue_wait.record(max(waited, 0.0), telemetry.attributes(job.queue))
        execution.began = time.perf_counter()
        handler = self._loop.create_task(self.executor.run(execution))  # type: ignore[union-attr]
        self._handlers.add(handler)
        handler.add_done_callback(functools.partial(self._ended, execution))

    # ---- running ---------------------------------------------------------------------------

    def _ended(self, execution: Execution, handler: asyncio.Task[Outcome | None]) -> None:
        """A job's task is done: hand its outcome to the recorder, and give back its place."""
        self._handlers.discard(handler)
        outcome: Outcome | None = None
        if not handler.cancelled():
            error = handler.exception()
            if error is not None:
                log.error("slot %d: internal error running a job", self.index, exc_info=error)
            else:
                outcome = handler.result()
        job = execution.job
        if outcome is None:
            self._running.pop(job.id, None)
        # else: its lease is renewed until the recorder has recorded the outcome (a slow flush
        # or a reconnect must not let it run out); _recorded lets it go.
        took = time.perf_counter() - execution.began
        self._pace = took if self._pace is None else 0.9 * self._pace + 0.1 * took
        if outcome is not None:
            if outcome.retry_at is not None:
                self.claimer.retry_due(job.queue, outcome.retry_delay or 0.0)
            elif outcome.snooze is not None:
                self.claimer.retry_due(job.queue, outcome.snooze)
            elif outcome.suspend is not None and outcome.suspend.wake_at is not None:
                # A durable sleep or a wait's timeout: look again when it falls due.
                self.claimer.retry_due(job.queue, max(
                    (outcome.suspend.wake_at - datetime.now(UTC)).total_seconds(), 0.0))
            self.recorder.add(outcome)
        elif execution.lost:
            self.stats.add(self.index, _shared.LOST)
            log.warning(
                "slot %d: job %d (%s) lost its lease; its outcome was discarded",
                self.index, job.id, job.task,
            )
        if self.budget is not None:
            self.budget.release(self.index)
        # A governed job holds its place until the recorder has recorded its outcome.
        if outcome is None or not execution.governed:
            self._release(execution)
        # A job claimed ahead takes the place at once: no round trip between short jobs.
        while self._ahead and self._in_flight < self.config.concurrency and not self._draining:
            self._launch(self._ahead.popleft())
        self._wake.set()

    def _release(self, execution: Execution) -> None:
        """The job no longer counts against this slot's capacity."""
        if execution.holds:
            execution.holds = False
            self._in_flight -= 1
            self.stats.set(self.index, _shared.IN_FLIGHT, self._in_flight)

    def _renew_now(self, execution: Execution) -> None:
        """JobContext.heartbeat(): a sync handler's thread waits for the renewal; an async
        handler (on the loop, which must not block) asks for it and goes on."""
        target = self._keeper.ask()
        if threading.get_ident() != self._loop_thread:
            self._keeper.wait_for_beat(target)
        if execution.lost:
            raise StaleLeaseError(f"job {execution.job_id}: its lease was lost; stop now, "
                                  "another claim may own the job")

    def _back_off_from_handler(self, execution: Execution, backoff: Backoff) -> None:
        """JobContext.backoff(): the recorder writes it at its next flush (from a sync handler's
        thread, handed to the loop first)."""
        if threading.get_ident() == self._loop_thread:
            self.recorder.add_backoff(execution, backoff)
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self.recorder.add_backoff, execution, backoff)

    def _lost_from_thread(self, lost: list[tuple[int, int]]) -> None:
        for job_id, fence in lost:  # at once, for a handler's thread waiting on a heartbeat
            execution = self._running.get(job_id)
            if execution is not None and execution.fence == fence:
                execution.lost = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._mark_lost, lost)

    def _cancel_from_thread(self, requested: list[tuple[int, int]]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._mark_cancel_requested, requested)

    def _mark_cancel_requested(self, requested: list[tuple[int, int]]) -> None:
        for job_id, fence in requested:
            execution = self._running.get(job_id)
            if execution is None or execution.fence != fence or execution.cancel_requested:
                continue
            execution.cancel_requested = True
            if execution in self._ahead:  # never started: given back, it ends canceled
                self._give_back(lambda e, execution=execution: e is execution)  # type: ignore[misc]
            elif execution.handle is not None:
                execution.handle.cancel()  # async: cancelled; sync: runs on, ends canceled

    def _mark_lost(self, lost: list[tuple[int, int]]) -> None:
        for job_id, fence in lost:
            execution = self._running.get(job_id)
            if execution is None or execution.fence != fence:
                continue  # it ended between the snapshot and the heartbeat
            execution.lost = True
            if execution.handle is not None:
                execution.handle.cancel()  # async: cooperative cancel; sync: result discarded

    # ---- outcomes --------------------------------------------------------------------------

    def _recorded(self, recorded: list[Recorded], reused: bool) -> None:
        freed: set[str] = set()
        counts = [0] * len(_shared.STAT_FIELDS)  # one shared-memory write per field, not per job
        running = self._running
        for outcome, status in recorded:
            execution = outcome.execution
            if running.get(execution.job_id) is execution:
                del running[execution.job_id]
            self._release(execution)
            if status is None:
                counts[_shared.STALE] += 1
            else:
                counts[_RECORDED_STAT.get(status, _shared.FAILED)] += 1
                freed.add(outcome.execution.job.queue)
        for field, n in enumerate(counts):
            if n:
                self.stats.add(self.index, field, n)
        if reused:
            return  # the claim that recorded them took the capacity they freed
        has_room = self.config.concurrency - self._in_flight > 0
        if self.claimer.freed(freed, has_room):
            self._wake.set()


def _log_server_warning(diagnostic: psycopg.errors.Diagnostic) -> None:
    """Our SQL warns the worker through the server (an older claim refusing a queue whose
    features it does not know): say it in the worker's log."""
    if diagnostic.severity_nonlocalized == "WARNING":
        log.warning("database: %s", diagnostic.message_primary)


async def _close_quietly(conn: psycopg.AsyncConnection[Any] | None) -> None:
    if conn is not None and not conn.closed:
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await conn.close()
