"""Back-pressure in a real worker (`python -m workhorse worker`, one supervisor): a handler that
raises Backoff goes back to ready with its attempt given back and runs again once the backoff
ends; `current_job().backoff()` from a sync and from an async handler backs off the scope while
the job itself succeeds; a Backoff with a scope the job lacks fails the job with
InvalidOptionsError (a refused `current_job().backoff()` only logs). Every time compared is the
database's: each run's `started_at` is its claim's stamp, each backoff's end its row's `until`
(`_backoff_app` logs every backoff row as written, since housekeeping deletes ended ones).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import _backoff_app as bo
import psycopg
import pytest
from _backoff_harness import Supervisor, rows, wait_for

from workhorse import JobStatus, Queue

pytestmark = pytest.mark.slow  # its own worker process: CI's first pass only


def statuses(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, str]:
    return dict(rows(conn, "SELECT id, status FROM workhorse.jobs WHERE id = ANY(%s)", ids))


def runs(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[Any, ...]]:
    """The job's runs: (attempt, started_at, pid), in order."""
    return rows(conn, "SELECT attempt, started_at, pid FROM bo_runs WHERE job_id = %s"
                      " ORDER BY wall", job_id)


def backoffs(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every backoff written: (scope, name, ckey, set_at, until, by_job, retry_after)."""
    return rows(conn, "SELECT scope, name, ckey, set_at, until, by_job, retry_after"
                      " FROM bo_backoffs ORDER BY set_at")


@pytest.fixture
def worker(database_url: str, conn: psycopg.Connection[Any],
           tmp_path: Path) -> Iterator[Supervisor]:
    """One supervisor of the worker app (one slot of 4), its budgets synced, its records'
    tables in place."""
    conn.execute(bo.SCHEMA)
    Queue(conn).sync_budgets(bo.worker_app.name, bo.worker_app.budget_definitions())
    supervisor = Supervisor(database_url, "_backoff_app:worker_app", tmp_path / "worker.log",
                            "--slots", "1", "--concurrency", "4", "--lease", "10s",
                            "--dequeue-timeout", "1s", "--grace", "5s")
    try:
        yield supervisor
    finally:
        code = supervisor.stop()
        assert code == 0, supervisor.output()


def _done(conn: psycopg.Connection[Any], ids: list[int]) -> bool:
    return all(s in ("succeeded", "failed", "held", "canceled")
               for s in statuses(conn, ids).values()) and len(statuses(conn, ids)) == len(ids)


def test_a_raised_backoff_gives_the_attempt_back_and_the_job_runs_after_it(
        conn: psycopg.Connection[Any], worker: Supervisor) -> None:
    with bo.worker_app.using(conn):
        job_id = bo.raise_once.delay("r").id
    wait_for(lambda: _done(conn, [job_id]), 60, "the job to end", worker)
    assert statuses(conn, [job_id]) == {job_id: "succeeded"}
    (scope, name, key, set_at, until, by_job, retry_after), = backoffs(conn)
    assert (scope, name, key, by_job, retry_after) == ("queue", "bo-raise", "", job_id,
                                                       bo.RAISE_AFTER)
    (first_attempt, first, _), (second_attempt, second, _) = runs(conn, job_id)
    # Both runs were the job's first attempt: the backoff gave it back.
    assert (first_attempt, second_attempt) == (1, 1)
    job = Queue(conn).get_job(job_id)
    assert job is not None and job.attempts == 1 and job.error is None
    assert first < set_at and second >= until, (first, set_at, second, until)
    # The worker claimed there again when the backoff ended (the claim said when), not later.
    assert second - until < timedelta(seconds=3), (second, until)
    assert worker.stop() == 0, worker.output()
    output = worker.output()
    assert f"job {job_id} ({bo.raise_once.name}) backed off queue 'bo-raise' until" in output
    # Back-pressure is no failure: the worker's totals (its registry row, its last line) say so.
    assert "stopped: 1 succeeded, 0 failed, 0 retried, 0 held" in output, output[-2000:]


def test_a_sync_handlers_backoff_holds_its_key_while_the_job_succeeds(
        conn: psycopg.Connection[Any], worker: Supervisor) -> None:
    with bo.worker_app.using(conn):
        job_id = bo.backs_off_sync.delay("s", "tenant").id
    wait_for(lambda: _done(conn, [job_id]), 60, "the job to end", worker)
    job = Queue(conn).get_job(job_id)
    assert job is not None and (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
    (scope, name, key, set_at, until, by_job, retry_after), = backoffs(conn)
    assert (scope, name, key, by_job, retry_after) == ("key", "bo-ctx", "tenant", job_id, 2.0)
    assert job.finished_at is not None and set_at <= job.finished_at  # written before its success
    assert "backed off queue 'bo-ctx' key 'tenant' until" in worker.output()

    with bo.worker_app.using(conn):
        same_key = bo.plain_keyed.delay("same", "tenant").id
        other_key = bo.plain_keyed.delay("other", "acme").id
    wait_for(lambda: _done(conn, [same_key, other_key]), 60, "the jobs to end", worker)
    [(_, same_started, _)] = runs(conn, same_key)
    [(_, other_started, _)] = runs(conn, other_key)
    assert same_started >= until, "a backed-off key's job started before the backoff ended"
    assert other_started < until, "another key waited for the backoff"


def test_an_async_handlers_backoff_holds_its_budget_while_the_job_succeeds(
        conn: psycopg.Connection[Any], worker: Supervisor) -> None:
    with bo.worker_app.using(conn):
        job_id = bo.backs_off_async.delay("a").id
    wait_for(lambda: _done(conn, [job_id]), 60, "the job to end", worker)
    job = Queue(conn).get_job(job_id)
    assert job is not None and (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
    (scope, name, key, set_at, until, by_job, retry_after), = backoffs(conn)
    assert (scope, name, key, by_job, retry_after) == ("budget", "bo-api", "", job_id, 2.0)
    assert job.finished_at is not None and set_at <= job.finished_at  # written before its success
    assert "backed off budget 'bo-api' until" in worker.output()

    with bo.worker_app.using(conn):
        same_budget = bo.plain_async.apply_async(args=("same",), budget="bo-api").id
        no_budget = bo.plain_async.delay("none").id
    wait_for(lambda: _done(conn, [same_budget, no_budget]), 60, "the jobs to end", worker)
    [(_, same_started, _)] = runs(conn, same_budget)
    [(_, none_started, _)] = runs(conn, no_budget)
    assert same_started >= until, "a backed-off budget's job started before the backoff ended"
    assert none_started < until, "a job of no budget waited for the budget's backoff"


def test_a_backoff_of_a_scope_the_job_lacks_fails_the_job(
        conn: psycopg.Connection[Any], worker: Supervisor) -> None:
    with bo.worker_app.using(conn):
        raised = bo.raises_a_scope_it_lacks.delay("x").id
        asked = bo.asks_for_a_scope_it_lacks.delay("y").id
    wait_for(lambda: _done(conn, [raised, asked]), 60, "the jobs to end", worker)
    job = Queue(conn).get_job(raised)
    assert job is not None and job.status is JobStatus.FAILED, job
    assert job.error is not None and job.error["type"] == "InvalidOptionsError", job.error
    assert "concurrency key" in job.error["message"]
    assert len(runs(conn, raised)) == 1, "no retry could change the scope: it ran once"
    # current_job().backoff() of a scope it lacks: refused and logged; the job succeeds.
    job = Queue(conn).get_job(asked)
    assert job is not None and job.status is JobStatus.SUCCEEDED, job
    assert backoffs(conn) == []
    wait_for(lambda: "backoff() was refused" in worker.output(), 10, "the refusal's log line",
             worker)
