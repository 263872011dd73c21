"""The app layer against a real PostgreSQL: enqueue in its Celery-like forms, sync, transactions
and the async twins."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from _integration import count

from workhorse import (
    App,
    InvalidOptionsError,
    JobHandle,
    JobStatus,
    PayloadError,
    PolicyConflictError,
    Queue,
    SyncReport,
    UnknownTaskError,
    _sql,
)

AppFactory = Callable[[str], App]


@pytest.fixture
def make_app(database_url: str) -> Iterator[AppFactory]:
    """Apps on the test's database; their pools are closed after the test."""
    apps: list[App] = []

    def make(name: str = "billing") -> App:
        app = App(name, database_url=database_url)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


@pytest.fixture
def app(make_app: AppFactory) -> App:
    app = make_app("billing")

    @app.task(name="mail.send", queue="mail", max_active=20, max_active_per_key=3,
              concurrency_key=lambda message: message["tenant"], priority=2, max_attempts=4)
    def send(message: dict[str, Any], **extra: Any) -> None: ...

    @app.task(name="reports.build", on_failure="hold")
    def build(report_id: int, *, fmt: str = "pdf") -> None: ...

    @app.task(name="ai.summarize", queue=app.queue("openai-api", max_active=5))
    async def summarize(text: str) -> str:
        return text

    return app


def _job(conn: psycopg.Connection[Any], handle: JobHandle) -> Any:
    job = Queue(conn).get_job(handle.id)
    assert job is not None
    return job


def test_delay_stores_the_call_with_the_decorator_options(app: App, conn: Any) -> None:
    handle = app.tasks["mail.send"].delay({"tenant": "t1", "to": "ü@example.com"})
    assert isinstance(handle, JobHandle)
    job = _job(conn, handle)
    assert (job.task, job.queue, job.concurrency_key) == ("mail.send", "mail", "t1")
    assert job.payload == {"args": [{"tenant": "t1", "to": "ü@example.com"}], "kwargs": {}}
    assert (job.priority, job.max_attempts, job.attempts) == (2, 4, 0)
    assert (job.status, job.on_failure) == (JobStatus.READY, "fail")

    built = _job(conn, app.tasks["reports.build"].delay(7, fmt="csv"))
    assert built.payload == {"args": [7], "kwargs": {"fmt": "csv"}}
    assert (built.queue, built.concurrency_key, built.on_failure) == (
        "reports.build", None, "hold",
    )
    assert (built.priority, built.max_attempts) == (0, 3)
    assert _job(conn, app.tasks["ai.summarize"].delay("long text")).queue == "openai-api"


def test_apply_async_call_site_options_win(app: App, conn: Any) -> None:
    send = app.tasks["mail.send"]
    handle = send.apply_async(
        args=({"tenant": "t1"},), kwargs={"urgent": True}, queue="mail-bulk", priority=5,
        concurrency_key="override", delay=30, max_attempts=9,
    )
    job = _job(conn, handle)
    assert (job.queue, job.concurrency_key, job.priority, job.max_attempts) == (
        "mail-bulk", "override", 5, 9,
    )
    assert job.payload == {"args": [{"tenant": "t1"}], "kwargs": {"urgent": True}}
    assert job.status is JobStatus.SCHEDULED
    assert job.run_at - job.enqueued_at >= timedelta(seconds=29)

    at = datetime.now(UTC) + timedelta(hours=1)
    later = _job(conn, send.apply_async(({"tenant": "t2"},), run_at=at,
                                        queue=app.queue("openai-api")))
    assert abs((later.run_at - at).total_seconds()) < 0.01
    assert (later.queue, later.concurrency_key, later.status) == (
        "openai-api", "t2", JobStatus.SCHEDULED,
    )
    assert _job(conn, send.apply_async(({"tenant": 7},))).concurrency_key == "7"


def test_send_task_by_name(app: App, conn: Any) -> None:
    handle = app.send_task("reports.build", args=[3], kwargs={"fmt": "html"}, queue="adhoc",
                           priority=-4)
    job = _job(conn, handle)
    assert (job.task, job.queue, job.priority, job.on_failure) == (
        "reports.build", "adhoc", -4, "hold",
    )
    assert job.payload == {"args": [3], "kwargs": {"fmt": "html"}}
    assert _job(conn, app.send_task("mail.send", [{"tenant": "k"}])).concurrency_key == "k"


def test_send_task_unknown_name_enqueues_nothing(app: App, conn: Any) -> None:
    with pytest.raises(UnknownTaskError, match="nope"):
        app.send_task("nope", args=[1])
    assert count(conn) == 0


def test_map_and_enqueue_many_keep_order_in_one_call(app: App, conn: Any) -> None:
    send, build = app.tasks["mail.send"], app.tasks["reports.build"]
    handles = send.map([({"tenant": f"t{i}"},) for i in range(5)], priority=1)
    ids = [h.id for h in handles]
    assert ids == sorted(ids) and len(set(ids)) == 5
    jobs = [_job(conn, h) for h in handles]
    assert [j.concurrency_key for j in jobs] == [f"t{i}" for i in range(5)]
    assert {j.priority for j in jobs} == {1}

    mixed = app.enqueue_many([build.call((1,)), send.call(({"tenant": "x"},)), build.call((2,))])
    assert [_job(conn, h).task for h in mixed] == ["reports.build", "mail.send", "reports.build"]
    assert [h.id for h in mixed] == sorted(h.id for h in mixed)
    assert app.enqueue_many([]) == []
    assert count(conn) == 8


def test_job_handle_status_and_job(app: App, conn: Any) -> None:
    handle = app.tasks["reports.build"].delay(1)
    assert handle.status() is JobStatus.READY
    job = handle.job()
    assert job is not None and job.id == handle.id and job.task == "reports.build"
    conn.execute(f"SELECT workhorse.{_sql.function_name('cancel_jobs')}(%s::bigint[], '{{}}')",
                 ([handle.id],))
    assert handle.status() is JobStatus.CANCELED
    missing = JobHandle(handle.id + 1000, app)
    assert missing.job() is None and missing.status() is None


@pytest.mark.parametrize(
    "argument",
    [object(), math.nan, {"x": math.inf}, b"bytes", "x" * (1024 * 1024 + 1), {1j: 2}],
    ids=["object", "nan", "inf", "bytes", "too-large", "complex-key"],
)
def test_bad_payload_raises_at_the_call_site_and_enqueues_nothing(
    app: App, conn: Any, argument: Any
) -> None:
    build = app.tasks["reports.build"]
    with pytest.raises(PayloadError):
        build.delay(argument)
    with pytest.raises(PayloadError):
        app.enqueue_many([build.call((1,)), build.call((argument,))])
    assert count(conn) == 0


def test_bad_key_or_options_raise_and_enqueue_nothing(app: App, conn: Any) -> None:
    send = app.tasks["mail.send"]
    with pytest.raises(InvalidOptionsError):
        send.delay({"tenant": ""})
    with pytest.raises(InvalidOptionsError):
        send.delay({"tenant": 1.5})
    with pytest.raises(InvalidOptionsError, match="raised KeyError: 'tenant'") as raised:
        send.delay({})  # the key function's own error is the cause
    assert isinstance(raised.value.__cause__, KeyError)
    with pytest.raises(InvalidOptionsError):
        send.apply_async(({"tenant": "t"},), priority=99999)
    with pytest.raises(InvalidOptionsError):
        send.apply_async(({"tenant": "t"},), delay=-1)
    with pytest.raises(InvalidOptionsError, match="'colour'; valid options are queue, "):
        send.apply_async(({"tenant": "t"},), colour="red")
    assert count(conn) == 0


# ---- sync ----------------------------------------------------------------------------------------


def _stored(conn: Any, namespace: str | None = None) -> dict[str, tuple[int | None, int | None]]:
    return {
        p.queue: (p.max_active, p.max_active_per_key)
        for p in Queue(conn).list_concurrency_policies(namespace)
    }


def test_sync_reports_created_updated_unchanged_pruned(make_app: AppFactory, conn: Any) -> None:
    first = make_app("billing")
    first.task(name="a", queue="qa", max_active=2)(lambda: None)
    first.task(name="b", queue="qb", max_active_per_key=1)(lambda: None)
    first.task(name="c", queue="qc", max_active=3)(lambda: None)
    first.task(name="free", queue="ungoverned")(lambda: None)

    assert first.sync() == SyncReport(created=["qa", "qb", "qc"], updated=[], pruned=[],
                                      unchanged=[])
    assert _stored(conn) == {"qa": (2, None), "qb": (None, 1), "qc": (3, None)}
    assert first.sync() == SyncReport(unchanged=["qa", "qb", "qc"])  # idempotent
    assert _stored(conn, "billing") == {"qa": (2, None), "qb": (None, 1), "qc": (3, None)}

    # The next deploy: qa changes, qb is gone, qd is new, qc stays.
    second = make_app("billing")
    second.task(name="a", queue="qa", max_active=5, max_active_per_key=2)(lambda: None)
    second.task(name="c", queue="qc", max_active=3)(lambda: None)
    second.task(name="d", queue="qd", max_active=1)(lambda: None)
    report = second.sync()
    assert (sorted(report.created), sorted(report.updated)) == (["qd"], ["qa"])
    assert (sorted(report.pruned), sorted(report.unchanged)) == (["qb"], ["qc"])
    assert _stored(conn) == {"qa": (5, 2), "qc": (3, None), "qd": (1, None)}
    assert second.sync() == SyncReport(unchanged=sorted(report.unchanged + report.updated
                                                        + report.created))


def test_sync_without_prune_keeps_the_omitted_queues(make_app: AppFactory, conn: Any) -> None:
    first = make_app("billing")
    first.task(name="a", queue="qa", max_active=2)(lambda: None)
    first.task(name="b", queue="qb", max_active=2)(lambda: None)
    first.sync()
    second = make_app("billing")
    second.task(name="a", queue="qa", max_active=3)(lambda: None)
    assert second.sync(prune=False) == SyncReport(updated=["qa"])
    assert _stored(conn) == {"qa": (3, None), "qb": (2, None)}
    assert second.sync() == SyncReport(pruned=["qb"], unchanged=["qa"])
    assert _stored(conn) == {"qa": (3, None)}


def test_sync_of_an_app_with_no_policies_prunes_its_namespace(
    make_app: AppFactory, conn: Any
) -> None:
    first = make_app("billing")
    first.task(name="a", queue="qa", max_active=2)(lambda: None)
    first.sync()
    empty = make_app("billing")
    assert empty.sync(prune=False) == SyncReport()
    assert _stored(conn) == {"qa": (2, None)}
    assert empty.sync() == SyncReport(pruned=["qa"])
    assert _stored(conn) == {}


def test_namespace_conflict_writes_nothing(make_app: AppFactory, conn: Any) -> None:
    owner = make_app("billing")
    owner.task(name="a", queue="shared", max_active=2)(lambda: None)
    owner.task(name="o", queue="owned", max_active=1)(lambda: None)
    owner.sync()
    before = Queue(conn).list_concurrency_policies()

    other = make_app("search")
    other.task(name="x", queue="fresh", max_active=4)(lambda: None)
    other.task(name="y", queue="shared", max_active=9)(lambda: None)
    with pytest.raises(PolicyConflictError, match="shared"):
        other.sync()
    with pytest.raises(PolicyConflictError):
        other.sync(prune=False)
    assert Queue(conn).list_concurrency_policies() == before  # not even "fresh"
    assert _stored(conn, "search") == {}
    assert owner.sync() == SyncReport(unchanged=["owned", "shared"])


# ---- the caller's transaction --------------------------------------------------------------------


def test_using_enqueues_inside_the_callers_transaction(
    app: App, conn: Any, database_url: str
) -> None:
    build = app.tasks["reports.build"]
    with psycopg.connect(database_url) as tx:
        with app.using(tx):
            rolled_back = build.delay(1)
            assert handle_seen(tx, rolled_back)  # visible to the caller's own transaction
        assert count(conn) == 0  # not committed behind the caller's back
        tx.rollback()
        assert count(conn) == 0

        with app.using(tx):
            kept = build.delay(2)
            also = app.send_task("reports.build", [3])
            many = build.map([(4,), (5,)])
        tx.execute("SELECT 1")
        assert count(conn) == 0
        tx.commit()
    assert count(conn) == 4
    assert {j.payload["args"][0] for j in map(lambda h: _job(conn, h), [kept, also, *many])} == {
        2, 3, 4, 5,
    }
    assert Queue(conn).get_job(rolled_back.id) is None


def handle_seen(tx: psycopg.Connection[Any], handle: JobHandle) -> bool:
    return Queue(tx).get_job(handle.id) is not None


def test_apply_async_with_a_connection(app: App, conn: Any, database_url: str) -> None:
    build = app.tasks["reports.build"]
    with psycopg.connect(database_url) as tx:
        build.apply_async((1,), connection=tx)
        tx.execute("INSERT INTO workhorse.workers (app, host, pid, slots, queues) "
                   "VALUES ('x', 'h', 1, 1, '{}')")
        tx.rollback()
        assert count(conn) == 0
        handle = build.apply_async((2,), connection=tx, priority=9)
        tx.commit()
    assert _job(conn, handle).priority == 9
    assert count(conn) == 1
    with pytest.raises(InvalidOptionsError, match="async"):
        build.apply_async((3,), connection="not a connection")


def test_using_is_scoped_to_the_block(app: App, conn: Any, database_url: str) -> None:
    build = app.tasks["reports.build"]
    with psycopg.connect(database_url) as tx:
        with app.using(tx):
            build.delay(1)
        outside = build.delay(2)  # on a pooled connection: committed at once
        assert count(conn) == 1 and _job(conn, outside).payload["args"] == [2]
        tx.rollback()
    assert count(conn) == 1


# ---- async twins ---------------------------------------------------------------------------------


def test_async_twins(app: App, conn: Any) -> None:
    send, build = app.tasks["mail.send"], app.tasks["reports.build"]

    async def main() -> list[JobHandle]:
        try:
            first = await send.delay_async({"tenant": "t1"})
            second = await send.enqueue_async(args=({"tenant": "t1"},), kwargs={"n": 1},
                                              queue="mail-bulk", priority=7,
                                              concurrency_key="own", delay=60, max_attempts=2)
            third = await app.send_task_async("reports.build", args=[9], queue="adhoc")
            assert await first.status_async() is JobStatus.READY
            job = await second.job_async()
            assert job is not None and job.status is JobStatus.SCHEDULED
            report = await app.sync_async()
            assert sorted(report.created) == ["mail", "openai-api"]
            assert await app.sync_async() == SyncReport(unchanged=["mail", "openai-api"])
            with pytest.raises(UnknownTaskError):
                await app.send_task_async("nope")
            with pytest.raises(PayloadError):
                await build.delay_async(object())
            return [first, second, third]
        finally:
            await app.close_async()

    first, second, third = asyncio.run(main())
    assert count(conn) == 3
    assert _job(conn, first).concurrency_key == "t1"
    job = _job(conn, second)
    assert (job.queue, job.concurrency_key, job.priority, job.max_attempts) == (
        "mail-bulk", "own", 7, 2,
    )
    assert job.payload == {"args": [{"tenant": "t1"}], "kwargs": {"n": 1}}
    assert (_job(conn, third).queue, _job(conn, third).task) == ("adhoc", "reports.build")
    assert _stored(conn, "billing") == {"mail": (20, 3), "openai-api": (5, None)}


def test_async_enqueue_in_the_callers_transaction(app: App, conn: Any, database_url: str) -> None:
    build = app.tasks["reports.build"]

    async def main() -> JobHandle:
        async with await psycopg.AsyncConnection.connect(database_url) as tx:
            await build.enqueue_async((1,), connection=tx)
            with app.using(tx):
                await build.delay_async(2)
                await app.send_task_async("reports.build", [3])
                with pytest.raises(InvalidOptionsError, match="async"):
                    build.delay(4)  # a sync enqueue cannot use an async connection
            assert count(conn) == 0
            await tx.rollback()
            kept = await build.enqueue_async((5,), connection=tx)
            await tx.commit()
        with (
            psycopg.connect(database_url) as sync_tx,
            app.using(sync_tx),
            pytest.raises(InvalidOptionsError, match="not async"),
        ):
            await build.delay_async(6)
        await app.close_async()
        return kept

    kept = asyncio.run(main())
    assert count(conn) == 1
    assert _job(conn, kept).payload == {"args": [5], "kwargs": {}}
