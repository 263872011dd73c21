"""`eager()` runs a sync task in the caller's thread with no event loop (so that Django's ORM,
which refuses to run under one, works in a TestCase), and an async task on a new loop in the
caller's thread when none runs there, else in a helper thread (issue 31). The attempt is still
the worker's executor's: retries, timeouts and Snooze as before (tests/unit/test_eager.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from workhorse import App, Retry
from workhorse.testing import eager, on_a_loop, without_loop

NOWHERE = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"


def _running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_a_sync_task_runs_here_with_no_event_loop() -> None:
    app = App("noloop", database_url=NOWHERE)
    seen: list[tuple[str, bool]] = []

    @app.task(name="sync", max_attempts=3)
    def sync_task(fail_first: bool) -> int:
        seen.append((threading.current_thread().name, _running_loop()))
        if fail_first and len(seen) == 1:
            raise Retry()
        return len(seen)

    with eager(app):
        assert sync_task.delay(True).get() == 2  # retried by the executor's rules, here too
    assert seen == [(threading.current_thread().name, False)] * 2


def test_an_async_task_runs_on_a_new_loop_here_or_in_a_helper_thread() -> None:
    app = App("noloop", database_url=NOWHERE)
    seen: list[str] = []

    @app.task(name="aio")
    async def aio() -> bool:
        seen.append(threading.current_thread().name)
        return _running_loop()

    with eager(app):
        assert aio.delay().get() is True
        assert seen[-1] == threading.current_thread().name

        async def from_async_code() -> bool:
            return aio.delay().get()  # a sync delay() while this thread runs a loop

        assert asyncio.run(from_async_code()) is True
    assert seen[-1] != threading.current_thread().name


def test_a_sync_task_called_from_async_code_still_runs_in_the_caller_thread() -> None:
    app = App("noloop", database_url=NOWHERE)
    seen: list[str] = []

    @app.task(name="sync2")
    def sync_task() -> int:
        seen.append(threading.current_thread().name)
        return 7

    async def caller() -> int:
        with eager(app):
            return sync_task.delay().get()

    assert asyncio.run(caller()) == 7
    assert seen == [threading.current_thread().name]


def test_without_loop_refuses_a_coroutine_that_suspends() -> None:
    async def sleeps() -> None:
        await asyncio.sleep(0.01)

    with pytest.raises(RuntimeError, match="event loop"):
        without_loop(sleeps())

    async def five() -> int:
        return 5

    assert on_a_loop(five, "t") == 5
