"""The outcome recorder (workhorse/worker/recorder.py), in process against the real database:
batched completions, stale fences, failures the database turns into scheduled/failed/held, the
run loop until close, and recovery from a connection the server cut."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import App, EnqueueOptions, JobStatus, Queue
from workhorse.types import ClaimedJob
from workhorse.worker.executor import Execution, Executor, Outcome
from workhorse.worker.recorder import OutcomeRecorder, Recorded

ERROR = {"type": "Boom", "message": "it broke", "traceback": "Traceback ..."}


class Connector:
    """The recorder's `connect`: real connections, remembered (the first `bad` ones fail)."""

    def __init__(self, url: str, bad: int = 0) -> None:
        self.url = url
        self.bad = bad
        self.calls = 0
        self.connections: list[psycopg.AsyncConnection[Any]] = []
        self.pids: list[int] = []

    async def __call__(self) -> psycopg.AsyncConnection[Any]:
        self.calls += 1
        url = self.url
        if self.calls <= self.bad:
            url = make_conninfo(url, dbname=f"{conninfo_to_dict(url)['dbname']}_missing")
        connection = await psycopg.AsyncConnection.connect(url, autocommit=True)
        self.connections.append(connection)
        self.pids.append(connection.info.backend_pid)
        return connection


class Calls:
    """`on_recorded`: every list it was handed, in order."""

    def __init__(self) -> None:
        self.calls: list[list[Recorded]] = []
        self.reused: list[bool] = []
        self.event = anyio.Event()

    def __call__(self, recorded: list[Recorded], reused: bool) -> None:
        self.calls.append(recorded)
        self.reused.append(reused)
        self.event.set()

    @property
    def flat(self) -> list[Recorded]:
        return [item for call in self.calls for item in call]


def _claim(queue: Queue, n: int, lease: float = 30.0, **options: Any) -> list[ClaimedJob]:
    ids = queue.enqueue_many([("t", {"args": [i]}, EnqueueOptions(queue="q", **options))
                              for i in range(n)])
    claimed = queue.claim("q", n, lease)
    assert sorted(job.id for job in claimed) == ids
    return sorted(claimed, key=lambda job: job.id)


def _success(job: ClaimedJob, result: str) -> Outcome:
    return Outcome(Execution(job, None, 30.0), result=result)


def _failure(job: ClaimedJob, retry_at: datetime | None) -> Outcome:
    return Outcome(Execution(job, None, 30.0), error=ERROR, retry_at=retry_at)


def _run(body: Callable[[], Awaitable[None]]) -> None:
    anyio.run(body)


def _xmins(conn: psycopg.Connection[Any], ids: list[int]) -> set[str]:
    rows = conn.execute("SELECT xmin::text FROM workhorse.jobs WHERE id = ANY(%s)", (ids,))
    return {row[0] for row in rows}


# ---- successes ----------------------------------------------------------------------------------


def test_successes_are_recorded_in_one_call(
    database_url: str, queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    app = App("rec")

    @app.task(name="t")
    def t(i: int) -> dict[str, int]:
        return {"i": i * 10}

    claimed = _claim(queue, 3)
    connect = Connector(database_url)
    on_recorded = Calls()
    pids: list[int] = []
    recorder = OutcomeRecorder(connect, on_recorded, on_connected=pids.append)
    outcomes: list[Outcome] = []

    async def body() -> None:
        executor = Executor(app.tasks, app_name=app.name, default_lease=30.0)
        for job in claimed:
            outcome = await executor.run(executor.prepare(job))
            assert outcome is not None
            outcomes.append(outcome)
            recorder.add(outcome)
        assert recorder.pending == 3
        await recorder.flush()
        assert recorder.pending == 0
        await recorder.flush()  # nothing queued: no call
        assert pids == connect.pids
        [connection] = connect.connections
        await connection.close()

    _run(body)
    assert [o.result for o in outcomes] == ['{"i":0}', '{"i":10}', '{"i":20}']
    assert connect.calls == 1
    assert len(on_recorded.calls) == 1
    [recorded] = on_recorded.calls
    assert [(o, status) for o, status in recorded] == [(o, JobStatus.SUCCEEDED) for o in outcomes]
    for job, i in zip(claimed, range(3), strict=True):
        row = queue.get_job(job.id)
        assert row is not None and row.status is JobStatus.SUCCEEDED and row.result == {"i": i * 10}
        assert row.lease_until is None and row.finished_at is not None
    # One statement, so one transaction wrote all three rows.
    assert len(_xmins(conn, [job.id for job in claimed])) == 1


def test_a_null_result_is_stored_as_json_null(database_url: str, queue: Queue) -> None:
    [job] = _claim(queue, 1)
    on_recorded = Calls()
    recorder = OutcomeRecorder(Connector(database_url), on_recorded)

    async def body() -> None:
        recorder.add(Outcome(Execution(job, None, 30.0), result=None))
        recorder.close()
        with anyio.fail_after(10):
            await recorder.run()

    _run(body)
    row = queue.get_job(job.id)
    assert row is not None and row.status is JobStatus.SUCCEEDED and row.result is None
    assert [status for _, status in on_recorded.flat] == [JobStatus.SUCCEEDED]


def test_a_stale_success_is_not_recorded(database_url: str, queue: Queue) -> None:
    [old] = _claim(queue, 1, lease=0.2)
    time.sleep(0.3)
    [new] = queue.claim("q", 1, 30.0)
    assert new.id == old.id and new.fence > old.fence
    on_recorded = Calls()
    recorder = OutcomeRecorder(Connector(database_url), on_recorded)
    stale = _success(old, '"stale"')
    fresh = _success(new, '"fresh"')
    again = _success(old, '"stale again"')

    async def body() -> None:
        recorder.add(stale)
        await recorder.flush()
        row = queue.get_job(old.id)
        assert row is not None and row.status is JobStatus.ACTIVE
        assert row.fence == new.fence and row.result is None and row.attempts == 2
        # One batch with the job's stale outcome and its fresh one: only the fresh one counts.
        recorder.add(again)
        recorder.add(fresh)
        recorder.close()
        with anyio.fail_after(10):
            await recorder.run()

    _run(body)
    assert on_recorded.calls == [[(stale, None)], [(again, None), (fresh, JobStatus.SUCCEEDED)]]
    row = queue.get_job(old.id)
    assert row is not None and row.status is JobStatus.SUCCEEDED and row.result == "fresh"
    assert row.fence == new.fence


# ---- failures -----------------------------------------------------------------------------------


def test_failures_become_scheduled_failed_or_held(database_url: str, queue: Queue) -> None:
    retry, fail = _claim(queue, 2)
    hold_id = queue.enqueue_many([("t", {}, EnqueueOptions(queue="h", max_attempts=1))],
                                 on_failure=["hold"])[0]
    [hold] = queue.claim("h", 1, 30.0)
    assert hold.id == hold_id
    retry_at = datetime.now(UTC) + timedelta(seconds=60)
    outcomes = [_failure(retry, retry_at), _failure(fail, None), _failure(hold, None)]
    on_recorded = Calls()
    recorder = OutcomeRecorder(Connector(database_url), on_recorded)

    async def body() -> None:
        for outcome in outcomes:
            recorder.add(outcome)
        assert recorder.pending == 3
        await recorder.flush()
        assert recorder.pending == 0

    _run(body)
    expected = [JobStatus.SCHEDULED, JobStatus.FAILED, JobStatus.HELD]
    # Failures are recorded (and reported) one by one.
    assert on_recorded.calls == [[(o, s)] for o, s in zip(outcomes, expected, strict=True)]
    for job, status in zip((retry, fail, hold), expected, strict=True):
        row = queue.get_job(job.id)
        assert row is not None and row.status is status and row.error == ERROR
        assert row.lease_until is None
    row = queue.get_job(retry.id)
    assert row is not None and row.run_at == retry_at and row.finished_at is None
    row = queue.get_job(fail.id)
    assert row is not None and row.finished_at is not None


def test_the_database_decides_a_last_attempt_is_not_retried(
    database_url: str, queue: Queue
) -> None:
    """A retry time on the last attempt: the job ends (failed), whatever the outcome said."""
    [job] = _claim(queue, 1, max_attempts=1)
    on_recorded = Calls()
    recorder = OutcomeRecorder(Connector(database_url), on_recorded)
    outcome = _failure(job, datetime.now(UTC) + timedelta(seconds=60))

    async def body() -> None:
        recorder.add(outcome)
        await recorder.flush()

    _run(body)
    assert on_recorded.calls == [[(outcome, JobStatus.FAILED)]]
    row = queue.get_job(job.id)
    assert row is not None and row.status is JobStatus.FAILED


def test_executor_failures_are_recorded(database_url: str, queue: Queue) -> None:
    app = App("rec")

    @app.task(name="t")
    async def t(i: int) -> None:
        raise RuntimeError(f"no {i}")

    first_attempt = _claim(queue, 1)
    last_attempt = _claim(queue, 1, max_attempts=1)
    on_recorded = Calls()
    recorder = OutcomeRecorder(Connector(database_url), on_recorded)

    async def body() -> None:
        executor = Executor(app.tasks, app_name=app.name, default_lease=30.0)
        for job in first_attempt + last_attempt:
            outcome = await executor.run(executor.prepare(job))
            assert outcome is not None
            recorder.add(outcome)
        await recorder.flush()

    _run(body)
    assert [status for _, status in on_recorded.flat] == [JobStatus.SCHEDULED, JobStatus.FAILED]
    for job, status, message in ((first_attempt[0], JobStatus.SCHEDULED, "no 0"),
                                 (last_attempt[0], JobStatus.FAILED, "no 0")):
        row = queue.get_job(job.id)
        assert row is not None and row.status is status and row.error is not None
        assert (row.error["type"], row.error["message"]) == ("RuntimeError", message)


def test_a_stale_failure_is_not_recorded(database_url: str, queue: Queue) -> None:
    [old] = _claim(queue, 1, lease=0.2)
    time.sleep(0.3)
    [new] = queue.claim("q", 1, 30.0)
    on_recorded = Calls()
    recorder = OutcomeRecorder(Connector(database_url), on_recorded)
    stale = _failure(old, None)

    async def body() -> None:
        recorder.add(stale)
        await recorder.flush()

    _run(body)
    assert on_recorded.calls == [[(stale, None)]]
    row = queue.get_job(old.id)
    assert row is not None and row.status is JobStatus.ACTIVE and row.error is None
    assert row.fence == new.fence


# ---- the run loop -------------------------------------------------------------------------------


def test_run_records_everything_then_returns_on_close(database_url: str, queue: Queue) -> None:
    jobs = _claim(queue, 4)
    connect = Connector(database_url)
    on_recorded = Calls()
    recorder = OutcomeRecorder(connect, on_recorded)
    outcomes = [_success(jobs[0], "0"), _success(jobs[1], "1"), _failure(jobs[2], None),
                _success(jobs[3], "3")]

    async def body() -> None:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                recorder.add(outcomes[0])  # before run() starts
                tg.start_soon(recorder.run)
                await on_recorded.event.wait()
                recorder.add(outcomes[1])
                recorder.add(outcomes[2])
                await anyio.sleep(0)
                recorder.add(outcomes[3])
                recorder.close()
        # run() returned, and closed its connection.
        assert [c.closed for c in connect.connections] == [True]

    _run(body)
    recorded = dict((id(o), s) for o, s in on_recorded.flat)
    assert recorded == {id(outcomes[0]): JobStatus.SUCCEEDED, id(outcomes[1]): JobStatus.SUCCEEDED,
                        id(outcomes[2]): JobStatus.FAILED, id(outcomes[3]): JobStatus.SUCCEEDED}
    assert recorder.pending == 0
    for job, status in zip(jobs, [JobStatus.SUCCEEDED, JobStatus.SUCCEEDED, JobStatus.FAILED,
                                  JobStatus.SUCCEEDED], strict=True):
        row = queue.get_job(job.id)
        assert row is not None and row.status is status


def test_run_with_nothing_queued_returns_on_close_without_connecting(database_url: str) -> None:
    connect = Connector(database_url)
    on_recorded = Calls()
    recorder = OutcomeRecorder(connect, on_recorded)

    async def body() -> None:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(recorder.run)
                await anyio.sleep(0.01)
                recorder.close()

    _run(body)
    assert connect.calls == 0 and on_recorded.calls == []


def test_flush_interval_batches_what_arrives_meanwhile(
    database_url: str, queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    jobs = _claim(queue, 3)
    on_recorded = Calls()
    recorder = OutcomeRecorder(Connector(database_url), on_recorded, flush_interval=0.3)

    async def body() -> None:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(recorder.run)
                recorder.add(_success(jobs[0], "0"))
                await anyio.sleep(0.02)
                recorder.add(_success(jobs[1], "1"))
                recorder.add(_success(jobs[2], "2"))
                await on_recorded.event.wait()
                recorder.close()

    _run(body)
    assert len(on_recorded.calls) == 1 and len(on_recorded.calls[0]) == 3
    assert len(_xmins(conn, [job.id for job in jobs])) == 1
    assert {j.id for j in queue.list_jobs(status="succeeded")} == {job.id for job in jobs}


def test_run_reconnects_after_the_server_cut_its_connection(
    database_url: str, queue: Queue, conn: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, success, failure = _claim(queue, 3)
    connect = Connector(database_url)
    on_recorded = Calls()
    pids: list[int] = []
    recorder = OutcomeRecorder(connect, on_recorded, on_connected=pids.append, name="rec-test")

    async def body() -> None:
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(recorder.run)
                recorder.add(_success(first, "1"))
                await on_recorded.event.wait()
                on_recorded.event = anyio.Event()
                assert len(pids) == 1
                row = conn.execute("SELECT pg_terminate_backend(%s)", (pids[0],)).fetchone()
                assert row == (True,)
                recorder.add(_success(success, "2"))
                recorder.add(_failure(failure, None))
                while len(on_recorded.flat) < 3:
                    await on_recorded.event.wait()
                    on_recorded.event = anyio.Event()
                recorder.close()

    with caplog.at_level(logging.WARNING, logger="workhorse.worker"):
        _run(body)
    assert connect.calls == 2 and len(pids) == 2 and pids[0] != pids[1]
    assert [c.closed for c in connect.connections] == [True, True]
    assert pids == connect.pids
    assert [status for _, status in on_recorded.flat] == [
        JobStatus.SUCCEEDED, JobStatus.SUCCEEDED, JobStatus.FAILED]
    assert any("rec-test: recording outcomes failed" in r.getMessage() for r in caplog.records)
    for job, status in ((first, JobStatus.SUCCEEDED), (success, JobStatus.SUCCEEDED),
                        (failure, JobStatus.FAILED)):
        row = queue.get_job(job.id)
        assert row is not None and row.status is status
    row = queue.get_job(success.id)
    assert row is not None and row.result == 2


def test_run_retries_a_failed_connect(database_url: str, queue: Queue) -> None:
    [job] = _claim(queue, 1)
    connect = Connector(database_url, bad=1)  # the first connect names a missing database
    on_recorded = Calls()
    pids: list[int] = []
    recorder = OutcomeRecorder(connect, on_recorded, on_connected=pids.append)

    async def body() -> None:
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(recorder.run)
                recorder.add(_success(job, "7"))
                recorder.close()

    _run(body)
    assert connect.calls == 2 and len(connect.connections) == 1
    assert pids == connect.pids
    assert on_recorded.flat[0][1] is JobStatus.SUCCEEDED
    row = queue.get_job(job.id)
    assert row is not None and row.status is JobStatus.SUCCEEDED and row.result == 7


def test_a_statement_cancelled_by_the_server_is_retried_on_a_new_connection(
    database_url: str, queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    [job] = _claim(queue, 1)
    connect = Connector(database_url)
    on_recorded = Calls()
    recorder = OutcomeRecorder(connect, on_recorded)

    async def body() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as locker:
            # Lock the job's row: the recorder's complete waits for it, and is cancelled there.
            await locker.execute("BEGIN")
            await locker.execute("SELECT 1 FROM workhorse.jobs WHERE id = %s FOR UPDATE",
                                 (job.id,))
            with anyio.fail_after(15):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(recorder.run)
                    recorder.add(_success(job, "9"))
                    while not connect.pids or conn.execute(
                        "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
                        (connect.pids[0],),
                    ).fetchone() != (1,):
                        await anyio.sleep(0.01)
                    row = conn.execute("SELECT pg_cancel_backend(%s)", (connect.pids[0],))
                    assert row.fetchone() == (True,)
                    await locker.execute("COMMIT")
                    await on_recorded.event.wait()
                    recorder.close()

    _run(body)
    # The cancel left the first connection usable, but the retry ran on a new one.
    assert connect.calls == 2 and [c.closed for c in connect.connections] == [True, True]
    assert on_recorded.calls == [[(on_recorded.flat[0][0], JobStatus.SUCCEEDED)]]
    row = queue.get_job(job.id)
    assert row is not None and row.status is JobStatus.SUCCEEDED and row.result == 9
