"""`workhorse.testing.eager`: tasks run in-process at once, with no database. Every app here is
pointed at a server that does not exist, so that any database access fails loudly."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from workhorse import (
    App,
    InvalidOptionsError,
    JobStatus,
    JobTimeoutError,
    PayloadError,
    Retry,
    Snooze,
    TaskCanceledError,
    TaskFailedError,
    current_job,
)
from workhorse.testing import (
    EAGER_SNOOZE_LIMIT,
    assert_enqueued,
    drain,
    eager,
    refute_enqueued,
)

NOWHERE = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"


@pytest.fixture
def app() -> App:
    return App("eager", database_url=NOWHERE)


def test_delay_runs_the_task_and_get_returns_its_result(app: App) -> None:
    calls: list[Any] = []

    @app.task(name="add")
    def add(a: int, b: int, *, scale: int = 1) -> int:
        calls.append((a, b, scale))
        return (a + b) * scale

    with eager(app):
        handle = add.delay(2, 3)
        assert calls == [(2, 3, 1)]  # it ran at once, before get()
        assert handle.get() == 5 and handle.get(timeout=0) == 5
        assert add.apply_async((2, 3), {"scale": 10}, countdown=30).get() == 50
        assert [h.get() for h in add.map([(1, 1), (2, 2)])] == [2, 4]
        assert app.send_task("add", [4, 4]).get() == 8
        job = handle.job()
        assert job is not None and job.status is JobStatus.SUCCEEDED and job.result == 5
        assert (job.attempts, job.max_attempts, job.queue) == (1, 3, "add")
        assert handle.status() is JobStatus.SUCCEEDED and handle.wait().result == 5
    assert handle.get() == 5  # the handle stays readable after the block


def test_outside_the_block_nothing_is_diverted(app: App) -> None:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    with eager(app):
        pass
    with pytest.raises(Exception) as raised:  # a real enqueue: the server does not exist
        add.delay(1, 2)
    assert "127.0.0.1" in str(raised.value) or "connect" in str(raised.value).lower()


def test_the_payload_goes_through_json_as_in_a_worker(app: App) -> None:
    seen: list[Any] = []

    @app.task(name="echo")
    def echo(value: Any) -> Any:
        seen.append(value)
        return value

    with eager(app):
        assert echo.delay((1, 2)).get() == [1, 2]  # a tuple arrives as a list
        assert seen == [[1, 2]]
        with pytest.raises(PayloadError):
            echo.delay({1, 2})  # not JSON: refused at enqueue, as the database would
        with pytest.raises(InvalidOptionsError, match="missing a required argument"):
            echo.delay()


def test_current_job_inside(app: App) -> None:
    @app.task(name="who", queue="people", concurrency_key=lambda name: name, max_attempts=4)
    def who(name: str) -> dict[str, Any]:
        job = current_job()
        return {"id": job.id, "task": job.task, "queue": job.queue,
                "key": job.concurrency_key, "attempt": job.attempt, "max": job.max_attempts,
                "cancel": job.cancel_requested, "scheduled": job.scheduled_for is not None}

    with eager(app):
        first = who.delay("ann").get()
        second = who.delay("bob").get()
    assert first == {"id": first["id"], "task": "who", "queue": "people", "key": "ann",
                     "attempt": 1, "max": 4, "cancel": False, "scheduled": True}
    assert second["id"] == first["id"] + 1


def test_a_failure_retries_at_once_then_get_raises_task_failed(app: App) -> None:
    attempts: list[int] = []

    @app.task(name="boom", max_attempts=3)
    def boom() -> None:
        attempts.append(current_job().attempt)
        raise ValueError("it broke")

    with eager(app):
        handle = boom.delay()
        assert attempts == [1, 2, 3]
        with pytest.raises(TaskFailedError, match=r"ended failed after attempt 3/3: "
                                                  r"ValueError: it broke") as raised:
            handle.get()
    job = raised.value.job
    assert job.status is JobStatus.FAILED and job.error["type"] == "ValueError"
    assert "in boom" in job.error["traceback"]


def test_retry_on_limits_what_retries(app: App) -> None:
    attempts: list[str] = []

    @app.task(name="fetch", retry_on=(ConnectionError,), max_attempts=3)
    def fetch(kind: str) -> str:
        attempts.append(kind)
        if kind == "conn" and len(attempts) < 3:
            raise ConnectionResetError("reset")
        if kind == "bad":
            raise ValueError("not retried")
        return "ok"

    with eager(app):
        assert fetch.delay("conn").get() == "ok"
        assert attempts == ["conn"] * 3
        attempts.clear()
        with pytest.raises(TaskFailedError, match="ValueError: not retried"):
            fetch.delay("bad").get()
        assert attempts == ["bad"]  # failed at once, attempts remaining


def test_raise_retry_reruns_and_uses_attempts(app: App) -> None:
    seen: list[int] = []

    @app.task(name="later", retry_on=(), max_attempts=3)
    def later() -> int:
        attempt = current_job().attempt
        seen.append(attempt)
        if attempt < 3:
            raise Retry(delay="10s")  # retries whatever retry_on says; the delay is not waited
        return attempt

    @app.task(name="always", max_attempts=2)
    def always() -> None:
        raise Retry("1s")

    started = time.monotonic()
    with eager(app):
        assert later.delay().get() == 3
        with pytest.raises(TaskFailedError, match="Retry: retry in 1s"):
            always.delay().get()
    assert seen == [1, 2, 3] and time.monotonic() - started < 5


def test_snooze_reruns_without_using_an_attempt(app: App) -> None:
    runs: list[int] = []

    @app.task(name="polite", max_attempts=1)
    def polite() -> int:
        runs.append(current_job().attempt)
        if len(runs) < 4:
            raise Snooze("30s")
        return len(runs)

    @app.task(name="forever")
    def forever() -> None:
        raise Snooze(1)

    with eager(app):
        handle = polite.delay()
        assert handle.get() == 4 and runs == [1, 1, 1, 1]
        job = handle.job()
        assert job is not None and job.attempts == 1
        with pytest.raises(TaskFailedError, match=f"snoozed {EAGER_SNOOZE_LIMIT} times"):
            forever.delay().get()


def test_on_failure_hold(app: App) -> None:
    @app.task(name="careful", on_failure="hold", max_attempts=1)
    def careful() -> None:
        raise RuntimeError("needs a human")

    with eager(app):
        handle = careful.delay()
        with pytest.raises(TaskFailedError, match="ended held"):
            handle.get()
        assert handle.status() is JobStatus.HELD


def test_a_non_json_result_fails_the_attempt(app: App) -> None:
    @app.task(name="weird", max_attempts=2)
    def weird() -> Any:
        return object()

    with eager(app), pytest.raises(TaskFailedError, match="PayloadError: result is not JSON"):
        weird.delay().get()


def test_async_tasks_from_sync_and_async_code(app: App) -> None:
    @app.task(name="double")
    async def double(n: int) -> list[int]:
        await asyncio.sleep(0)
        return [n * 2, current_job().attempt]

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    async def main() -> list[Any]:
        return [
            await (await double.delay_async(2)).get_async(),
            await (await double.enqueue_async((3,), countdown=5)).get_async(),
            await (await add.delay_async(1, 2)).get_async(),
            double.delay(4).get(),  # sync delay inside a running loop: runs on a loop of its own
        ]

    with eager(app):
        assert double.delay(1).get() == [2, 1]
        assert asyncio.run(main()) == [[4, 1], [6, 1], 3, [8, 1]]


def test_tasks_that_enqueue_tasks_run_them_inside(app: App) -> None:
    order: list[str] = []

    @app.task(name="child")
    def child(n: int) -> int:
        order.append(f"child {current_job().id}")
        return n + 1

    @app.task(name="parent")
    def parent() -> int:
        me = current_job().id
        order.append(f"parent {me}")
        value = int(child.delay(1).get())
        assert current_job().id == me  # the parent's context is back
        return value

    with eager(app):
        assert parent.delay().get() == 2
    assert order == ["parent 1", "child 2"]


def test_timeout_cancels_an_async_handler(app: App) -> None:
    @app.task(name="slow", timeout="50ms", max_attempts=1)
    async def slow() -> None:
        await asyncio.sleep(5)

    started = time.monotonic()
    with eager(app), pytest.raises(TaskFailedError, match="JobTimeoutError: slow ran past"):
        slow.delay().get()
    assert time.monotonic() - started < 2


def test_timeout_of_a_sync_handler_discards_its_result(app: App) -> None:
    finished: list[bool] = []

    @app.task(name="slow", timeout="50ms", max_attempts=1)
    def slow() -> int:
        time.sleep(0.15)
        finished.append(True)
        return 1

    with eager(app), pytest.raises(TaskFailedError, match="JobTimeoutError") as raised:
        slow.delay().get()
    assert finished == [True]  # it ran to its end: a thread cannot be interrupted
    assert raised.value.job.result is None
    assert JobTimeoutError.__name__ == raised.value.job.error["type"]


def test_idempotency_key_returns_the_existing_job(app: App) -> None:
    runs: list[int] = []

    @app.task(name="once")
    def once(n: int) -> int:
        runs.append(n)
        return n

    with eager(app):
        first = once.apply_async((1,), idempotency_key="k")
        second = once.apply_async((2,), idempotency_key="k")
        assert first.id == second.id and second.get() == 1 and runs == [1]


def test_retry_runs_a_failed_job_again_and_cancel_changes_nothing(app: App) -> None:
    fail = [True]

    @app.task(name="flaky", max_attempts=1)
    def flaky() -> str:
        if fail[0]:
            raise RuntimeError("down")
        return "up"

    with eager(app):
        handle = flaky.delay()
        with pytest.raises(TaskFailedError):
            handle.get()
        fail[0] = False
        assert handle.retry() is JobStatus.SUCCEEDED and handle.get() == "up"
        assert handle.cancel() is JobStatus.SUCCEEDED


def test_canceled_is_reported_like_the_real_handle(app: App) -> None:
    from workhorse.testing import EagerRunner

    @app.task(name="t")
    def t() -> None: ...

    with eager(app):
        handle = t.delay()
    runner = handle.enqueuer
    assert isinstance(runner, EagerRunner)
    from dataclasses import replace

    runner.jobs[handle.id] = replace(runner.jobs[handle.id], status=JobStatus.CANCELED)
    with pytest.raises(TaskCanceledError, match="was canceled"):
        handle.get()


def test_eager_is_per_app_and_per_context(app: App) -> None:
    other = App("other", database_url=NOWHERE)

    @app.task(name="mine")
    def mine() -> str:
        return "mine"

    @other.task(name="theirs")
    def theirs() -> str:
        return "theirs"

    errors: list[BaseException] = []

    def elsewhere() -> None:  # a bare thread starts with an empty context: not eager
        try:
            mine.delay()
        except BaseException as exc:
            errors.append(exc)

    with eager(app):
        assert mine.delay().get() == "mine"
        with pytest.raises(Exception):  # noqa: B017 - the other app is not eager: a real enqueue
            theirs.delay()
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        with eager(other):
            assert theirs.delay().get() == "theirs" and mine.delay().get() == "mine"
    assert len(errors) == 1 and not isinstance(errors[0], AssertionError)


# ---- bad input of assert_enqueued, refute_enqueued and drain ----------------------------------


@pytest.mark.parametrize(
    "call",
    [lambda app, t: assert_enqueued(app, t, count=-1),
     lambda app, t: assert_enqueued(app, t, count=True),
     lambda app, t: assert_enqueued(app, t, args="ab"),
     lambda app, t: refute_enqueued(app, t, kwargs=[1]),
     lambda app, t: assert_enqueued(app, 42),
     lambda app, t: drain(app, queues="t"),
     lambda app, t: drain(app, timeout=0),
     lambda app, t: drain(app, with_scheduled="yes")],
)
def test_bad_input_of_the_testing_helpers_is_a_typed_error(
    app: App, call: Callable[..., Any]
) -> None:
    # Refused before any database is reached: this app points at none.

    @app.task(name="t")
    def t() -> None: ...

    with pytest.raises(InvalidOptionsError):
        call(app, t)
