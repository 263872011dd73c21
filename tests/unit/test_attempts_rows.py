"""Reading attempt_history rows into Attempts (no database): timestamps as the trigger writes
them, entries of a shape this version does not know, and the success taken from the row."""

from __future__ import annotations

from datetime import UTC, datetime

from workhorse import Attempt, Job, JobStatus
from workhorse._ops import attempts_from, job_own_error

AT = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)
BOOM = {"type": "Boom", "message": "no", "traceback": None}


def _job(status: JobStatus, error: dict | None) -> Job:
    return Job(id=1, task="t", queue="q", concurrency_key=None, priority=0, payload={},
               status=status, attempts=2, max_attempts=3, result=None, error=error, run_at=AT,
               enqueued_at=AT, started_at=AT, finished_at=AT)


def test_entries_and_the_success_from_the_row():
    history = [{"attempt": 1, "started_at": "2026-12-02T05:00:00.5+00:00",
                "ended_at": "2026-12-02T05:00:01+00:00", "outcome": "retried", "error": BOOM}]
    found = attempts_from(history, "succeeded", 2, AT, AT)
    assert found == [
        Attempt(1, datetime(2026, 12, 2, 5, 0, 0, 500000, tzinfo=UTC),
                datetime(2026, 12, 2, 5, 0, 1, tzinfo=UTC), "retried", BOOM),
        Attempt(2, AT, AT, "succeeded", None)]
    assert attempts_from(None, "ready", 0, None, None) == []


def test_an_entry_of_an_unknown_shape_is_shown_as_far_as_it_goes():
    found = attempts_from([{"outcome": "evicted", "started_at": "not a time"}, 7], "failed",
                          1, AT, AT)
    assert found == [Attempt(0, None, None, "evicted", None)]


def test_the_last_failure_is_the_job_s_own_only_while_it_rests_because_of_it():
    failed = Attempt(1, AT, AT, "failed", BOOM)
    assert job_own_error(_job(JobStatus.FAILED, BOOM), [failed]) == BOOM
    assert job_own_error(_job(JobStatus.HELD, BOOM), [failed]) == BOOM
    assert job_own_error(_job(JobStatus.SUCCEEDED, BOOM), [failed]) is None
    assert job_own_error(_job(JobStatus.SCHEDULED, BOOM), [failed]) is None
    canceled = Attempt(2, AT, AT, "canceled", None)
    assert job_own_error(_job(JobStatus.CANCELED, BOOM), [failed, canceled]) is None
    assert job_own_error(_job(JobStatus.CANCELED, BOOM), [Attempt(1, AT, AT, "canceled", BOOM)]
                         ) == BOOM


def test_eager_jobs_have_their_last_attempt():
    from workhorse import App
    from workhorse.testing import eager

    app = App("eager", database_url="postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")

    @app.task(name="ok")
    def ok() -> int:
        return 1

    @app.task(name="bad", max_attempts=1)
    def bad() -> None:
        raise ValueError("no")

    with eager(app):
        good = ok.delay()
        failing = bad.delay()
        assert [(a.attempt, a.outcome) for a in good.attempts()] == [(1, "succeeded")]
        [last] = failing.attempts()
        assert last.outcome == "failed" and last.error is not None
        assert last.error["type"] == "ValueError"
