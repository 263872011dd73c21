"""Durable steps under `workhorse.testing.eager`: kept in memory, with no database (every app
here points at a server that does not exist, so that any database access fails loudly)."""

from __future__ import annotations

from typing import Any

import pytest

from workhorse import (
    App,
    InvalidOptionsError,
    JobStatus,
    SignalTimeoutError,
    TaskFailedError,
    current_job,
)
from workhorse.testing import eager

NOWHERE = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"


@pytest.fixture
def app() -> App:
    return App("eager-durable", database_url=NOWHERE)


def test_a_step_runs_once_across_the_runs_a_sleep_and_children_cause(app: App) -> None:
    calls: list[str] = []

    @app.task
    def child(n: int) -> int:
        calls.append(f"child{n}")
        return n * 10

    @app.task
    def order(n: int) -> dict[str, Any]:
        step = current_job().step
        charged = step.run("charge", lambda: calls.append("charge") or n + 1)
        step.sleep("cool-off", "2h")  # time jumps to it: the job runs again at once
        try:
            step.wait_for("approve", signal="approval", timeout="1h")
        except SignalTimeoutError:
            approval = "timed out"
        labels = step.children("labels", [child.s(1), child.s(2)])
        return {"charged": charged, "approval": approval, "labels": labels}

    with eager(app):
        handle = order.delay(1)
        assert handle.get() == {"charged": 2, "approval": "timed out", "labels": [10, 20]}
        assert calls == ["charge", "child1", "child2"]  # each once, though the job ran 4 times
        assert [(s.name, s.kind, s.pending) for s in handle.steps()] == [
            ("charge", "run", False), ("cool-off", "sleep", False),
            ("approve", "wait", False), ("labels", "children", False)]


def test_an_async_handler_awaits_its_steps(app: App) -> None:
    @app.task
    def child(n: int) -> int:
        return n + 100

    @app.task
    async def order(n: int) -> list[int]:
        step = current_job().step
        first = await step.run("first", lambda: n)
        await step.sleep("nap", 1)
        return [first, await step.child("kid", child.s(n))]

    with eager(app):
        assert order.delay(5).get() == [5, 105]


def test_a_wait_with_no_timeout_fails_under_eager_and_says_why(app: App) -> None:
    @app.task
    def waiter() -> Any:
        return current_job().step.wait_for("approve", signal="approval")

    with eager(app):
        handle = waiter.delay()
        with pytest.raises(TaskFailedError, match="no signal can come"):
            handle.get()
        assert handle.job().status == JobStatus.FAILED


def test_a_name_used_twice_in_one_run_fails_the_job_at_once(app: App) -> None:
    """A step's usage error is an InvalidOptionsError that no retry could change: the job fails
    on its first attempt, though it has three and retries every Exception."""
    @app.task(max_attempts=3)
    def twice() -> None:
        current_job().step.run("same", lambda: 1)
        current_job().step.run("same", lambda: 2)

    @app.task(max_attempts=3)
    def raises_its_own() -> None:
        current_job().step.run("own", lambda: (_ for _ in ()).throw(InvalidOptionsError("x")))

    with eager(app):
        handle = twice.delay()
        with pytest.raises(TaskFailedError, match="InvalidOptionsError"):
            handle.get()
        assert handle.job().attempts == 1
        # An InvalidOptionsError the step's own function raises is the job's to retry.
        own = raises_its_own.delay()
        with pytest.raises(TaskFailedError, match="InvalidOptionsError"):
            own.get()
        assert own.job().attempts == 3


def test_bad_step_input_is_a_typed_error(app: App) -> None:
    seen: list[type[BaseException]] = []

    @app.task(max_attempts=1)
    def bad() -> None:
        step = current_job().step
        for call in (lambda: step.run("", lambda: 1), lambda: step.run("x" * 201, lambda: 1),
                     lambda: step.sleep("naive", __import__("datetime").datetime(2030, 1, 1)),
                     lambda: step.wait_for("w", signal=""),
                     lambda: step.children("k", []), lambda: step.children("k2", ["not a sig"]),
                     lambda: step.run("r", lambda: 1, retry="thrice")):
            try:
                call()
            except InvalidOptionsError as exc:
                seen.append(type(exc))

    with eager(app):
        bad.delay().get()
    assert seen == [InvalidOptionsError] * 7
