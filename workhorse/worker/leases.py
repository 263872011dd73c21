"""Batched heartbeats on their own connection, in their own thread.

A slot's event loop can be busy (a claim waiting for a governed queue's lock, a burst of
completions) and a sync handler can hold the GIL for long stretches; neither may let a lease run
out under a job that is still running. So each slot has a `LeaseKeeper`: a plain thread with its
own autocommit connection that renews every running job's lease in one statement, every third of
the shortest lease in use. A job claimed with the worker's `--lease` is renewed with its task's own
lease when it has one.

A job missing from the returned set has lost its lease (it expired first, or the job was claimed
again). `on_lost` is told, from this thread; the slot cancels what it can and discards the result.
A job whose cancel an operator requested is told to `on_cancel`: the slot cancels an async
handler; a sync one runs on, its job still counted, and ends canceled when it returns.

The keeper also writes the handlers' progress (`current_job().progress()` only keeps the latest
value in the job's Execution): every PROGRESS_INTERVAL, the running jobs whose value changed
since it was last sent, in one statement on the same connection, each under its job's fence.
So a job's progress is written within about a second of the call and at most once a second,
however often the handler calls. The recorder writes the last value before the outcome.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from .. import _ops
from ..errors import first_line

log = logging.getLogger("workhorse.worker")

# The GIL switch interval, as a share of the heartbeat interval (1 s lease: 0.33 s -> 0.67 ms;
# from a 7.5 s lease on, Python's default of 5 ms is kept).
SWITCH_SHARE = 1 / 500
MIN_SWITCH_INTERVAL = 0.0005
# Seconds between two progress writes (of all the slot's running jobs, one statement).
PROGRESS_INTERVAL = 1.0


class Lease(Protocol):
    """What the keeper reads from a running job."""

    job_id: int
    fence: int
    lease: float


class LeaseKeeper:
    def __init__(
        self,
        url: str,
        running: dict[int, Any],
        on_lost: Callable[[list[tuple[int, int]]], None],
        interval: float,
        *,
        name: str = "workhorse-leases",
        on_cancel: Callable[[list[tuple[int, int]]], None] | None = None,
        renew: bool = True,
    ) -> None:
        # renew=False: progress only (a drain, whose leases last the whole drain).
        self.renew = renew
        self.url = url
        self.running = running
        self.on_lost = on_lost
        self.on_cancel = on_cancel
        self.interval = interval
        self._stop = threading.Event()
        self._asked = threading.Event()  # a handler asked for a renewal now
        self._beats = 0
        self._beaten = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._conn: psycopg.Connection[Any] | None = None
        self.renewed = 0
        self.progress_written = 0  # progress values written (for tests and stats)
        self.worst_gap = 0.0  # the longest time between two beats: how close leases came
        self._last = time.monotonic()

    def start(self) -> None:
        # A thread waiting for the GIL while handlers compute gets it only after a switch
        # interval (5 ms by default), and a beat asks for it a few dozen times: with several
        # CPU-bound sync handlers a beat could take longer than a short lease has to spare, and
        # leases ran out under running jobs. Short leases get a switch interval small enough for
        # the keeper to keep up.
        wanted = max(self.interval * SWITCH_SHARE, MIN_SWITCH_INTERVAL)
        if wanted < sys.getswitchinterval():
            sys.setswitchinterval(wanted)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._asked.set()
        self._thread.join(timeout)

    def ask(self) -> int:
        """Renew every lease now rather than at the next interval (JobContext.heartbeat()).
        Returns a number for `wait_for_beat`."""
        with self._beaten:
            target = self._beats + 1
        self._asked.set()
        return target

    def wait_for_beat(self, target: int, timeout: float = 10.0) -> bool:
        """Block (not on the event loop) until the renewal `ask()` asked for is done."""
        with self._beaten:
            return self._beaten.wait_for(lambda: self._beats >= target, timeout)

    def _run(self) -> None:
        # Fixed rate, not fixed delay: a beat that took long (a busy machine, a GIL held by
        # CPU-bound handlers, a reconnect) must not push every later one back by as much.
        due = time.monotonic() + self.interval
        progress_due = time.monotonic() + PROGRESS_INTERVAL
        try:
            while True:
                # Woken early by ask() (a handler's heartbeat()), else at the next due beat or
                # progress write.
                asked = self._asked.wait(
                    max(min(due, progress_due) - time.monotonic(), 0.0))
                self._asked.clear()
                if self._stop.is_set():
                    break
                started = time.monotonic()
                if asked or started >= due:
                    late = started - due
                    if late > self.interval:
                        log.warning("heartbeat %.2fs late (every %.2fs): the process is "
                                    "starved; leases may run out under running jobs", late,
                                    self.interval)
                    self.beat()
                    with self._beaten:
                        self._beats += 1
                        self._beaten.notify_all()
                    self.worst_gap = max(self.worst_gap, started - self._last)
                    self._last = started
                    if started >= due:
                        due = max(due + self.interval, time.monotonic())
                if time.monotonic() >= progress_due:
                    self.write_progress()
                    # Fixed delay: two writes of one job are never less than the interval apart.
                    progress_due = time.monotonic() + PROGRESS_INTERVAL
        finally:
            if self._conn is not None:
                self._conn.close()

    def write_progress(self) -> None:
        """Write the progress of every running job whose value changed since it was sent."""
        entries = []
        sent = []
        for running in list(self.running.copy().values()):
            unwritten = getattr(running, "unwritten_progress", None)
            value = unwritten() if unwritten is not None else None
            if value is not None:
                seq, done, total, message = value
                entries.append((running.job_id, running.fence, seq, done, total, message))
                sent.append((running, seq))
        if not entries:
            return
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=10,
                    application_name="workhorse-leases",
                )
            _ops.execute(self._conn, _ops.write_progress(entries))
        except psycopg.Error as exc:
            log.warning("writing progress failed (%s); retrying in %.1fs", first_line(exc),
                        PROGRESS_INTERVAL)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            return
        # Sent is done with, written or refused (a stale fence stays stale): not sent again
        # until the handler reports a newer value.
        for running, seq in sent:
            running.progress_written = max(running.progress_written, seq)
        self.progress_written += len(entries)

    def beat(self) -> None:
        """Renew every running job's lease now; report the ones that are lost."""
        # dict.copy() is atomic under the GIL: no torn read of the loop's bookkeeping.
        snapshot = list(self.running.copy().values())
        if not snapshot or not self.renew:
            return
        leases = [(r.job_id, r.fence, r.lease) for r in snapshot]
        sent = time.monotonic()  # a lease renewed now lasts from here, at the latest
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=10,
                    application_name="workhorse-leases",
                )
            held = _ops.execute(self._conn, _ops.renew_leases(leases))
        except psycopg.Error as exc:
            log.warning("heartbeat failed (%s); retrying in %.1fs", first_line(exc),
                        self.interval)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            return
        self.renewed += len(held)
        for running in snapshot:
            if running.job_id in held and hasattr(running, "renewed"):
                running.renewed = sent
        lost = [(job_id, fence) for job_id, fence, _ in leases if job_id not in held]
        if lost:
            self.on_lost(lost)
        canceled = [(job_id, fence) for job_id, fence, _ in leases if held.get(job_id)]
        if canceled and self.on_cancel is not None:
            self.on_cancel(canceled)
