"""Running the worker's async steps from sync code: with no event loop at all (eager, a
sync drain), or on a loop of their own when the caller's thread already runs one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..context import in_context

T = TypeVar("T")


def without_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` to its end in this thread with no event loop: for the worker's async
    code (the executor, the recorder) when nothing it awaits can suspend (a sync handler run in
    this thread, statements on a sync connection). RuntimeError if something does suspend.

    >>> async def five(): return 5
    >>> without_loop(five())
    5
    """
    try:
        coroutine.send(None)
    except StopIteration as stop:
        value: T = stop.value
        return value
    coroutine.close()
    raise RuntimeError("workhorse: a step that needs an event loop ran where there is none")


def on_a_loop(make: Callable[[], Coroutine[Any, Any, T]], name: str) -> T:
    """`asyncio.run(make())` in this thread, or in a thread of its own when this one already
    runs a loop.

    >>> async def five(): return 5
    >>> on_a_loop(five, "doc")
    5
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    return _in_thread(lambda: asyncio.run(make()), name)


def _in_thread(fn: Callable[[], T], name: str) -> T:
    """`fn()` in a thread of its own (with this context), for code that must not run on this
    thread's loop; its value, or its exception."""
    box: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=in_context(target), name=name)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]
