"""Attempt history (docs/design.md "The dashboard in an incident"): `JobHandle.attempts()` lists
every way an attempt ended (retried, failed, held, Snooze, a cancel of a running job, a timeout, a
lease lost to a reclaim or to the sweep), keeps the last 20 that did not succeed, and a first-try
success writes nothing more (the trigger is never called, the column stays NULL).

Each checker here is also run against a broken variant (the trigger dropped, or fired for
every update) and shown to fail."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from workhorse import App, Attempt, EnqueueOptions, Queue, _ops, _sql

LEASE = 30.0
# The trigger's function, by its newest version (Python never spells one).
RECORD = f"workhorse.{_sql.function_name('_record_attempt')}"
BOOM = {"type": "Boom", "message": "it broke", "traceback": "Traceback (most recent call last)"}


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    application = App("shop", database_url=database_url)
    yield application
    application.close()


def _past() -> datetime:
    return datetime.now(UTC) - timedelta(seconds=1)


def _outcomes(app: App, job_id: int) -> list[tuple[int, str, str | None]]:
    return [(a.attempt, a.outcome, a.error["type"] if a.error else None)
            for a in app.handle(job_id).attempts()]


def _one(queue: Queue, name: str = "q") -> Any:
    [claimed] = queue.claim(name, 1, LEASE)
    return claimed


def _drop_trigger(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP TRIGGER jobs_attempt_ended ON workhorse.jobs")


def _trigger_for_every_update(conn: psycopg.Connection[Any]) -> None:
    """The broken variant of the WHEN clause: called for every update of a job."""
    _drop_trigger(conn)
    conn.execute("CREATE TRIGGER jobs_attempt_ended AFTER UPDATE ON workhorse.jobs"
                 f" FOR EACH ROW EXECUTE FUNCTION {RECORD}()")


def _before_trigger(conn: psycopg.Connection[Any]) -> None:
    """The broken variant of the timing: a BEFORE row trigger (with the same WHEN clause), which
    locks every row an UPDATE of jobs touches before it checks the clause. A no-op function:
    what it costs is the lock, not the body."""
    _drop_trigger(conn)
    conn.execute("CREATE FUNCTION workhorse.noop_trigger() RETURNS trigger LANGUAGE plpgsql"
                 " AS $$ BEGIN RETURN NEW; END $$")
    conn.execute("CREATE TRIGGER jobs_attempt_ended BEFORE UPDATE ON workhorse.jobs FOR EACH ROW"
                 " WHEN (OLD.status = 'active' AND (NEW.status NOT IN ('active', 'succeeded',"
                 " 'ready') OR NEW.fence IS DISTINCT FROM OLD.fence))"
                 " EXECUTE FUNCTION workhorse.noop_trigger()")


# ---- the scenarios, each a checker -------------------------------------------------------------


def failed_then_succeeded(queue: Queue, app: App) -> None:
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    first = _one(queue)
    queue.fail(first.id, first.fence, BOOM, retry_at=_past())
    second = _one(queue)
    queue.complete(second.id, second.fence, {"ok": True})
    attempts = app.handle(job_id).attempts()
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "retried"), (2, "succeeded")]
    assert attempts[0].error == BOOM and attempts[1].error is None
    assert all(isinstance(a, Attempt) for a in attempts)
    started, ended = attempts[0].started_at, attempts[0].ended_at
    assert started is not None and ended is not None and started <= ended
    assert attempts[1].started_at is not None and attempts[1].started_at >= ended
    job = queue.get_job(job_id)
    assert job is not None and job.status == "succeeded"
    assert job.error == BOOM  # Job.error keeps its meaning: the last failure
    assert _ops.job_own_error(job, attempts) is None  # but it is not shown as the job's own


def lost_to_a_real_lease_expiry(queue: Queue, app: App) -> None:
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    assert len(queue.claim("q", 1, 0.3)) == 1
    time.sleep(0.8)  # the lease really runs out: the worker that held it is gone
    second = _one(queue)
    assert second.id == job_id and second.attempts == 2
    queue.complete(second.id, second.fence, None)
    attempts = app.handle(job_id).attempts()
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lost"), (2, "succeeded")]
    assert attempts[0].error is not None and attempts[0].error["type"] == "LeaseExpired"
    assert attempts[0].ended_at is not None and attempts[0].ended_at <= attempts[1].started_at


def first_try_success_calls_nothing(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    with conn.transaction():
        conn.execute("SET LOCAL track_functions = 'pl'")
        claimed = _one(queue)
        queue.heartbeat([(claimed.id, claimed.fence, LEASE)])
        queue.complete(claimed.id, claimed.fence, {"ok": True})
        row = conn.execute("SELECT pg_stat_get_xact_function_calls(%s::regprocedure)",
                           (f"{RECORD}()",)).fetchone()
    assert row is not None and not row[0], f"the trigger ran {row[0]} time(s)"
    stored = conn.execute("SELECT attempt_history FROM workhorse.jobs WHERE id = %s",
                          (job_id,)).fetchone()
    assert stored == (None,)


def _wal_records(conn: psycopg.Connection[Any], statement: str, *params: Any) -> int:
    """WAL records one statement of this session wrote (EXPLAIN ANALYZE's own count: other
    sessions' writes are not in it)."""
    row = conn.execute(f"EXPLAIN (ANALYZE, WAL, FORMAT JSON) {statement}", params).fetchone()
    assert row is not None
    return int(row[0][0]["Plan"].get("WAL Records", 0))


# The writes of a first-try success, as the claim, a heartbeat and the completion make them.
FIRST_TRY = (
    "UPDATE workhorse.jobs SET status = 'active', attempts = attempts + 1,"
    " fence = nextval('workhorse.fence_seq'), started_at = clock_timestamp(),"
    " lease_until = clock_timestamp() + interval '30 s' WHERE id = %s",
    "UPDATE workhorse.jobs SET lease_until = clock_timestamp() + interval '30 s' WHERE id = %s",
    "UPDATE workhorse.jobs SET status = 'succeeded', result = '1', finished_at = clock_timestamp(),"
    " lease_until = NULL WHERE id = %s",
)


def _least_wal(queue: Queue, conn: psycopg.Connection[Any]) -> list[int]:
    """Each statement's WAL records, the least of two jobs' readings: a reading may include a
    record that is not the statement's own doing (a page's first touch since the checkpoint,
    or `nextval` logging the fence sequence ahead, which it does once every 32 values: seen as
    [4, 3, 2] against [3, 3, 2]), and never on both jobs; a trigger's records are on both."""
    readings = []
    for _ in range(2):
        job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
        readings.append([_wal_records(conn, statement, job_id) for statement in FIRST_TRY])
    return [min(pair) for pair in zip(*readings, strict=True)]


def first_try_success_writes_no_more_wal(queue: Queue, conn: psycopg.Connection[Any],
                                         baseline: list[int]) -> None:
    records = _least_wal(queue, conn)
    assert records == baseline, f"WAL records {records}, without the trigger {baseline}"


def _baseline(queue: Queue, conn: psycopg.Connection[Any]) -> list[int]:
    """The same writes' WAL records with no trigger on the table (as 0.2.0 wrote them),
    measured as `_least_wal` does."""
    conn.execute("ALTER TABLE workhorse.jobs DISABLE TRIGGER jobs_attempt_ended")
    try:
        return _least_wal(queue, conn)
    finally:
        conn.execute("ALTER TABLE workhorse.jobs ENABLE TRIGGER jobs_attempt_ended")


# ---- the tests ---------------------------------------------------------------------------------


def test_a_job_that_failed_then_succeeded_shows_both_attempts(queue, app):
    failed_then_succeeded(queue, app)


def test_a_lease_that_really_expired_is_a_lost_attempt(queue, app):
    lost_to_a_real_lease_expiry(queue, app)


def test_a_first_try_success_writes_nothing_more(queue, conn):
    first_try_success_calls_nothing(queue, conn)


def test_a_first_try_success_writes_no_more_wal_than_without_the_trigger(queue, conn):
    baseline = _baseline(queue, conn)
    first_try_success_writes_no_more_wal(queue, conn, baseline)


def test_the_wal_checker_fails_on_a_before_trigger(queue, conn):
    baseline = _baseline(queue, conn)
    _before_trigger(conn)
    with pytest.raises(AssertionError):
        first_try_success_writes_no_more_wal(queue, conn, baseline)


def test_the_counter_sees_a_failure_call_the_trigger(queue, conn):
    """The counting of first_try_success_calls_nothing works: a failure is one call."""
    queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    with conn.transaction():
        conn.execute("SET LOCAL track_functions = 'pl'")
        claimed = _one(queue)
        queue.fail(claimed.id, claimed.fence, BOOM)
        row = conn.execute("SELECT pg_stat_get_xact_function_calls(%s::regprocedure)",
                           (f"{RECORD}()",)).fetchone()
    assert row == (1,)


@pytest.mark.parametrize(("scenario", "break_it"), [
    ("failed_then_succeeded", _drop_trigger),
    ("lost_to_a_real_lease_expiry", _drop_trigger),
    ("first_try_success_calls_nothing", _trigger_for_every_update),
])
def test_each_checker_fails_on_a_broken_variant(queue, app, conn, scenario, break_it):
    break_it(conn)
    run: Callable[..., None] = globals()[scenario]
    with pytest.raises(AssertionError):
        run(queue, conn) if scenario == "first_try_success_calls_nothing" else run(queue, app)


# ---- every way an attempt ends -----------------------------------------------------------------


def test_a_failure_that_ends_the_job_is_failed_and_held_too(queue, app):
    failed = queue.enqueue("t", {}, EnqueueOptions(queue="q", max_attempts=1))
    claimed = _one(queue)
    queue.fail(claimed.id, claimed.fence, BOOM, retry_at=_past())  # no attempts left
    held = queue.enqueue("t", {}, EnqueueOptions(queue="q", max_attempts=1))
    queue.conn.execute("UPDATE workhorse.jobs SET on_failure = 'hold' WHERE id = %s", (held,))
    claimed = _one(queue)
    queue.fail(claimed.id, claimed.fence, BOOM)
    assert _outcomes(app, failed) == [(1, "failed", "Boom")]
    assert _outcomes(app, held) == [(1, "failed", "Boom")]
    job = queue.get_job(held)
    assert job is not None and job.status == "held"
    assert _ops.job_own_error(job, app.handle(held).attempts()) == BOOM


def test_a_snooze_gives_the_attempt_back_and_is_recorded(queue, app, conn):
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    claimed = _one(queue)
    _ops.execute(queue.conn, _ops.snooze(claimed.id, claimed.fence, 0.0))
    again = _one(queue)
    assert again.attempts == 1
    queue.complete(again.id, again.fence, None)
    assert _outcomes(app, job_id) == [(1, "snoozed", None), (1, "succeeded", None)]


def test_a_cancel_of_a_running_job_is_recorded_however_it_stops(queue, app):
    by_success = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    claimed = _one(queue)
    queue.cancel_jobs([by_success])
    queue.complete(claimed.id, claimed.fence, None)  # its handler returned anyway
    by_failure = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    claimed = _one(queue)
    queue.cancel_jobs([by_failure])
    stopped = {"type": "CancelledError", "message": "", "traceback": None}
    queue.fail(claimed.id, claimed.fence, stopped)
    by_snooze = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    claimed = _one(queue)
    queue.cancel_jobs([by_snooze])
    _ops.execute(queue.conn, _ops.snooze(claimed.id, claimed.fence, 5.0))
    assert _outcomes(app, by_success) == [(1, "canceled", None)]
    assert _outcomes(app, by_failure) == [(1, "canceled", "CancelledError")]
    assert _outcomes(app, by_snooze) == [(1, "canceled", None)]
    # A job canceled before it ran had no attempt.
    waiting = queue.enqueue("t", {}, EnqueueOptions(queue="q", delay=3600))
    queue.cancel_jobs([waiting])
    assert _outcomes(app, waiting) == []


def test_a_job_released_unstarted_had_no_attempt(queue, app):
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    claimed = _one(queue)
    _ops.execute(queue.conn, _ops.release([(claimed.id, claimed.fence)]))
    again = _one(queue)
    queue.complete(again.id, again.fence, None)
    assert _outcomes(app, job_id) == [(1, "succeeded", None)]


def test_an_expired_lease_with_no_attempts_left_is_swept_as_lost(queue, app, conn):
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q", max_attempts=1))
    queue.claim("q", 1, 0.2)
    time.sleep(0.6)
    assert queue.claim("q", 1, LEASE) == []  # the claim's sweep ends it: no attempts left
    job = queue.get_job(job_id)
    assert job is not None and job.status == "failed"
    assert _outcomes(app, job_id) == [(1, "lost", "LeaseExpired")]


def test_at_most_the_last_20_attempts_are_kept(queue, app):
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q", max_attempts=30))
    for n in range(1, 26):
        claimed = _one(queue)
        error = dict(BOOM, message=f"failure {n}")
        queue.fail(claimed.id, claimed.fence, error, retry_at=_past() if n < 25 else None)
    attempts = app.handle(job_id).attempts()
    assert [a.attempt for a in attempts] == list(range(6, 26))
    assert [a.outcome for a in attempts] == ["retried"] * 19 + ["failed"]
    assert attempts[-1].error is not None and attempts[-1].error["message"] == "failure 25"


def test_an_operator_retry_keeps_the_history(queue, app):
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q", max_attempts=1))
    claimed = _one(queue)
    queue.fail(claimed.id, claimed.fence, BOOM)
    queue.retry_jobs([job_id])
    again = _one(queue)
    queue.complete(again.id, again.fence, None)
    assert _outcomes(app, job_id) == [(1, "failed", "Boom"), (1, "succeeded", None)]


def test_retry_snooze_and_timeout_through_the_real_executor(database_url):
    from workhorse import Retry, Snooze, current_job
    from workhorse.testing import drain

    app = App("shop", database_url=database_url)
    seen: list[int] = []

    @app.task(queue="q", max_attempts=3)
    def flaky() -> str:
        seen.append(current_job().attempt)
        if len(seen) == 1:
            raise Snooze(0.01)
        if len(seen) == 2:
            raise Retry(delay=0.01)
        return "done"

    @app.task(queue="q", max_attempts=1, timeout="0.2s")
    async def slow() -> None:
        import asyncio

        await asyncio.sleep(5)

    try:
        first, second = flaky.delay(), slow.delay()
        drain(app, with_scheduled=True)
        assert _outcomes(app, first.id) == [
            (1, "snoozed", None), (1, "retried", "Retry"), (2, "succeeded", None)]
        assert _outcomes(app, second.id) == [(1, "failed", "JobTimeoutError")]
    finally:
        app.close()


def test_an_unknown_job_has_no_attempts(app):
    from workhorse import JobNotFoundError

    with pytest.raises(JobNotFoundError):
        app.handle(10**9).attempts()


# ---- what the operator sees --------------------------------------------------------------------


def _failed_then_succeeded_job(queue: Queue) -> int:
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    first = _one(queue)
    queue.fail(first.id, first.fence, BOOM, retry_at=_past())
    second = _one(queue)
    queue.complete(second.id, second.fence, {"ok": True})
    return job_id


def shows_attempts_not_an_own_error(queue: Queue, database_url: str) -> None:
    import json

    from test_cli import cli

    job_id = _failed_then_succeeded_job(queue)
    shown = cli(database_url, "jobs", "show", str(job_id))
    assert shown.exit_code == 0, shown.output
    assert "attempts" in shown.output and "retried" in shown.output
    assert "succeeded" in shown.output
    history_part = shown.output[shown.output.index("retried"):]
    assert "Boom: it broke" in history_part  # the error, under its attempt
    assert "Traceback (most recent call last)" not in shown.output  # no error block of its own
    as_json = json.loads(cli(database_url, "jobs", "show", str(job_id), "--json").output)
    assert [(a["attempt"], a["outcome"]) for a in as_json["attempt_history"]] == [
        (1, "retried"), (2, "succeeded")]
    assert as_json["attempt_history"][0]["error"] == BOOM
    assert as_json["error"] == BOOM and as_json["attempts"] == 2  # Job's fields as they were

    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from workhorse.dashboard import create_app

    with TestClient(create_app(database_url)) as client:
        page = client.get(f"/jobs/{job_id}").text
    assert 'id="attempts"' in page
    assert 'data-attempt="1" data-outcome="retried"' in page
    assert 'data-attempt="2" data-outcome="succeeded"' in page
    assert 'id="job-error"' not in page and "<h2>Error</h2>" not in page


def test_jobs_show_and_the_job_page_list_attempts_not_an_own_error(queue, database_url):
    shows_attempts_not_an_own_error(queue, database_url)


def test_the_rendering_checker_fails_when_the_error_is_shown_as_the_jobs_own(
        queue, database_url, monkeypatch):
    monkeypatch.setattr(_ops, "job_own_error", lambda job, attempts: job.error)
    with pytest.raises(AssertionError):
        shows_attempts_not_an_own_error(queue, database_url)


def test_a_failed_job_shows_its_error_as_its_own(queue, database_url):
    from test_cli import cli

    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q", max_attempts=1))
    claimed = _one(queue)
    queue.fail(claimed.id, claimed.fence, BOOM)
    shown = cli(database_url, "jobs", "show", str(job_id))
    assert "Traceback (most recent call last)" in shown.output
