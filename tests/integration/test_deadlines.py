"""Deadlines (issue #43, docs/design.md "Deadlines") on a real PostgreSQL: `expires=` (not
started by then: `expired`, never run) and `deadline=` (no attempt starts after it), on every
admission path (ungoverned, governed, per-key, fair), for a first start, a retry and a lease
that ran out; housekeeping ends them in queues no worker claims; health counts them; a
dependent of an expired job is canceled; the queue's level is raised so that a 0.2.0 claim
admits nothing there. Bad bounds raise InvalidOptionsError and write nothing.

The checker (`assert_no_late_start`): every job that started did so before the bound it had
when it started (its expiry before its first start, its deadline after), from the rows'
`started_at` (the database clock the claim stamps). Shown to fail on a copy of the claim
without its deadline clauses (`test_the_checker_fails_on_a_claim_that_ignores_deadlines`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from _integration import count

from workhorse import (
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    JobStatus,
    Queue,
    _ops,
    _sql,
)

EMPTY: dict[str, Any] = {"args": [], "kwargs": {}}
CLAIM = _sql.function_name("claim")
POLICIES = {
    "ungoverned": None,
    "governed": ConcurrencyPolicyDefinition("dl", max_active=50),
    "per-key": ConcurrencyPolicyDefinition("dl", max_active=50, max_active_per_key=20),
    "fair": ConcurrencyPolicyDefinition("dl", max_active=50, fairness="key"),
}


def assert_no_late_start(conn: psycopg.Connection[Any], bounds: dict[int, datetime]) -> None:
    """No job of `bounds` (id -> the moment it had to start by) started at or after it."""
    late = [(job_id, started, bounds[job_id]) for job_id, started in conn.execute(
        "SELECT id, started_at FROM workhorse.jobs WHERE id = ANY(%s) AND started_at IS NOT NULL",
        (list(bounds),)).fetchall() if started >= bounds[job_id]]
    assert not late, f"started at or after their bound: {late}"


def _enqueue(queue: Queue, **options: Any) -> int:
    return queue.enqueue("t", EMPTY, EnqueueOptions(queue="dl", concurrency_key="k", **options))


def _claim(queue: Queue, n: int = 10, lease: float = 30) -> list[int]:
    return [job.id for job in queue.claim("dl", n, lease)]


@pytest.mark.parametrize("path", list(POLICIES))
def test_a_job_past_its_bound_ends_expired_and_never_starts(conn: Any, queue: Queue,
                                                            path: str) -> None:
    if POLICIES[path] is not None:
        queue.sync_concurrency_policies("dl", [POLICIES[path]])  # type: ignore[list-item]
    soon = datetime.now(UTC) + timedelta(seconds=0.3)
    late = [_enqueue(queue, expires=0.3), _enqueue(queue, deadline=soon),
            _enqueue(queue, expires="1h", deadline=soon)]
    fine = [_enqueue(queue, expires="1h"), _enqueue(queue, deadline=timedelta(hours=1)),
            _enqueue(queue)]
    bounds = {job.id: job.start_by for job in queue.list_jobs(queue="dl") if job.start_by}
    assert set(bounds) == set(late) | set(fine[:2])
    time.sleep(0.4)
    assert sorted(_claim(queue)) == sorted(fine)
    assert_no_late_start(conn, bounds)
    jobs = {job.id: job for job in queue.list_jobs(queue="dl")}
    assert {jobs[i].status for i in late} == {JobStatus.EXPIRED}
    assert all(jobs[i].error["type"] == "Expired" and jobs[i].started_at is None  # type: ignore[index]
               for i in late)
    assert "deadline" in jobs[late[1]].error["message"]  # type: ignore[index]
    assert "expiry" in jobs[late[0]].error["message"]  # type: ignore[index]
    # Once started, a job's bound is its deadline (the expiry no longer applies).
    assert jobs[fine[0]].start_by is None and jobs[fine[1]].start_by == jobs[fine[1]].deadline
    assert queue.health().depth["expired"] == 3
    level = conn.execute("SELECT feature_level FROM workhorse.queue_levels WHERE queue = 'dl'"
                         ).fetchone()
    assert level is not None and level[0] == 2  # a 0.2.0 claim admits nothing here


def test_a_retry_or_a_lost_lease_past_the_deadline_ends_expired(conn: Any, queue: Queue) -> None:
    retried = _enqueue(queue, deadline=timedelta(seconds=0.5), expires=0.1)
    lost = _enqueue(queue, deadline=timedelta(seconds=0.5))
    first = {job.id: job for job in queue.claim("dl", 10, 0.2)}
    assert set(first) == {retried, lost}
    queue.fail(retried, first[retried].fence, {"type": "E", "message": "m", "traceback": None},
               retry_at=datetime.now(UTC) + timedelta(seconds=0.1))
    time.sleep(0.2)  # past the expiry: the retry may still start (it started once)
    again = _claim(queue, lease=0.2)  # the retry, and the lost lease's job again
    assert retried in again
    time.sleep(0.6)  # past the deadline, and every lease ran out
    assert _claim(queue) == []
    jobs = {job.id: job for job in queue.list_jobs(queue="dl")}
    assert {jobs[retried].status, jobs[lost].status} == {JobStatus.EXPIRED}
    attempts = _ops.execute(conn, _ops.job_attempts(lost))
    assert attempts is not None and attempts[-1].outcome == "lost"


def test_housekeeping_ends_them_where_no_worker_claims(conn: Any, queue: Queue) -> None:
    job = _enqueue(queue, expires=0.1)
    time.sleep(0.2)
    _ops.execute(conn, _ops.housekeeping())
    got = queue.get_job(job)
    assert got is not None and got.status is JobStatus.EXPIRED
    # Result waiters poll for resting jobs: an expired one is resting, or `get()` would wait
    # out its whole timeout (for ever without one).
    assert _ops.execute(conn, _ops.resting_jobs([job])) == {job}


def test_a_dependent_of_an_expired_job_is_canceled(conn: Any, queue: Queue) -> None:
    parent = _enqueue(queue, expires=0.1)
    [child] = queue.enqueue_many([("t", EMPTY, EnqueueOptions(queue="dl2",
                                                               depends_on=[parent]))])
    time.sleep(0.2)
    assert _claim(queue) == []
    got = queue.get_job(child)
    assert got is not None and got.status is JobStatus.CANCELED
    assert got.error is not None and got.error["type"] == "DependencyFailedError"


@pytest.mark.parametrize("bad", [
    {"expires": -1}, {"expires": "5"}, {"expires": True}, {"expires": datetime(2030, 1, 1)},
    {"deadline": "soon"}, {"deadline": float("nan")}, {"deadline": [1]},
    {"expires": 10**12},
])
def test_bad_bounds_raise_and_write_nothing(conn: Any, queue: Queue, bad: dict[str, Any]
                                            ) -> None:
    before = count(conn)
    with pytest.raises(InvalidOptionsError):
        queue.enqueue("t", EMPTY, EnqueueOptions(queue="dl", **bad))
    with pytest.raises(InvalidOptionsError):
        queue.enqueue_many([("t", EMPTY, EnqueueOptions(queue="dl", expires=1,
                                                         depends_on=[1]))])
    assert count(conn) == before


def test_the_checker_fails_on_a_claim_that_ignores_deadlines(conn: Any, queue: Queue) -> None:
    """A copy of the claim without its sweep and its activation's guard starts a job past its
    bound, and the checker says so."""
    text = _sql.function_files()[CLAIM]
    broken = text.replace(f"workhorse.{CLAIM}(", "workhorse.claim_no_deadlines(", 1)
    for clause, replacement in {
        "IF v_past_deadline AND": "IF false AND",
        "              AND (j.start_by IS NULL OR j.start_by > v_start)": "",
    }.items():
        assert broken.count(clause) == 1, clause
        broken = broken.replace(clause, replacement)
    conn.execute(broken)
    job = _enqueue(queue, expires=0.1)
    bounds = {job: queue.get_job(job).start_by}  # type: ignore[union-attr]
    time.sleep(0.2)
    rows = conn.execute("SELECT id FROM workhorse.claim_no_deadlines('dl', 10, 30, NULL, NULL, "
                        "NULL, NULL, NULL)").fetchall()
    assert [row[0] for row in rows if row[0] is not None] == [job]
    with pytest.raises(AssertionError, match="started at or after"):
        assert_no_late_start(conn, bounds)  # type: ignore[arg-type]
