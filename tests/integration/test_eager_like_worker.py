"""eager() and the worker decide alike: one handler script, run once under `eager()` and once
through `drain(with_scheduled=True)` (the real claim, the worker's executor and recorder, retries
and snoozes falling due at once), gives the same attempts, in the same order, and the same end:
status, attempts, result and error type. What differs by design (eager does not wait out delays)
is left out by `with_scheduled=True`.

Each case is a script: what the handler does on its n-th run (1-based, snoozes included)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from workhorse import App, Retry, Snooze, current_job
from workhorse.testing import drain, eager

Step = Callable[[], Any]  # one run of the handler: returns its result or raises


def _raise(exc: BaseException) -> Step:
    def step() -> Any:
        raise exc

    return step


def _value(value: Any) -> Step:
    return lambda: value


def _sleep_then(seconds: float, then: Step) -> Step:
    def step() -> Any:
        time.sleep(seconds)
        return then()

    return step


@dataclass(frozen=True)
class Case:
    steps: list[Step]  # the n-th run does steps[n-1] (the last one for ever after)
    options: dict[str, Any] = field(default_factory=dict)
    is_async: bool = False


CASES: dict[str, Case] = {
    "retry_on retries what it names": Case(
        [_raise(ConnectionResetError("reset")), _raise(ConnectionResetError("reset")),
         _value("ok")],
        {"retry_on": (ConnectionError,), "max_attempts": 3}),
    "retry_on fails at once outside it": Case(
        [_raise(ValueError("not a connection error"))],
        {"retry_on": (ConnectionError,), "max_attempts": 3}),
    "Retry retries whatever retry_on says": Case(
        [_raise(Retry(delay="1h")), _value(2)], {"retry_on": (), "max_attempts": 3}),
    "Retry with no attempts left fails": Case(
        [_raise(Retry(delay="1h"))], {"retry_on": (), "max_attempts": 2}),
    "Snooze uses no attempt": Case(
        [_raise(Snooze("1h")), _raise(Snooze("1h")), _value("late")], {"max_attempts": 1}),
    "Snooze, then a failure, then a success": Case(
        [_raise(Snooze("1h")), _raise(ValueError("once")), _value("third run")],
        {"max_attempts": 2}),
    "on_failure hold": Case(
        [_raise(RuntimeError("needs a human"))], {"on_failure": "hold", "max_attempts": 2}),
    "a result that is not JSON fails the attempt": Case(
        [_value(object()), _value(1)], {"max_attempts": 2}),
    "SystemExit fails and is no Exception to retry": Case(
        [_raise(SystemExit(3))], {"max_attempts": 3}),
    "a sync handler past its timeout": Case(
        [_sleep_then(0.3, _value(1))], {"timeout": "100ms", "max_attempts": 2}),
    "a sync handler that raises past its timeout fails with the timeout": Case(
        [_sleep_then(0.3, _raise(ValueError("late")))],
        {"timeout": "100ms", "retry_on": (ValueError,), "max_attempts": 2}),
    "an async handler past its timeout": Case(
        [], {"timeout": "100ms", "max_attempts": 2}, is_async=True),
}


def _declare(app: App, case: Case, runs: list[int]) -> Any:
    """The case's task on `app`; each run appends its attempt to `runs`."""

    def step() -> Any:
        runs.append(current_job().attempt)
        return case.steps[min(len(runs), len(case.steps)) - 1]()

    if case.is_async:
        async def slow() -> None:
            runs.append(current_job().attempt)
            await asyncio.sleep(5)

        return app.task(name="alike.case", **case.options)(slow)

    def handler() -> Any:
        return step()

    return app.task(name="alike.case", **case.options)(handler)


def _ending(job: Any) -> tuple[Any, ...]:
    return (job.status, job.attempts, job.result, (job.error or {}).get("type"))


def run_eager(case: Case, database_url: str) -> tuple[list[int], tuple[Any, ...]]:
    app = App("alike-eager", database_url=database_url)
    runs: list[int] = []
    task = _declare(app, case, runs)
    with eager(app):
        job = task.delay().job()
    return runs, _ending(job)


def run_worker(case: Case, database_url: str) -> tuple[list[int], tuple[Any, ...]]:
    app = App("alike-worker", database_url=database_url)
    try:
        runs: list[int] = []
        task = _declare(app, case, runs)
        handle = task.delay()
        drain(app, with_scheduled=True, timeout=30)
        return runs, _ending(handle.job())
    finally:
        app.close()


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    yield CASES[request.param]


def test_eager_decides_as_the_worker_does(case: Case, database_url: str) -> None:
    worker = run_worker(case, database_url)
    assert worker[0], "the handler never ran under the worker"
    assert run_eager(case, database_url) == worker
