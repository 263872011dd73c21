"""The running job's context (workhorse/context.py), Retry / Snooze, and the task options the
executor reads (retry_on, timeout), with the Celery spellings and enqueue-time checks of Task."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from workhorse import (
    App,
    InvalidOptionsError,
    JobContext,
    JobTimeoutError,
    NoCurrentJobError,
    Retry,
    Snooze,
    StaleLeaseError,
    WorkhorseError,
    current_job,
)
from workhorse.context import in_context, running
from workhorse.types import ClaimedJob

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _ctx(**changes: Any) -> JobContext:
    fields: dict[str, Any] = dict(id=7, task="mail.send", queue="mail", concurrency_key="t1",
                                  attempt=1, max_attempts=3, scheduled_for=NOW)
    fields.update(changes)
    return JobContext(**fields)


# ---- current_job ------------------------------------------------------------------------------


def test_current_job_outside_a_handler_is_a_typed_error() -> None:
    with pytest.raises(NoCurrentJobError, match=r"outside a running job") as raised:
        current_job()
    assert isinstance(raised.value, WorkhorseError) and isinstance(raised.value, LookupError)


def test_running_sets_and_resets_the_context() -> None:
    outer, inner = _ctx(id=1), _ctx(id=2)
    with running(outer):
        assert current_job() is outer
        with running(inner):
            assert current_job() is inner
        assert current_job() is outer
    with pytest.raises(NoCurrentJobError):
        current_job()


def test_running_resets_even_when_the_handler_raises() -> None:
    with pytest.raises(ValueError), running(_ctx()):
        raise ValueError("handler failed")
    with pytest.raises(NoCurrentJobError):
        current_job()


def test_a_bare_thread_does_not_see_it_but_in_context_does() -> None:
    seen: list[Any] = []

    def look() -> None:
        try:
            seen.append(current_job().id)
        except NoCurrentJobError:
            seen.append(None)

    with running(_ctx(id=5)):
        bare = threading.Thread(target=look)
        bare.start()
        bare.join()
        bound = threading.Thread(target=in_context(look))
        bound.start()
        bound.join()

        async def in_executor() -> None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, in_context(look))

        asyncio.run(in_executor())
    assert seen == [None, 5, 5]


def test_anyio_worker_threads_and_asyncio_tasks_see_it() -> None:
    # The executor runs sync handlers with anyio.to_thread.run_sync: it copies the context.
    seen: list[int] = []

    async def main() -> None:
        with running(_ctx(id=9)):
            seen.append(await anyio.to_thread.run_sync(lambda: current_job().id))
            seen.append(await asyncio.create_task(_async_id()))

    anyio.run(main)
    assert seen == [9, 9]


async def _async_id() -> int:
    return current_job().id


def test_concurrent_jobs_each_see_their_own() -> None:
    async def job(n: int) -> tuple[int, int]:
        with running(_ctx(id=n)):
            await asyncio.sleep(0.01 * (3 - n))
            return n, current_job().id

    async def main() -> list[tuple[int, int]]:
        return list(await asyncio.gather(*(job(n) for n in range(3))))

    assert asyncio.run(main()) == [(0, 0), (1, 1), (2, 2)]


# ---- JobContext -------------------------------------------------------------------------------


def test_job_context_fields_and_live_cancel_flag() -> None:
    flag = [False]
    renewals: list[int] = []
    ctx = _ctx(cancel_check=lambda: flag[0], renew=lambda: renewals.append(1))
    assert (ctx.id, ctx.task, ctx.queue, ctx.concurrency_key) == (7, "mail.send", "mail", "t1")
    assert (ctx.attempt, ctx.max_attempts, ctx.scheduled_for) == (1, 3, NOW)
    assert ctx.cancel_requested is False and not ctx.last_attempt
    flag[0] = True
    assert ctx.cancel_requested is True  # read live, not copied at construction
    ctx.heartbeat()
    ctx.heartbeat()
    assert renewals == [1, 1]
    assert _ctx(attempt=3).last_attempt
    assert "cancel_check" not in repr(ctx) and "renew" not in repr(ctx)


def test_heartbeat_reports_a_lost_lease() -> None:
    def lost() -> None:
        raise StaleLeaseError("job 7: its lease was lost")

    with pytest.raises(StaleLeaseError):
        _ctx(renew=lost).heartbeat()
    _ctx().heartbeat()  # no runner renewal given: nothing to do


def test_context_for_a_claimed_job() -> None:
    job = ClaimedJob(id=3, task="t", queue="q", concurrency_key=None, priority=0, payload={},
                     attempts=2, max_attempts=5, fence=11, lease_until=NOW, enqueued_at=NOW,
                     run_at=NOW - timedelta(seconds=5), meta={})
    ctx = JobContext.for_claimed(job, cancel_check=lambda: True)
    assert (ctx.id, ctx.task, ctx.queue, ctx.concurrency_key) == (3, "t", "q", None)
    assert (ctx.attempt, ctx.max_attempts) == (2, 5)
    assert ctx.scheduled_for is None and ctx.cancel_requested  # a retry: its first run_at is gone


# ---- Retry and Snooze --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [(None, None), ("10s", 10.0), ("500ms", 0.5), (0, 0.0), (2.5, 2.5),
     (timedelta(minutes=2), 120.0), ("1d", 86400.0)],
)
def test_retry_delays(delay: Any, seconds: float | None) -> None:
    assert Retry(delay=delay).delay == seconds


@pytest.mark.parametrize(
    ("delay", "seconds"), [("30s", 30.0), (0, 0.0), (1.5, 1.5), (timedelta(hours=1), 3600.0)]
)
def test_snooze_delays(delay: Any, seconds: float) -> None:
    assert Snooze(delay).delay == seconds


@pytest.mark.parametrize(
    "delay", ["soon", -1, "-1s", float("nan"), float("inf"), True, [1], "367d",
              timedelta(seconds=-1)]
)
def test_bad_delays_are_typed_errors(delay: Any) -> None:
    with pytest.raises(InvalidOptionsError, match="Retry"):
        Retry(delay=delay)
    with pytest.raises(InvalidOptionsError, match="Snooze"):
        Snooze(delay)


def test_snooze_needs_a_delay() -> None:
    with pytest.raises(InvalidOptionsError, match=r"Snooze needs a delay"):
        Snooze(None)  # type: ignore[arg-type]


def test_retry_and_snooze_messages_and_types() -> None:
    assert str(Retry()) == "retry" and str(Retry("10s")) == "retry in 10s"
    assert str(Retry("10s", reason="429 from upstream")) == "429 from upstream"
    assert str(Snooze("30s")) == "snoozed for 30s"
    # Signals, not errors: a handler's `except WorkhorseError` must not swallow them.
    assert not isinstance(Retry(), WorkhorseError) and isinstance(Retry(), Exception)
    assert not isinstance(Snooze(1), WorkhorseError) and isinstance(Snooze(1), Exception)


def test_job_timeout_error() -> None:
    error = JobTimeoutError("ran past 1s")
    assert isinstance(error, WorkhorseError) and isinstance(error, TimeoutError)


# ---- retry_on and timeout on the decorator -----------------------------------------------------


def test_retry_on_and_timeout_are_on_the_task() -> None:
    app = App("ctx")

    @app.task(name="fetch", retry_on=(ConnectionError, TimeoutError), timeout="30s")
    def fetch(url: str) -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    @app.task(name="never", retry_on=(), timeout=0.25)
    def never() -> None: ...

    assert fetch.retry_on == (ConnectionError, TimeoutError) and fetch.timeout == 30.0
    assert plain.retry_on == (Exception,) and plain.timeout is None
    assert never.retry_on == () and never.timeout == 0.25
    assert fetch.should_retry(ConnectionResetError()) and fetch.should_retry(JobTimeoutError())
    assert not fetch.should_retry(ValueError())
    assert fetch.should_retry(Retry()) and never.should_retry(Retry())  # Retry always may
    assert plain.should_retry(ValueError()) and not plain.should_retry(KeyboardInterrupt())
    assert not never.should_retry(ValueError())


@pytest.mark.parametrize(
    "retry_on", [ConnectionError, [ConnectionError], (ConnectionError, "ValueError"), (int,),
                 "ConnectionError", (ConnectionError()), None],
)
def test_bad_retry_on_is_a_typed_error(retry_on: Any) -> None:
    app = App("ctx")
    with pytest.raises(InvalidOptionsError, match=r"retry_on must be a tuple of exception"):
        app.task(name="t", retry_on=retry_on)(lambda: None)
    assert app.tasks == {} and app.queues == {}  # refused before anything was declared


@pytest.mark.parametrize("timeout", ["0s", 0, -1, "soon", "367d", True, float("nan")])
def test_bad_timeout_is_a_typed_error(timeout: Any) -> None:
    app = App("ctx")
    with pytest.raises(InvalidOptionsError, match="timeout"):
        app.task(name="t", timeout=timeout)(lambda: None)
    assert app.tasks == {} and app.queues == {}


# ---- Celery spellings and enqueue-time checks (no database: Task.call) -------------------------


def _app() -> tuple[App, Any]:
    app = App("ctx")

    @app.task(name="send", concurrency_key=lambda message, **_: message["tenant"])
    def send(message: dict[str, Any], *, urgent: bool = False) -> None: ...

    return app, send


def test_countdown_and_eta_are_delay_and_run_at() -> None:
    _, send = _app()
    args = ({"tenant": "t1"},)
    assert send.call(args, countdown=30).options.delay_seconds == 30.0
    assert send.call(args, countdown=timedelta(minutes=1)).options.delay_seconds == 60.0
    assert send.call(args, eta=NOW).options.run_at == NOW


@pytest.mark.parametrize(
    ("options", "message"),
    [({"countdown": 1, "delay": 2}, "delay or countdown"),
     ({"eta": NOW, "run_at": NOW}, "run_at or eta"),
     ({"countdown": 1, "eta": NOW}, "not both"),
     ({"delay": 1, "eta": NOW}, "not both"),
     ({"countdown": -1}, "delay"),
     ({"eta": "tomorrow"}, "run_at must be a datetime"),
     ({"eta": datetime(2030, 1, 1)}, "timezone-aware")],
)
def test_conflicting_or_bad_celery_spellings(options: dict[str, Any], message: str) -> None:
    _, send = _app()
    with pytest.raises(InvalidOptionsError, match=message):
        send.call(({"tenant": "t1"},), **options)


@pytest.mark.parametrize("method", ["apply_async", "map", "send_task"])
def test_an_unknown_option_names_the_valid_ones(method: str) -> None:
    app, send = _app()
    with pytest.raises(InvalidOptionsError) as raised:
        if method == "apply_async":
            send.apply_async(({"tenant": "t1"},), retries=10)
        elif method == "map":
            send.map([({"tenant": "t1"},)], retries=10)
        else:
            app.send_task("send", [{"tenant": "t1"}], retries=10)
    message = str(raised.value)
    assert f"{method}() got unknown option(s) 'retries'" in message
    for name in ("queue", "concurrency_key", "priority", "delay", "countdown", "run_at", "eta",
                 "max_attempts", "idempotency_key"):
        assert name in message


def test_an_unknown_option_of_enqueue_async() -> None:
    _, send = _app()
    with pytest.raises(InvalidOptionsError, match=r"enqueue_async\(\) got unknown option"):
        asyncio.run(send.enqueue_async(({"tenant": "t1"},), retry=True))


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [((), {}, "missing a required argument: 'message'"),
     (({"tenant": "t"}, 2), {}, "too many positional arguments"),
     (({"tenant": "t"},), {"colour": 1}, "unexpected keyword argument 'colour'"),
     (({"tenant": "t"},), {"message": {}}, "multiple values for argument 'message'")],
)
def test_arguments_are_bound_to_the_signature(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    _, send = _app()
    with pytest.raises(InvalidOptionsError, match=message) as raised:
        send.call(args, kwargs)
    assert "send(message, *, urgent=False): the arguments do not match" in str(raised.value)


def test_delay_and_async_twins_bind_before_anything_is_sent() -> None:
    # An App pointed at no server: a bad call must fail before any connection is tried.
    app = App("ctx", database_url="postgresql://nobody@127.0.0.1:1/none")

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(InvalidOptionsError, match="missing a required argument: 'b'"):
        add.delay(1)
    with pytest.raises(InvalidOptionsError, match="too many positional"):
        add.map([(1, 2), (1, 2, 3)])
    with pytest.raises(InvalidOptionsError, match="missing a required argument"):
        asyncio.run(add.delay_async(1))
    with pytest.raises(InvalidOptionsError, match="unexpected keyword argument 'c'"):
        asyncio.run(add.enqueue_async((1, 2), {"c": 3}))


def test_varargs_handlers_accept_anything() -> None:
    app = App("ctx")

    @app.task(name="any")
    def anything(*args: Any, **kwargs: Any) -> None: ...

    assert anything.call((1, 2, 3), {"x": 1}).payload == {"args": [1, 2, 3], "kwargs": {"x": 1}}


def test_a_raising_key_callable_is_an_invalid_options_error_with_its_cause() -> None:
    _, send = _app()
    with pytest.raises(InvalidOptionsError, match=r"raised KeyError: 'tenant'") as raised:
        send.call(({},))
    assert isinstance(raised.value.__cause__, KeyError)
    # A key function's own InvalidOptionsError passes through as it is.

    def strict(message: Any, **_: Any) -> str:
        raise InvalidOptionsError("no tenant in this message")

    with pytest.raises(InvalidOptionsError, match=r"^no tenant in this message$"):
        send.call(({},), concurrency_key=strict)


def test_context_var_is_not_shared_with_other_contexts() -> None:
    with running(_ctx(id=4)):
        fresh = contextvars.Context()
        with pytest.raises(NoCurrentJobError):
            fresh.run(current_job)


def test_a_runner_may_give_a_factory_built_only_when_asked() -> None:
    built: list[int] = []

    def make() -> JobContext:
        built.append(1)
        return _ctx(id=12)

    with running(make):
        assert built == []  # a handler that never asks costs no context
        assert current_job().id == 12 and current_job().id == 12
    assert built == [1, 1]


def test_enter_and_leave_are_running_without_a_context_manager() -> None:
    from workhorse.context import enter, leave

    token = enter(_ctx(id=21))
    try:
        assert current_job().id == 21
    finally:
        leave(token)
    with pytest.raises(NoCurrentJobError):
        current_job()
