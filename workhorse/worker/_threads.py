"""The threads that sync handlers run in: one job per thread at a time, started as needed up to a
bound (the slot's concurrency), reused from then on.

A job goes to an idle thread through a SimpleQueue and its outcome comes back to the loop with
`call_soon_threadsafe`. That round trip is what a sync no-op costs the slot, and it is cheaper than
`anyio.to_thread.run_sync`'s, which adds a capacity limiter, a cancel scope and per-call thread
bookkeeping. The semantics are the same: the handler runs in a copy of the caller's context (so
`current_job()` works there), and a cancel of the awaiting task waits for the thread to return,
since a thread cannot be interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any


class _Job:
    """One handler call: what the thread runs, and where its outcome goes. `future` is the one
    the awaiting task waits on now: a cancel of that task cancels it, and the task then waits on
    a new one (the thread settles whichever is current), without `asyncio.shield`'s extra future
    and callbacks at every call."""

    __slots__ = ("context", "exc", "finished", "fn", "future", "loop", "value")

    def __init__(self, loop: asyncio.AbstractEventLoop, context: contextvars.Context,
                 fn: Callable[[], Any]) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.context = context
        self.fn = fn
        self.finished = False
        self.value: Any = None
        self.exc: BaseException | None = None


class HandlerThreads:
    def __init__(self, size: int | None = None, name: str = "workhorse-handler") -> None:
        self.size = size  # None: no bound (the caller bounds what it hands over)
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    async def run(self, fn: Callable[[], Any]) -> Any:
        """`fn()` in one of the threads; its value, or its exception."""
        job = _Job(asyncio.get_running_loop(), contextvars.copy_context(), fn)
        with self._lock:
            start = self._idle == 0 and (self.size is None or self._threads < self.size)
            if start:
                self._threads += 1
            else:
                self._idle -= 1  # this job takes an idle thread (or waits for one)
        if start:
            threading.Thread(target=self._serve, name=f"{self.name}-{self._threads}",
                             daemon=True).start()
        self._jobs.put(job)
        cancelled = False
        while not job.finished:
            try:
                await job.future
            except asyncio.CancelledError:
                if not job.finished:
                    # The handler runs on: wait for it on a new future, then end cancelled.
                    cancelled = True
                    job.future = job.loop.create_future()
            except BaseException:  # the handler's own error: raised below
                pass
        if cancelled:
            raise asyncio.CancelledError
        if job.exc is not None:
            raise job.exc
        return job.value

    def _serve(self) -> None:
        job: _Job | None = None
        while True:
            if job is not None:
                with self._lock:
                    self._idle += 1
            job = self._jobs.get()
            if job is None:
                return
            try:
                value = job.context.run(job.fn)
            except BaseException as exc:  # every outcome goes back to the awaiting task
                _deliver(job, None, exc)
            else:
                _deliver(job, value, None)

    def close(self) -> None:
        """Let the idle threads end (a busy one ends after its job)."""
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._jobs.put(None)


class InCallerThread:
    """`HandlerThreads`' interface, but each handler runs in the calling thread itself, on a copy
    of its context, blocking its loop until it returns. For a runner of one job at a time that
    wants the caller's thread (its thread-locals, a test framework's database connection):
    `eager()`."""

    async def run(self, fn: Callable[[], Any]) -> Any:
        """`fn()` here and now; its value, or its exception."""
        return contextvars.copy_context().run(fn)

    def close(self) -> None:
        """Nothing to let go of."""


def _deliver(job: _Job, value: Any, exc: BaseException | None) -> None:
    # A closed loop (RuntimeError): the slot is exiting, and nobody waits any more.
    with contextlib.suppress(RuntimeError):
        job.loop.call_soon_threadsafe(_settle, job, value, exc)


def _settle(job: _Job, value: Any, exc: BaseException | None) -> None:
    job.finished, job.value, job.exc = True, value, exc
    if not job.future.done():
        job.future.set_result(None)
