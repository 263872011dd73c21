"""HandlerThreads (workhorse/worker/_threads.py): the threads sync handlers run in."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from workhorse.worker._threads import HandlerThreads

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_a_handler_runs_in_a_thread_with_the_callers_context_and_its_value_comes_back() -> None:
    async def main() -> tuple[str, int, str]:
        threads = HandlerThreads(2)
        WHO.set("job 7")
        loop_thread = threading.get_ident()
        ran_in: list[int] = []

        def handler() -> str:
            ran_in.append(threading.get_ident())
            return WHO.get()

        seen = await threads.run(handler)
        threads.close()
        return seen, ran_in[0], str(loop_thread)

    seen, ran_in, loop_thread = asyncio.run(main())
    assert seen == "job 7" and str(ran_in) != loop_thread


def test_a_handlers_exception_is_raised_in_the_awaiting_task() -> None:
    def boom() -> None:
        raise ValueError("it broke")

    async def main() -> None:
        await HandlerThreads(1).run(boom)

    with pytest.raises(ValueError, match="it broke"):
        asyncio.run(main())


def test_no_more_threads_run_at_once_than_the_bound_and_they_are_reused() -> None:
    lock = threading.Lock()
    running, peak, idents = [0], [0], set()

    def slow() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            idents.add(threading.get_ident())
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    async def main() -> None:
        threads = HandlerThreads(3)
        await asyncio.gather(*(threads.run(slow) for _ in range(12)))
        await asyncio.gather(*(threads.run(slow) for _ in range(6)))
        threads.close()

    asyncio.run(main())
    assert peak == [3] and len(idents) == 3


def test_a_cancel_waits_for_the_thread_then_ends_the_task_cancelled() -> None:
    """A thread cannot be interrupted: the task ends only once the handler has returned (its
    capacity is freed only when it has really stopped)."""
    returned: list[float] = []

    def slow() -> str:
        time.sleep(0.2)
        returned.append(time.monotonic())
        return "done"

    async def main() -> float:
        task = asyncio.ensure_future(HandlerThreads(1).run(slow))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic()

    ended = asyncio.run(main())
    assert returned and ended >= returned[0]
