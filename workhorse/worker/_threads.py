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

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context,
             Callable[[], Any]]


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
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            start = self._idle == 0 and (self.size is None or self._threads < self.size)
            if start:
                self._threads += 1
            else:
                self._idle -= 1  # this job takes an idle thread (or waits for one)
        if start:
            threading.Thread(target=self._serve, name=f"{self.name}-{self._threads}",
                             daemon=True).start()
        self._jobs.put((loop, future, contextvars.copy_context(), fn))
        cancelled = False
        while not future.done():
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                if not future.done():
                    cancelled = True  # the handler runs on: wait for it, then end cancelled
            except BaseException:  # the handler's own error: raised below
                pass
        if cancelled:
            raise asyncio.CancelledError
        return future.result()

    def _serve(self) -> None:
        job: _Job | None = None
        while True:
            if job is not None:
                with self._lock:
                    self._idle += 1
            job = self._jobs.get()
            if job is None:
                return
            loop, future, context, fn = job
            try:
                value = context.run(fn)
            except BaseException as exc:  # every outcome goes back to the awaiting task
                _deliver(loop, future, None, exc)
            else:
                _deliver(loop, future, value, None)

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


def _deliver(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], value: Any,
             exc: BaseException | None) -> None:
    # A closed loop (RuntimeError): the slot is exiting, and nobody waits any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle, future, value, exc)


def _settle(future: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)
