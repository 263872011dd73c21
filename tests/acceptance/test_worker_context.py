"""The running job in a real worker: current_job() in sync and async handlers, a sync timeout
on a serial queue that holds its place until the thread returns, Snooze, and the log lines."""

from __future__ import annotations

import json

import pytest
from apps import context
from apps.harness import Worker, scalar, wait_for

from workhorse import JobStatus, Queue

pytestmark = pytest.mark.slow

OPTIONS = ["--slots", "2", "--concurrency", "4", "--dequeue-timeout", "5s"]


@pytest.fixture(autouse=True)
def _app_on_the_test_database(database_url):
    context.app.database_url = database_url  # handles wait for results there
    yield
    context.app.close()


def _worker(database_url, tmp_path, *extra: str) -> Worker:
    return Worker(database_url, "apps.context:app", tmp_path / "w.log", *OPTIONS, *extra,
                  env={"CONTEXT_TRACE": str(tmp_path / "trace")})


def _all_done(conn, n: int) -> bool:
    return scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status IN "
                        "('succeeded', 'failed', 'held', 'canceled')") == n


def test_handlers_see_their_job(database_url, conn, tmp_path):
    with context.app.using(conn):
        handles = [context.whoami_sync.apply_async(args=(1,), concurrency_key="t1"),
                   context.whoami_async.delay(2)]
    worker = _worker(database_url, tmp_path)
    try:
        results = [h.get(timeout=30) for h in handles]
    finally:
        assert worker.stop() == 0, worker.output()
    assert results[0] == {"id": handles[0].id, "task": context.whoami_sync.name,
                          "queue": "context", "key": "t1", "attempt": 1, "max_attempts": 2,
                          "cancel_requested": False, "x": 1}
    assert results[1]["id"] == handles[1].id and results[1]["key"] is None


def test_a_sync_timeout_holds_its_place_until_the_thread_returns(database_url, conn, tmp_path):
    Queue(conn).sync_concurrency_policies(context.app.name, context.app.policy_definitions())
    with context.app.using(conn):
        handles = [context.overrun.delay(f"t{i}") for i in range(3)]
    worker = _worker(database_url, tmp_path)
    try:
        wait_for(lambda: _all_done(conn, 3), 30, "3 jobs to end", worker)
    finally:
        assert worker.stop() == 0, worker.output()
    for handle in handles:
        job = handle.job()
        assert job is not None and job.status is JobStatus.FAILED, job
        assert job.error is not None and job.error["type"] == "JobTimeoutError", job.error
        assert job.result is None
    assert _peak(tmp_path / "trace") == 1  # limit 1: the next start waited for the thread


def test_a_sync_timeout_with_a_retry_left_retries_only_after_the_thread_returns(
    database_url, conn, tmp_path
):
    """A 1 s lease and a 2.2 s overrun of a 0.2 s timeout, with a retry left: the lease is
    renewed while the thread runs on (no other slot reclaims the job), and the retry starts
    only once the thread has returned."""
    Queue(conn).sync_concurrency_policies(context.app.name, context.app.policy_definitions())
    with context.app.using(conn):
        handle = context.overrun_retried.delay("r")
    worker = _worker(database_url, tmp_path)
    try:
        wait_for(lambda: _all_done(conn, 1), 30, "the job to end", worker)
    finally:
        assert worker.stop() == 0, worker.output()
    job = handle.job()
    assert job is not None and job.status is JobStatus.FAILED and job.attempts == 2, job
    assert job.error is not None and job.error["type"] == "JobTimeoutError", job.error
    lines = (tmp_path / "trace").read_text().split()
    assert [w for w in lines if w.startswith("r.")] == ["r.1", "r.1", "r.2", "r.2"], lines
    assert _peak(tmp_path / "trace") == 1
    assert "lost its lease" not in worker.output()


def _peak(trace) -> int:
    """The most handlers running at once, from the trace's start and end lines."""
    events = sorted((float(at), kind, token) for kind, token, at in
                    (line.split() for line in trace.read_text().splitlines()))
    running = peak = 0
    for _, kind, _ in events:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    return peak


def test_a_snoozed_job_comes_back_without_using_an_attempt(database_url, conn, tmp_path):
    with context.app.using(conn):
        handle = context.snoozer.delay("s1")
    worker = _worker(database_url, tmp_path)
    try:
        assert handle.get(timeout=30) == "s1"
    finally:
        assert worker.stop() == 0, worker.output()
    job = handle.job()
    assert job is not None and job.attempts == 1  # two claims, one given back by the snooze


def test_one_json_log_line_per_finished_job(database_url, conn, tmp_path):
    with context.app.using(conn):
        ok = context.whoami_sync.delay(3)
        bad = context.broken.delay("b")
    worker = _worker(database_url, tmp_path, "--log-format", "json")
    try:
        wait_for(lambda: _all_done(conn, 2), 30, "2 jobs to end", worker)
    finally:
        assert worker.stop() == 0, worker.output()
    lines = [json.loads(line) for line in worker.output().splitlines() if line.startswith("{")]
    jobs = [line for line in lines if "outcome" in line]
    by_id: dict[int, list[str]] = {}
    for line in jobs:
        assert set(line) >= {"task", "id", "queue", "outcome", "attempt", "duration_s"}, line
        by_id.setdefault(line["id"], []).append(line["outcome"])
    assert by_id == {ok.id: ["succeeded"], bad.id: ["retried", "failed"]}, jobs


def test_text_log_lines_name_the_job(database_url, conn, tmp_path):
    with context.app.using(conn):
        ok = context.whoami_sync.delay(4)
    worker = _worker(database_url, tmp_path)
    try:
        ok.get(timeout=30)
    finally:
        assert worker.stop() == 0, worker.output()
    [line] = [line for line in worker.output().splitlines() if f"id={ok.id} " in line]
    assert "succeeded" in line and "queue=context" in line and "attempt=1" in line, line
    assert f"{context.whoami_sync.name} id={ok.id} " in line and " duration=" in line, line


def test_log_level_warning_writes_no_job_lines(database_url, conn, tmp_path):
    with context.app.using(conn):
        ok = context.whoami_sync.delay(5)
    worker = _worker(database_url, tmp_path, "--log-level", "warning")
    try:
        ok.get(timeout=30)
    finally:
        assert worker.stop() == 0, worker.output()
    assert f"id={ok.id} " not in worker.output(), worker.output()
