"""`workhorse.testing` against a real database: drain() through the real claim path and the
worker's executor and recorder, assert_enqueued / refute_enqueued, and enqueue-time checks that
write nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from workhorse import (
    App,
    EnqueueOptions,
    InvalidOptionsError,
    JobStatus,
    Queue,
    StaleLeaseError,
    current_job,
)
from workhorse.testing import DrainReport, assert_enqueued, drain, drain_async, refute_enqueued

AppFactory = Callable[[str], App]


@pytest.fixture
def make_app(database_url: str) -> Iterator[AppFactory]:
    apps: list[App] = []

    def make(name: str) -> App:
        app = App(name, database_url=database_url)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


def _job_count(conn: psycopg.Connection[Any]) -> int:
    return len(Queue(conn).list_jobs(limit=10_000))


# ---- assert_enqueued / refute_enqueued -------------------------------------------------------


def test_assert_enqueued_matches_the_stored_arguments(make_app: AppFactory) -> None:
    app = make_app("asserts")

    @app.task(name="mail.send", queue="mail")
    def send(to: str, *, subject: str = "") -> None: ...

    @app.task(name="other")
    def other(to: str) -> None: ...

    send.delay("ann", subject="hi")
    send.delay("ann", subject="hi")
    send.apply_async(("bob",), countdown=3600)  # scheduled counts too
    other.delay("ann")

    assert len(assert_enqueued(app, send)) == 3
    assert [j.payload for j in assert_enqueued(app, send, args=("ann",), count=2)] == [
        {"args": ["ann"], "kwargs": {"subject": "hi"}}] * 2
    assert_enqueued(app, send, kwargs={"subject": "hi"}, count=2)
    assert_enqueued(app, send, args=["bob"], kwargs={}, count=1)
    assert_enqueued(app, "mail.send", args=("bob",))
    assert_enqueued(app, other, args=("ann",), count=1)
    refute_enqueued(app, send, args=("carl",))
    refute_enqueued(app, send, args=("ann",), kwargs={})
    refute_enqueued(app, "nobody")

    with pytest.raises(AssertionError, match=r"expected 1 ready or scheduled mail.send job\(s\) "
                                             r"with args=\['ann'\], found 2") as raised:
        assert_enqueued(app, send, args=("ann",), count=1)
    assert "(scheduled, queue 'mail'): {'args': ['bob']" in str(raised.value)
    with pytest.raises(AssertionError, match=r"expected at least 1 .* found 0"):
        assert_enqueued(app, send, args=("carl",))
    with pytest.raises(AssertionError, match=r"expected no ready or scheduled mail.send job, "
                                             r"found 3"):
        refute_enqueued(app, send)


def test_finished_jobs_are_not_enqueued(make_app: AppFactory) -> None:
    app = make_app("asserts")

    @app.task(name="t")
    def t(n: int) -> int:
        return n

    t.delay(1)
    assert_enqueued(app, t, args=(1,), count=1)
    assert drain(app) == DrainReport(succeeded=1)
    refute_enqueued(app, t)
    assert_enqueued(app, t, count=0)


# ---- enqueue-time checks write nothing -------------------------------------------------------


def test_bad_calls_write_nothing(make_app: AppFactory, conn: psycopg.Connection[Any]) -> None:
    app = make_app("checks")

    @app.task(name="send", concurrency_key=lambda message: message["tenant"])
    def send(message: dict[str, Any]) -> None: ...

    @app.task(name="add")  # no key function that could catch a bad call first
    def add(a: int, b: int) -> int:
        return a + b

    bad: list[Callable[[], Any]] = [
        lambda: add.delay(1),
        lambda: add.delay(1, 2, 3),
        lambda: add.apply_async((1,), {"c": 2}),
        lambda: add.map([(1, 2), (1,)]),
        lambda: app.send_task("add", [1]),
        lambda: asyncio.run(add.delay_async(1)),
        lambda: asyncio.run(add.enqueue_async((1, 2, 3))),
        lambda: send.delay(),
        lambda: send.delay({"tenant": "t"}, 2),
        lambda: send.apply_async(({"tenant": "t"},), {"extra": 1}),
        lambda: send.apply_async(({"tenant": "t"},), countdown=30, delay=30),
        lambda: send.apply_async(({"tenant": "t"},), retries=30),
        lambda: send.map([({"tenant": "t"},), ({"tenant": "t"}, 1)]),
        lambda: send.delay({}),  # the key callable raises KeyError
        lambda: asyncio.run(send.delay_async()),
        lambda: asyncio.run(send.enqueue_async((), countdown=1)),
    ]
    for call in bad:
        with pytest.raises(InvalidOptionsError):
            call()
    assert _job_count(conn) == 0
    handle = send.apply_async(({"tenant": "t"},), countdown=30)
    job = handle.job()
    assert job is not None and job.status is JobStatus.SCHEDULED
    assert 25 < (job.run_at - job.enqueued_at).total_seconds() <= 31


def test_eta_sets_run_at(make_app: AppFactory) -> None:
    from datetime import UTC, datetime, timedelta

    app = make_app("checks")

    @app.task(name="t")
    def t() -> None: ...

    eta = datetime.now(UTC) + timedelta(hours=1)
    job = t.apply_async(eta=eta).job()
    assert job is not None and job.run_at == eta and job.status is JobStatus.SCHEDULED


# ---- drain ------------------------------------------------------------------------------------


def test_drain_runs_every_ready_job_and_records_it(make_app: AppFactory) -> None:
    app = make_app("drain")

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="mul")
    async def mul(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a * b

    handles = [add.delay(1, 2), mul.delay(3, 4), add.delay(5, 6)]
    assert drain(app) == DrainReport(succeeded=3, failed=0, retried=0, held=0)
    assert [h.get(timeout=5) for h in handles] == [3, 12, 11]
    assert drain(app) == DrainReport()  # nothing left


def test_jobs_that_enqueue_jobs_are_drained_too(make_app: AppFactory) -> None:
    app = make_app("drain")
    ran: list[int] = []

    @app.task(name="countdown")
    def countdown(n: int) -> None:
        ran.append(n)
        if n > 0:
            countdown.delay(n - 1)

    @app.task(name="fan")
    async def fan(width: int) -> None:
        await countdown.delay_async(1)
        for _ in range(width):
            await countdown.delay_async(0)

    countdown.delay(3)
    fan.delay(2)
    assert drain(app) == DrainReport(succeeded=1 + 4 + 1 + 2 + 1 + 0)  # fan, 3..0, 1+2 and 0
    assert sorted(ran) == [0, 0, 0, 0, 1, 1, 2, 3]


def test_retries_failures_and_holds_are_counted(make_app: AppFactory) -> None:
    app = make_app("drain")

    @app.task(name="flaky", max_attempts=2)
    def flaky() -> None:
        raise ValueError("down")

    @app.task(name="careful", on_failure="hold", max_attempts=1)
    def careful() -> None:
        raise RuntimeError("needs a human")

    h_flaky, h_careful = flaky.delay(), careful.delay()
    assert drain(app) == DrainReport(held=1, retried=1)
    assert h_flaky.status() is JobStatus.SCHEDULED  # waiting out its backoff
    assert h_careful.status() is JobStatus.HELD
    assert drain(app, with_scheduled=True) == DrainReport(failed=1)  # its backoff is run now
    assert h_flaky.status() is JobStatus.FAILED


def test_with_scheduled_runs_future_jobs(make_app: AppFactory) -> None:
    app = make_app("drain")

    @app.task(name="later")
    def later() -> str:
        return "done"

    handle = later.apply_async(countdown=3600)
    assert drain(app) == DrainReport()
    assert handle.status() is JobStatus.SCHEDULED
    assert drain(app, with_scheduled=True) == DrainReport(succeeded=1)
    assert handle.get(timeout=5) == "done"


def test_current_job_and_heartbeat_inside_drain(
    make_app: AppFactory, conn: psycopg.Connection[Any]
) -> None:
    app = make_app("drain")
    seen: list[dict[str, Any]] = []

    def record(kind: str) -> None:
        job = current_job()
        before = Queue(conn).get_job(job.id)
        job.heartbeat()
        after = Queue(conn).get_job(job.id)
        assert before is not None and after is not None
        assert before.lease_until is not None and after.lease_until is not None
        seen.append({"kind": kind, "id": job.id, "queue": job.queue, "key": job.concurrency_key,
                     "attempt": job.attempt, "max": job.max_attempts,
                     "cancel": job.cancel_requested, "thread": threading.current_thread().name,
                     "renewed": after.lease_until > before.lease_until})

    @app.task(name="sync_task", queue="ctx", concurrency_key=lambda k: k, max_attempts=4)
    def sync_task(k: str) -> None:
        record("sync")

    @app.task(name="async_task", queue="ctx")
    async def async_task() -> None:
        record("async")

    ids = [sync_task.delay("t1").id, async_task.delay().id]
    assert drain(app) == DrainReport(succeeded=2)
    assert [(s["kind"], s["id"], s["queue"], s["key"], s["attempt"], s["max"], s["cancel"],
             s["renewed"]) for s in seen] == [
        ("sync", ids[0], "ctx", "t1", 1, 4, False, True),
        ("async", ids[1], "ctx", None, 1, 3, False, True)]
    # drain() runs a sync handler in the caller's thread with no event loop, as eager() does (so
    # that Django's ORM works there, on the test's own connection); drain_async in a thread.
    assert seen[0]["thread"] == threading.current_thread().name


def test_a_heartbeat_after_the_lease_was_lost_raises(
    make_app: AppFactory, conn: psycopg.Connection[Any]
) -> None:
    app = make_app("drain")
    raised: list[BaseException] = []

    @app.task(name="t")
    def t() -> None:
        job = current_job()
        # As if the lease ran out and another worker claimed the job.
        conn.execute("UPDATE workhorse.jobs SET fence = fence + 1000 WHERE id = %s", (job.id,))
        try:
            job.heartbeat()
        except StaleLeaseError as exc:
            raised.append(exc)

    handle = t.delay()
    assert drain(app) == DrainReport()  # the outcome of a lost lease is discarded
    assert len(raised) == 1 and "lease was lost" in str(raised[0])
    assert handle.status() is JobStatus.ACTIVE


def test_drain_honours_a_governed_queue_and_only_its_queues(make_app: AppFactory) -> None:
    app = make_app("drain")
    running = [0]
    peak = [0]

    @app.task(name="serial", max_active=1)
    async def serial(n: int) -> int:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.01)
        running[0] -= 1
        return n

    @app.task(name="elsewhere")
    def elsewhere() -> None: ...

    app.sync()
    for n in range(4):
        serial.delay(n)
    other = elsewhere.delay()
    assert drain(app, queues=["serial"]) == DrainReport(succeeded=4)
    assert peak == [1] and other.status() is JobStatus.READY
    assert drain(app) == DrainReport(succeeded=1)


def test_a_paused_queue_is_not_drained(make_app: AppFactory, conn: psycopg.Connection[Any]) -> None:
    app = make_app("drain")

    @app.task(name="t")
    def t() -> None: ...

    handle = t.delay()
    Queue(conn).pause("t")
    assert drain(app) == DrainReport()
    assert handle.status() is JobStatus.READY
    Queue(conn).resume("t")
    assert drain(app) == DrainReport(succeeded=1)


def test_a_job_of_an_unknown_task_is_left_for_its_own_app(
    make_app: AppFactory, conn: psycopg.Connection[Any]
) -> None:
    """Another app's job in a shared queue is passed over, never claimed (docs/design.md "Errors",
    UnknownTaskError); the known job behind it runs."""
    app = make_app("drain")

    @app.task(name="known", queue="shared")
    def known() -> None: ...

    job_id = Queue(conn).enqueue("gone.task", {"args": [], "kwargs": {}},
                                 EnqueueOptions(queue="shared"))
    handle = known.delay()
    assert drain(app) == DrainReport(succeeded=1)
    assert handle.status() is JobStatus.SUCCEEDED
    job = Queue(conn).get_job(job_id)
    assert job is not None and job.status is JobStatus.READY and job.attempts == 0


def test_drain_that_never_ends_times_out(make_app: AppFactory) -> None:
    app = make_app("drain")

    @app.task(name="forever")
    def forever() -> None:
        time.sleep(0.05)
        forever.delay()

    forever.delay()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"drain\(\) did not finish within 0.5s \(succeeded="):
        drain(app, timeout=0.5)
    assert time.monotonic() - started < 5


def test_drain_from_async_code(make_app: AppFactory) -> None:
    app = make_app("drain")

    @app.task(name="t")
    async def t(n: int) -> int:
        return n

    async def main() -> tuple[DrainReport, DrainReport]:
        await t.delay_async(1)
        first = await drain_async(app)
        await t.delay_async(2)
        second = drain(app)  # the sync one inside a running loop: on a loop of its own
        await app.close_async()
        return first, second

    assert asyncio.run(main()) == (DrainReport(succeeded=1), DrainReport(succeeded=1))


def test_drain_waits_for_a_rate_limit_next_start(make_app: AppFactory) -> None:
    app = make_app("drain")

    @app.task(name="paced", rate_limit="1/s")
    def paced() -> float:
        return time.time()

    app.sync()
    first, second = paced.delay(), paced.delay()
    assert drain(app, timeout=10) == DrainReport(succeeded=2)
    gap = second.get(timeout=5) - first.get(timeout=5)
    assert 0.9 <= gap < 3  # the second start waited out the limit, and no longer


# ---- what the worker's executor honours (drain runs it): retry_on, Retry, Snooze, timeout -------


def test_executor_fails_at_once_outside_retry_on(make_app: AppFactory) -> None:
    app = make_app("wiring")

    @app.task(name="picky", retry_on=(ConnectionError,), max_attempts=5)
    def picky() -> None:
        raise ValueError("not a connection error")

    handle = picky.delay()
    assert drain(app) == DrainReport(failed=1)
    job = handle.job()
    assert job is not None and job.attempts == 1 and job.status is JobStatus.FAILED


def test_executor_retries_after_the_retry_delay(make_app: AppFactory) -> None:
    from datetime import UTC, datetime, timedelta

    from workhorse import Retry

    app = make_app("wiring")

    @app.task(name="later", retry_on=())
    def later() -> None:
        raise Retry(delay="1h")

    handle = later.delay()
    assert drain(app) == DrainReport(retried=1)
    job = handle.job()
    assert job is not None and job.status is JobStatus.SCHEDULED and job.attempts == 1
    assert abs(job.run_at - (datetime.now(UTC) + timedelta(hours=1))) < timedelta(minutes=1)


def test_executor_snoozes_without_using_an_attempt(make_app: AppFactory) -> None:
    from datetime import UTC, datetime, timedelta

    from workhorse import Snooze

    app = make_app("wiring")

    @app.task(name="polite", max_attempts=1)
    def polite() -> None:
        raise Snooze("1h")

    handle = polite.delay()
    assert drain(app) == DrainReport()
    job = handle.job()
    assert job is not None and job.status is JobStatus.SCHEDULED and job.attempts == 0
    assert abs(job.run_at - (datetime.now(UTC) + timedelta(hours=1))) < timedelta(minutes=1)


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_executor_fails_an_attempt_past_its_timeout(make_app: AppFactory, kind: str) -> None:
    app = make_app("wiring")

    if kind == "async":
        @app.task(name="slow", timeout="100ms", max_attempts=1)
        async def slow() -> int:
            await asyncio.sleep(5)
            return 1
    else:
        @app.task(name="slow", timeout="100ms", max_attempts=1)
        def slow_sync() -> int:
            time.sleep(0.4)
            return 1

    started = time.monotonic()
    handle = app.send_task("slow")
    assert drain(app) == DrainReport(failed=1)
    job = handle.job()
    assert job is not None and job.error is not None and job.result is None
    assert job.error["type"] == "JobTimeoutError"
    assert time.monotonic() - started < 3


def test_a_sync_handler_that_raises_past_its_timeout_fails_with_the_timeout(
    make_app: AppFactory,
) -> None:
    """Past the timeout, what the thread raised is discarded like what it would have returned:
    the attempt failed at its timeout (the late exception stays in the traceback)."""
    app = make_app("wiring")

    @app.task(name="late_raise", timeout="100ms", max_attempts=1)
    def late_raise() -> None:
        time.sleep(0.3)
        raise ValueError("raised after the timeout")

    @app.task(name="early_raise", timeout="5s", max_attempts=1)
    def early_raise() -> None:
        raise ValueError("raised in time")

    late, early = app.send_task("late_raise"), app.send_task("early_raise")
    assert drain(app) == DrainReport(failed=2)
    late_job, early_job = late.job(), early.job()
    assert late_job is not None and late_job.error is not None
    assert late_job.error["type"] == "JobTimeoutError", late_job.error
    assert "raised after the timeout" in late_job.error["traceback"]
    assert early_job is not None and early_job.error is not None
    assert early_job.error["type"] == "ValueError"


def test_a_snooze_frees_its_place_at_once(make_app: AppFactory) -> None:
    """On a queue with room for one, a snoozed job stops counting at once: the next job runs in
    the same drain, while the snoozed one waits out its delay with no attempt used."""
    app = make_app("snoozing")
    one = app.queue("one-place", max_active=1)

    @app.task(name="waits", queue=one)
    def waits() -> None:
        from workhorse import Snooze

        raise Snooze("1h")

    @app.task(name="runs", queue=one)
    def runs() -> int:
        return 1

    app.sync()
    snoozed, ran = waits.delay(), runs.delay()
    assert drain(app) == DrainReport(succeeded=1)
    snoozed_job, ran_job = snoozed.job(), ran.job()
    assert snoozed_job is not None and snoozed_job.status is JobStatus.SCHEDULED
    assert snoozed_job.attempts == 0
    assert ran_job is not None and ran_job.status is JobStatus.SUCCEEDED
