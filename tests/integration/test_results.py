"""Results and control on a real database, in one process (the worker side is played by Queue
calls): get/wait and their errors, the poll fallback, many waiters on few connections, cancel
requests, idempotency keys, and retention."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import psycopg
import pytest
from _integration import HERE, collect, spawn, start

from workhorse import (
    App,
    EnqueueOptions,
    InvalidOptionsError,
    JobNotFoundError,
    JobStatus,
    Queue,
    TaskCanceledError,
    TaskFailedError,
    _results,
)

ERROR = {"type": "ValueError", "message": "bad input", "traceback": "Traceback...\nValueError"}


@pytest.fixture
def app(database_url: str) -> Any:
    app = App("results", database_url=database_url, retention={"succeeded": "2h"})

    @app.task(name="add", queue="math")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="report", queue="reports", on_failure="hold")
    def report() -> None: ...

    yield app
    app.close()


def _claim(queue: Queue, name: str) -> Any:
    [job] = queue.claim(name, 1, 30)
    return job


def _later(seconds: float, action: Any) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), action()))
    thread.start()
    return thread


def test_get_waits_for_the_result(app: App, queue: Queue) -> None:
    handle = app.tasks["add"].delay(2, 3)
    job = _claim(queue, "math")
    done = _later(0.3, lambda: queue.complete(job.id, job.fence, 5))
    started = time.monotonic()
    assert handle.get(timeout=10) == 5
    assert time.monotonic() - started >= 0.25
    done.join()
    assert handle.wait(timeout=1).status is JobStatus.SUCCEEDED
    assert app.handle(handle.id).get(timeout=1) == 5  # from its id alone


def test_get_raises_for_failed_held_canceled_and_timeout(app: App, queue: Queue) -> None:
    failed = app.tasks["add"].apply_async((1, 1), max_attempts=1)
    job = _claim(queue, "math")
    queue.fail(job.id, job.fence, ERROR)
    with pytest.raises(TaskFailedError, match="ValueError: bad input") as info:
        failed.get(timeout=5)
    assert info.value.job.status is JobStatus.FAILED and "Traceback" in str(info.value)
    assert failed.wait(timeout=5).status is JobStatus.FAILED  # wait never raises for failure

    held = app.tasks["report"].apply_async(max_attempts=1)
    job = _claim(queue, "reports")
    queue.fail(job.id, job.fence, ERROR)
    with pytest.raises(TaskFailedError, match="held"):
        held.get(timeout=5)

    canceled = app.tasks["add"].delay(1, 2)
    assert canceled.cancel() is JobStatus.CANCELED
    with pytest.raises(TaskCanceledError):
        canceled.get(timeout=5)
    assert canceled.retry() is JobStatus.READY  # a canceled job can run again

    pending = app.tasks["add"].delay(3, 4)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        pending.get(timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 2
    with pytest.raises(TimeoutError):
        pending.wait(timeout=0)
    with pytest.raises(JobNotFoundError):
        app.handle(10**12).wait(timeout=1)


def test_get_async(app: App, queue: Queue) -> None:
    async def main() -> int:
        handle = await app.tasks["add"].delay_async(4, 5)
        job = _claim(queue, "math")
        _later(0.2, lambda: queue.complete(job.id, job.fence, 9))
        try:
            return int(await handle.get_async(timeout=10))
        finally:
            await app.close_async()

    assert asyncio.run(main()) == 9


def test_the_poll_fallback_works_without_listen(database_url: str, queue: Queue) -> None:
    """LISTEN unavailable (its server unreachable, as behind PgBouncer's transaction mode):
    waiters are still woken, by the poll."""
    waiter = _results.ResultWaiter(database_url, listen_url="postgresql://x@127.0.0.1:1/none")
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="p"))
    job = _claim(queue, "p")
    _later(0.2, lambda: queue.complete(job.id, job.fence, None))
    started = time.monotonic()
    assert waiter.wait(job_id, 10)
    assert time.monotonic() - started < 0.2 + _results.POLL_INTERVAL + 1.5


def test_a_thousand_waiters_share_one_connection(database_url: str, queue: Queue,
                                                 conn: psycopg.Connection[Any]) -> None:
    ids = queue.enqueue_many([("t", {}, EnqueueOptions(queue="many")) for _ in range(1000)])
    jobs = queue.claim("many", 1000, 30)
    waiter = _results.ResultWaiter(database_url)

    async def main() -> list[bool]:
        waits = [asyncio.create_task(waiter.wait_async(i, 60)) for i in ids]

        def listening() -> int:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name IN ('workhorse-results', 'workhorse-results-listen')"
            ).fetchone()
            return int(row[0]) if row else 0

        # Every waiter is registered at once, but the one LISTEN connection may take a while to
        # open on a loaded machine: wait for it (a fixed sleep flaked), then check that it stays
        # the only one while all thousand wait. The short-lived probe connection that checks
        # whether LISTEN works is not counted: closed, its backend can linger in
        # pg_stat_activity for a moment (seen as [2, 1, 1, 1, 1] under load).
        deadline = time.monotonic() + 20
        while listening() == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        seen = [listening() for _ in range(5)]
        assert seen == [1] * 5, seen
        queue.complete_many([(j.id, j.fence, None) for j in jobs])
        return list(await asyncio.gather(*waits))

    assert asyncio.run(main()) == [True] * 1000


def test_cancelling_a_running_job_is_a_request(queue: Queue) -> None:
    ids = queue.enqueue_many([("t", {}, EnqueueOptions(queue="c")) for _ in range(3)])
    running = queue.claim("c", 2, 30)
    assert queue.cancel_jobs([ids[0], ids[2]]) == [ids[0], ids[2]]
    first = queue.get_job(ids[0])
    assert first is not None and first.status is JobStatus.ACTIVE and first.cancel_requested
    third = queue.get_job(ids[2])
    assert third is not None and third.status is JobStatus.CANCELED  # it was only ready
    # The worker hears of it with its next heartbeat; the job stays active (its place held)
    # until its handler stops, then ends canceled whatever it returned.
    from workhorse import _ops
    assert _ops.execute(queue.conn, _ops.renew_leases(
        [(j.id, j.fence, 30.0) for j in running])) == {ids[0]: True, ids[1]: False}
    queue.complete(running[0].id, running[0].fence, "ignored")
    ended = queue.get_job(ids[0])
    assert ended is not None and ended.status is JobStatus.CANCELED and ended.result is None
    # A failure of a job asked to cancel ends it canceled too, not retried.
    queue.cancel_jobs([ids[1]])
    from datetime import UTC, datetime
    assert queue.fail(running[1].id, running[1].fence, ERROR,
                      retry_at=datetime.now(UTC)) is JobStatus.CANCELED


def test_idempotency_keys(queue: Queue, app: App) -> None:
    a, b, a_again = queue.enqueue_many([
        ("report", {}, EnqueueOptions(queue="reports", idempotency_key="k1")),
        ("report", {}, EnqueueOptions(queue="reports")),
        ("report", {}, EnqueueOptions(queue="other", idempotency_key="k1")),
    ])
    assert a == a_again and b != a
    assert queue.enqueue("report", {}, EnqueueOptions(idempotency_key="k1")) == a
    assert queue.enqueue("other.task", {}, EnqueueOptions(idempotency_key="k1")) != a
    handle = app.tasks["report"].apply_async(idempotency_key="k1")
    assert handle.id == a
    assert len(queue.list_jobs(task="report")) == 2
    for bad in ("", "x" * 256, 7):
        with pytest.raises(InvalidOptionsError):
            queue.enqueue("report", {}, EnqueueOptions(idempotency_key=bad))  # type: ignore[arg-type]
    assert len(queue.list_jobs()) == 3


def test_twenty_processes_enqueue_one_key_and_get_one_job(database_url: str,
                                                          queue: Queue) -> None:
    processes = [spawn("enqueue", database_url, script=HERE / "_enqueuer.py", key="nightly")
                 for _ in range(20)]
    start(processes, delay=0.2)
    ids = {report["id"] for report in collect(processes)}
    assert len(ids) == 1
    assert [j.id for j in queue.list_jobs(task="report")] == list(ids)


def test_retention_is_fixed_when_a_job_ends_and_pruning_removes_it(
    app: App, queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    app.tasks["add"].delay(1, 1)
    job = _claim(queue, "math")
    from workhorse import _ops
    retention = app.tasks["add"].retention_json
    assert json.loads(retention) == {"succeeded": 7200.0, "failed": 604800.0,
                                     "canceled": 86400.0}
    _ops.execute(conn, _ops.complete_encoded([(job.id, job.fence, "2", retention)]))
    ended = queue.get_job(job.id)
    assert ended is not None and ended.expires_at is not None and ended.finished_at is not None
    assert 7199 <= (ended.expires_at - ended.finished_at).total_seconds() <= 7201
    held = app.tasks["report"].apply_async(max_attempts=1)
    claimed = _claim(queue, "reports")
    queue.fail(claimed.id, claimed.fence, ERROR)
    held_job = held.job()
    assert held_job is not None and held_job.expires_at is None  # kept until an operator acts
    assert queue.prune_jobs() == 0  # nothing has expired yet
    conn.execute("UPDATE workhorse.jobs SET expires_at = now() - interval '1s' WHERE id = %s",
                 (job.id,))
    assert queue.prune_jobs() == 1 and queue.get_job(job.id) is None
    assert queue.prune_jobs(older_than=0, statuses=["held"]) == 1


@pytest.mark.parametrize("retention", [
    {"succeeded": "soon"}, {"ready": "1d"}, {"held": "1d"}, {"failed": -5}, ["1d"],
])
def test_bad_retention_is_refused(retention: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        App("r", retention=retention)
    app = App("r")
    with pytest.raises(InvalidOptionsError):
        app.task(name="t", retention=retention)(lambda: None)
    assert app.tasks == {}


def test_one_batch_with_two_retentions_keeps_each_jobs_own(queue: Queue,
                                                           conn: psycopg.Connection[Any]) -> None:
    from workhorse import _ops
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="mix")) for _ in range(3)])
    a, b, c = queue.claim("mix", 3, 30)
    short, long = json.dumps({"succeeded": 60}), json.dumps({"succeeded": 3600})
    done = _ops.execute(conn, _ops.complete_encoded([
        (a.id, a.fence, "1", short), (b.id, b.fence, "2", long), (c.id, c.fence, "3", short)]))
    assert set(done.values()) == {JobStatus.SUCCEEDED} and len(done) == 3
    kept = {}
    for job in (a, b, c):
        ended = queue.get_job(job.id)
        assert ended is not None and ended.expires_at and ended.finished_at
        kept[job.id] = round((ended.expires_at - ended.finished_at).total_seconds())
    assert kept == {a.id: 60, b.id: 3600, c.id: 60}
