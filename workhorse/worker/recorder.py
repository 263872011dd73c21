"""The outcome recorder: batches completions and failures on its own connection.

Successes go in one `complete` statement per flush: the batch is whatever finished while the
previous flush was in flight, so a busy slot pays one round trip for many jobs and an idle one
pays no delay. Failures go one by one to `fail`, with the retry time the executor chose.
Backoffs a running handler asked for (`current_job().backoff()`) go first, one by one. A
suspension (a durable step's `Suspended`) goes with the failures, to `suspend`.

Successes of the queues named in `ride` do not wait for a flush: they ride on the slot's next
claim of their queue (`take_riding`, then `counted` with what the claim recorded), which frees
their capacity and claims its replacement in one statement. Whatever the claimer will not take
soon (a rate-limited queue, a drain, a failed claim) goes back to the flush (`release_riding`).

Recorded outcomes are counted (telemetry, one log line for a failure) and handed, a flush's
completions at once, to `on_recorded([(outcome, status), ...], reused)`, where `status` is the
job's new status, or None when the fence was stale (the job was claimed again, or canceled)
and nothing was recorded, and `reused` says that a claim already took the capacity they freed.
The database may refuse a flush (a restart, a cut connection): the outcomes stay queued and the
flush is retried, on a new connection, after a backoff.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any

import anyio
import psycopg

from .. import _ops, telemetry
from .._ops import error_document
from ..context import Backoff
from ..errors import InvalidOptionsError, PayloadError, StaleLeaseError, first_line
from ..types import BackoffState, JobStatus
from . import _logs
from ._reconnect import Reconnect
from .executor import Execution, Outcome

log = logging.getLogger("workhorse.worker")

Recorded = tuple[Outcome, JobStatus | None]
Connect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]


class OutcomeRecorder:
    """`add()` outcomes from the loop; `run()` records them until `close()` and empty."""

    def __init__(
        self,
        connect: Connect,
        on_recorded: Callable[[list[Recorded], bool], None],
        *,
        flush_interval: float = 0.0,
        on_connected: Callable[[int], None] | None = None,
        name: str = "recorder",
        ride: Iterable[str] = (),
        on_riding: Callable[[], None] | None = None,
    ) -> None:
        self._connect = connect
        self._on_recorded = on_recorded
        self._on_connected = on_connected
        self.flush_interval = flush_interval
        self.name = name
        self._done: list[Outcome] = []
        self._failed: list[Outcome] = []
        self._backoffs: list[tuple[Execution, Backoff]] = []
        self._riding: dict[str, list[Outcome]] = {}
        self._ride = set(ride)
        self._on_riding = on_riding
        self._pending = anyio.Event()
        self._closing = False
        self._conn: psycopg.AsyncConnection[Any] | None = None

    @property
    def pending(self) -> int:
        return (len(self._done) + len(self._failed) + len(self._backoffs)
                + sum(map(len, self._riding.values())))

    def add_backoff(self, execution: Execution, signal: Backoff) -> None:
        """current_job().backoff() of a running job: written at the next flush, before any
        outcome (call on the loop's thread)."""
        self.queue_backoff(execution, signal)
        self._pending.set()

    def queue_backoff(self, execution: Execution, signal: Backoff) -> None:
        """`add_backoff` for a caller that flushes itself (a drain)."""
        self._backoffs.append((execution, signal))

    def add(self, outcome: Outcome) -> None:
        if outcome.succeeded:
            queue = outcome.execution.job.queue
            # A job with progress not written yet goes to the flush, which writes it first.
            if (queue in self._ride and not self._closing and not self._backoffs
                    and outcome.execution.unwritten_progress() is None):
                self._riding.setdefault(queue, []).append(outcome)
                if self._on_riding is not None:
                    self._on_riding()
                return
            self._done.append(outcome)
        else:
            self._failed.append(outcome)
        self._pending.set()

    # ---- successes riding on the next claim ----------------------------------------------------

    def riding(self) -> dict[str, list[Outcome]]:
        """Successes waiting for their queue's next claim, by queue (do not modify)."""
        return self._riding

    def take_riding(self, queue: str) -> list[Outcome]:
        return self._riding.pop(queue, [])

    def counted(self, outcomes: list[Outcome], accepted: dict[tuple[int, int], JobStatus]) -> None:
        """A claim recorded these riding successes: count them as a flush would."""
        if outcomes:
            self._count_completed(outcomes, accepted, reused=True)

    def release_riding(self, outcomes: Iterable[Outcome] | None = None) -> None:
        """Record these (default: every riding success) with the next flush instead."""
        if outcomes is None:
            outcomes = [o for queued in self._riding.values() for o in queued]
            self._riding.clear()
        outcomes = list(outcomes)
        if outcomes:
            self._done.extend(outcomes)
            self._pending.set()

    def stop_riding(self) -> None:
        """No claim will come any more (a drain): every success goes to the flush."""
        self._ride = set()
        self.release_riding()

    def close(self) -> None:
        """Record what is queued, then let `run()` return."""
        self._closing = True
        self.release_riding()
        self._pending.set()

    async def run(self) -> None:
        reconnect = Reconnect()
        try:
            while True:
                if not self._done and not self._failed and not self._backoffs:
                    if self._closing:
                        return
                    await self._pending.wait()
                    self._pending = anyio.Event()
                    continue
                if self.flush_interval > 0 and not self._closing:
                    await anyio.sleep(self.flush_interval)
                try:
                    await self.flush()
                    reconnect.succeeded()
                except psycopg.Error as exc:
                    delay = reconnect.failed()
                    log.warning("%s: recording outcomes failed (%s); retrying in %.1fs",
                                self.name, first_line(exc), delay)
                    await self._disconnect()
                    await anyio.sleep(delay)
        finally:
            await self._disconnect()

    async def flush(self) -> None:
        """Record every queued outcome now (successes in one statement)."""
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect()
            if self._on_connected is not None:
                self._on_connected(self._conn.info.backend_pid)
        conn = self._conn
        while self._backoffs:  # before the outcomes: a job's backoff, then its success
            execution, signal = self._backoffs[0]
            try:
                _, state = await _ops.execute_async(conn, _ops.backoff(
                    execution.job_id, execution.fence, signal.retry_after, signal.scope,
                    signal.budget, release=False))
            except InvalidOptionsError as exc:
                log.warning("job %d (%s): its current_job().backoff() was refused: %s",
                            execution.job_id, execution.job.task, exc)
            else:
                _log_backoff(execution, signal, state)
            self._backoffs.pop(0)
        done, self._done = self._done, []
        if done:
            try:
                await _write_progress(conn, done)
                accepted = await _ops.execute_async(conn, _ops.complete_encoded(encoded(done)))
            except BaseException:
                self._done[:0] = done
                raise
            self._count_completed(done, accepted)
        while self._failed:
            outcome = self._failed[0]
            execution = outcome.execution
            try:
                await _write_progress(conn, [outcome])
                status: JobStatus | None
                if outcome.snooze is not None:
                    status = await _ops.execute_async(conn, _ops.snooze(
                        execution.job_id, execution.fence, outcome.snooze, execution.retention))
                elif outcome.suspend is not None:
                    point = outcome.suspend
                    status = await _ops.execute_async(conn, _ops.suspend(
                        execution.job_id, execution.fence, point.name, point.kind,
                        point.reason, point.wake_at, point.signal, execution.retention))
                elif outcome.backoff is not None:
                    signal = outcome.backoff
                    status, state = await _ops.execute_async(conn, _ops.backoff(
                        execution.job_id, execution.fence, signal.retry_after, signal.scope,
                        signal.budget, release=True, retention=execution.retention))
                    if status is None:
                        raise StaleLeaseError(f"job {execution.job_id}: its fence is stale")
                    _log_backoff(execution, signal, state)
                else:
                    assert outcome.error is not None
                    status = await _ops.execute_async(conn, _ops.fail(
                        execution.job_id, execution.fence, outcome.error, outcome.retry_at,
                        execution.retention))
            except StaleLeaseError:
                status = None
            except InvalidOptionsError as exc:
                if outcome.backoff is None:
                    raise
                # A scope the job does not have (no budget, no key): a mistake in the handler
                # that no retry could change, so the job fails with it.
                self._failed[0] = replace(outcome, backoff=None, retry_at=None,
                                          error=error_document(exc))
                continue
            except PayloadError as exc:
                # A document that cannot be stored (an error document built by hand): record
                # the failure with what can be said, rather than never recording it.
                error = outcome.error or {}
                outcome = replace(outcome, error={
                    "type": str(error.get("type"))[:255],
                    "message": f"the error could not be stored: {exc}", "traceback": None})
                self._failed[0] = outcome
                continue
            self._failed.pop(0)
            self._count_failed(outcome, status)

    def _count_completed(
        self, done: list[Outcome], accepted: dict[tuple[int, int], JobStatus],
        reused: bool = False,
    ) -> None:
        per_queue: dict[str, int] = {}
        recorded: list[Recorded] = []
        lines: list[tuple[str, int, str, int, float]] = []
        for outcome in done:
            execution = outcome.execution
            job = execution.job
            status = accepted.get((execution.job_id, execution.fence))
            if status is JobStatus.SUCCEEDED:
                per_queue[job.queue] = per_queue.get(job.queue, 0) + 1
                recorded.append((outcome, JobStatus.SUCCEEDED))
                lines.append((job.task, job.id, job.queue, job.attempts, outcome.duration))
            elif status is not None:  # canceled: its cancel was requested while it ran
                recorded.append((outcome, status))
                _logs.finished(str(status), job.task, job.id, job.queue, job.attempts,
                               outcome.duration, level=logging.WARNING)
            else:
                _logs.finished("stale", job.task, job.id, job.queue, job.attempts,
                               outcome.duration, "its result was rejected: its lease had been "
                               "lost", level=logging.WARNING)
                recorded.append((outcome, None))
        _logs.succeeded(lines)
        for queue, n in per_queue.items():
            telemetry.jobs_succeeded.add(n, telemetry.attributes(queue))
        self._on_recorded(recorded, reused)

    def _count_failed(self, outcome: Outcome, status: JobStatus | None) -> None:
        job = outcome.execution.job
        attributes = telemetry.attributes(job.queue)
        error = outcome.error or {}
        what = f"{error.get('type')}: {error.get('message')}"
        line = functools.partial(_logs.finished, task=job.task, job_id=job.id, queue=job.queue,
                                 attempt=job.attempts, duration=outcome.duration)
        if status is None:
            line("stale", detail="its outcome was rejected: its lease had been lost",
                 level=logging.WARNING)
        elif outcome.snooze is not None and status == JobStatus.SCHEDULED:
            line("snoozed", detail=f"back in {outcome.snooze:g}s, its attempt not used")
        elif outcome.backoff is not None and status == JobStatus.READY:
            line("backed off", detail="ready again, its attempt not used")
        elif outcome.suspend is not None and status in (JobStatus.SUSPENDED, JobStatus.READY):
            point = outcome.suspend
            line("suspended", detail=f"at step {point.name!r} ({point.reason})"
                 + (", its cause already there: ready again" if status == JobStatus.READY
                    else ""))
        elif status == JobStatus.SCHEDULED:
            telemetry.jobs_retried.add(1, attributes)
            line("retried", detail=f"attempt {job.attempts}/{job.max_attempts} failed: {what}")
        elif status == JobStatus.CANCELED:
            line("canceled", detail="canceled on request", level=logging.WARNING)
        elif status == JobStatus.HELD:
            telemetry.jobs_held.add(1, attributes)
            line("held", detail=what, level=logging.WARNING)
        else:
            telemetry.jobs_failed.add(1, attributes)
            line("failed", detail=what, level=logging.WARNING)
        self._on_recorded([(outcome, status)], False)

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            with anyio.CancelScope(shield=True):
                try:
                    await conn.close()
                except Exception:  # closing a broken connection
                    log.debug("%s: closing a broken connection failed", self.name)


async def _write_progress(conn: psycopg.AsyncConnection[Any], outcomes: list[Outcome]) -> None:
    """Flush the last progress of these attempts before their outcome is recorded (while their
    fence still holds): the value a handler reported just before it returned is kept too."""
    entries = []
    sent = []
    for outcome in outcomes:
        execution = outcome.execution
        value = execution.unwritten_progress()
        if value is not None:
            seq, done, total, message = value
            entries.append((execution.job_id, execution.fence, seq, done, total, message))
            sent.append((execution, seq))
    if not entries:
        return
    await _ops.execute_async(conn, _ops.write_progress(entries))
    for execution, seq in sent:
        execution.progress_written = max(execution.progress_written, seq)


def encoded(successes: list[Outcome]) -> list[tuple[int, int, str, str]]:
    """Successes as the complete and claim statements take them: (id, fence, result, retention)."""
    return [(o.execution.job_id, o.execution.fence, o.result or "null", o.execution.retention)
            for o in successes]


def _log_backoff(execution: Execution, signal: Backoff, state: BackoffState | None) -> None:
    if state is None:  # the job's fence is stale: nothing was written
        log.warning("job %d (%s): its backoff was not recorded: its lease had been lost",
                    execution.job_id, execution.job.task)
        return
    # A key's backoff names its queue, then the key: "queue 'q' key 'k'".
    target = (f"{'queue' if state.scope == 'key' else state.scope} {state.name!r}"
              + (f" key {state.key!r}" if state.key else ""))
    log.warning("job %d (%s) backed off %s until %s (retry_after %gs)", execution.job_id,
                execution.job.task, target, state.until.isoformat(timespec="seconds"),
                signal.retry_after)
