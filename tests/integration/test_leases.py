"""Invariant 4: leases and fences (complete, fail, heartbeat) on every admission path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _integration import count

from workhorse import (
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    JobStatus,
    PayloadError,
    Queue,
    StaleLeaseError,
)

# Leases are long (no busy machine expires one by accident); a test that needs one to run out
# moves its end into the past in the database (`_expire`), as if the time had passed.
LEASE = 30.0
ERROR = {"type": "Boom", "message": "it broke", "traceback": "Traceback ..."}


def _snapshot(conn: Any, job_id: int) -> tuple[Any, ...]:
    row = conn.execute("SELECT * FROM workhorse.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return tuple(row)


def _expire(conn: Any, job_id: int, seconds_ago: float) -> None:
    """Move a lease's end into the past (as if time had passed), without sleeping."""
    conn.execute(
        "UPDATE workhorse.jobs SET lease_until = clock_timestamp() - make_interval(secs => %s)"
        " WHERE id = %s", (seconds_ago, job_id),
    )


def _age(conn: Any, job_id: int, seconds: float) -> None:
    """Let `seconds` pass for a lease: its end moves that much closer, without sleeping."""
    conn.execute(
        "UPDATE workhorse.jobs SET lease_until = lease_until - make_interval(secs => %s)"
        " WHERE id = %s", (seconds, job_id),
    )


def test_expired_lease_returns_capacity_at_once(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 1, 1)])
    first, second = queue.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", concurrency_key=k)) for k in ("a", "b")]
    )
    [claimed] = queue.claim("q", 10, LEASE)
    assert claimed.id == first and claimed.attempts == 1
    assert queue.claim("q", 10, 30) == []  # full while the lease runs
    _expire(queue.conn, claimed.id, 1)
    # The dead worker's slot is free; its job is the oldest, so it is taken again.
    [again] = queue.claim("q", 10, 30)
    assert again.id == first and again.attempts == 2 and again.fence > claimed.fence
    assert queue.claim("q", 10, 30) == []
    queue.complete(again.id, again.fence)
    assert [job.id for job in queue.claim("q", 10, 30)] == [second]


def test_expired_lease_is_reclaimed_on_every_path(path_queue: Queue) -> None:
    q = path_queue
    job_id = q.enqueue("t", {}, EnqueueOptions(queue="q", concurrency_key="k"))
    [claimed] = q.claim("q", 10, LEASE)
    assert q.claim("q", 10, 30) == []
    _expire(q.conn, claimed.id, 1)
    [again] = q.claim("q", 10, 30)
    assert (again.id, again.attempts) == (job_id, 2)
    assert again.fence > claimed.fence
    job = q.get_job(job_id)
    assert job is not None and job.status is JobStatus.ACTIVE and job.fence == again.fence


def test_expired_key_slot_is_free_for_the_next_job_of_that_key(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", None, 1)])
    ids = queue.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", concurrency_key="k", max_attempts=1))] * 2
    )
    [claimed] = queue.claim("q", 10, LEASE)
    assert claimed.id == ids[0]
    _expire(queue.conn, claimed.id, 1)
    # The expired job has no attempts left: it ends, and its key's slot goes to the next job.
    assert [job.id for job in queue.claim("q", 10, 30)] == [ids[1]]


def test_expired_lease_with_attempts_exhausted_ends_the_job(path_queue: Queue, conn: Any) -> None:
    q = path_queue
    ids = q.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", max_attempts=1, concurrency_key=k)) for k in "ab"],
        on_failure=["fail", "hold"],
    )
    claimed = q.claim("q", 10, LEASE)
    assert [job.id for job in claimed] == ids
    for job in claimed:
        _expire(q.conn, job.id, 1)
    assert q.claim("q", 10, 30) == []
    for job_id, status in zip(ids, (JobStatus.FAILED, JobStatus.HELD), strict=True):
        job = q.get_job(job_id)
        assert job is not None and job.status is status
        assert job.attempts == 1 and job.finished_at is not None and job.lease_until is None
        assert job.error is not None and job.error["type"] == "LeaseExpired"
        assert set(job.error) == {"type", "message", "traceback"}
    # The late worker's outcome is stale now.
    before = _snapshot(conn, ids[0])
    with pytest.raises(StaleLeaseError):
        q.complete(claimed[0].id, claimed[0].fence, {"late": True})
    with pytest.raises(StaleLeaseError):
        q.fail(claimed[0].id, claimed[0].fence, ERROR)
    assert _snapshot(conn, ids[0]) == before


def test_three_attempts_then_failed(queue: Queue) -> None:
    q = queue
    job_id = q.enqueue("t", {}, EnqueueOptions(queue="q", max_attempts=3))
    for attempt in (1, 2, 3):
        [claimed] = q.claim("q", 10, LEASE)
        assert claimed.attempts == attempt
        _expire(q.conn, claimed.id, 1)
    assert q.claim("q", 10, 30) == []
    job = q.get_job(job_id)
    assert job is not None and job.status is JobStatus.FAILED and job.attempts == 3


def test_complete_and_fail_after_reclaim_are_stale_and_change_nothing(
    queue: Queue, conn: Any
) -> None:
    q = queue
    q.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 1, 1)])
    job_id = q.enqueue("t", {"x": 1}, EnqueueOptions(queue="q", concurrency_key="k"))
    [old] = q.claim("q", 10, LEASE)
    _expire(q.conn, old.id, 1)
    [new] = q.claim("q", 10, 30)
    assert new.id == job_id
    before = _snapshot(conn, job_id)

    with pytest.raises(StaleLeaseError):
        q.complete(old.id, old.fence, {"stale": True})
    assert q.complete_many([(old.id, old.fence, None)]) == set()
    with pytest.raises(StaleLeaseError):
        q.fail(old.id, old.fence, ERROR)
    with pytest.raises(StaleLeaseError):
        q.fail(old.id, old.fence, ERROR, retry_at=datetime.now(UTC))
    assert q.heartbeat([(old.id, old.fence, 30.0)]) == set()
    assert _snapshot(conn, job_id) == before

    q.complete(new.id, new.fence, {"fresh": True})
    job = q.get_job(job_id)
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.result == {"fresh": True}
    # Sent again under the same fence (a resend after a broken connection): accepted, and it
    # changes nothing, because the job was not claimed again (invariant 4).
    q.complete(new.id, new.fence, {"resent": True})
    job = q.get_job(job_id)
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.result == {"fresh": True}


def test_complete_of_an_expired_but_unclaimed_job_is_accepted(queue: Queue) -> None:
    q = queue
    job_id = q.enqueue("t", {}, EnqueueOptions(queue="q", concurrency_key="k"))
    [claimed] = q.claim("q", 10, LEASE)
    _expire(q.conn, claimed.id, 1)
    q.complete(claimed.id, claimed.fence, [1, 2])
    job = q.get_job(job_id)
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.result == [1, 2]
    assert job.lease_until is None and job.finished_at is not None
    assert q.claim("q", 10, 30) == []


def test_fail_of_an_expired_but_unclaimed_job_is_accepted(queue: Queue) -> None:
    q = queue
    job_id = q.enqueue("t", {}, EnqueueOptions(queue="q", max_attempts=1))
    [claimed] = q.claim("q", 10, LEASE)
    _expire(q.conn, claimed.id, 1)
    assert q.fail(claimed.id, claimed.fence, ERROR) is JobStatus.FAILED
    job = q.get_job(job_id)
    assert job is not None and job.error == ERROR


def test_heartbeat_extends_live_leases_and_rejects_expired_ones(
    queue: Queue, conn: Any
) -> None:
    q = queue
    q.enqueue_many([("t", {}, EnqueueOptions(queue="q", concurrency_key=k)) for k in ("a", "b")])
    short, long_ = q.claim("q", 1, LEASE) + q.claim("q", 1, 30)
    _expire(q.conn, short.id, 1)
    expired_before = _snapshot(conn, short.id)
    kept = q.heartbeat([(short.id, short.fence, 60.0), (long_.id, long_.fence, 60.0),
                        (long_.id, long_.fence + 1000, 60.0)])
    assert kept == {long_.id}
    assert _snapshot(conn, short.id) == expired_before  # not renewed
    job = q.get_job(long_.id)
    assert job is not None and job.lease_until is not None
    assert job.lease_until - datetime.now(UTC) > timedelta(seconds=55)
    assert q.heartbeat([]) == set()


def test_heartbeat_keeps_a_job_from_expiring(path_queue: Queue) -> None:
    q = path_queue
    q.enqueue("t", {}, EnqueueOptions(queue="q"))
    [claimed] = q.claim("q", 1, LEASE)
    for _ in range(3):
        _age(q.conn, claimed.id, LEASE * 0.8)  # most of the lease has passed
        assert q.heartbeat([(claimed.id, claimed.fence, LEASE)]) == {claimed.id}
    # Still held, after more than twice its first lease (of the database's time, as moved).
    assert q.claim("q", 1, 30) == []
    job = q.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.ACTIVE and job.fence == claimed.fence


def test_fail_with_retry_schedules_then_becomes_claimable(path_queue: Queue) -> None:
    q = path_queue
    job_id = q.enqueue("t", {}, EnqueueOptions(queue="q", concurrency_key="k", max_attempts=2))
    [claimed] = q.claim("q", 1, 30)
    status = q.fail(claimed.id, claimed.fence, ERROR,
                    retry_at=datetime.now(UTC) + timedelta(minutes=5))
    assert status is JobStatus.SCHEDULED
    job = q.get_job(job_id)
    assert job is not None and job.status is JobStatus.SCHEDULED and job.error == ERROR
    assert job.finished_at is None and job.lease_until is None
    assert q.claim("q", 1, 30) == []
    q.conn.execute("UPDATE workhorse.jobs SET run_at = now() - interval '1 second'"
                   " WHERE id = %s", (job_id,))  # the backoff has passed
    [again] = q.claim("q", 1, 30)
    assert again.id == job_id and again.attempts == 2
    # The last attempt: a retry is not possible any more.
    status = q.fail(again.id, again.fence, ERROR, retry_at=datetime.now(UTC))
    assert status is JobStatus.FAILED


def test_fail_without_retry_holds_when_the_job_says_so(queue: Queue) -> None:
    [job_id] = queue.enqueue_many([("t", {}, EnqueueOptions(max_attempts=5))], on_failure=["hold"])
    [claimed] = queue.claim("default", 1, 30)
    assert queue.fail(claimed.id, claimed.fence, ERROR) is JobStatus.HELD
    job = queue.get_job(job_id)
    assert job is not None and job.status is JobStatus.HELD and job.finished_at is not None


def test_complete_many_reports_only_the_accepted(queue: Queue, conn: Any) -> None:
    q = queue
    q.enqueue_many([("t", {}, EnqueueOptions(queue="q")) for _ in range(3)])
    a, b, c = q.claim("q", 3, 30)
    accepted = q.complete_many([(a.id, a.fence, 1), (b.id, b.fence + 99, 2), (c.id, c.fence, 3)])
    assert accepted == {a.id, c.id}
    assert count(conn, "status = 'succeeded'") == 2
    assert count(conn, "status = 'active'") == 1
    assert q.complete_many([]) == set()


def test_bad_result_raises_and_records_nothing(queue: Queue, conn: Any) -> None:
    q = queue
    job_id = q.enqueue("t", {}, EnqueueOptions(queue="q"))
    [claimed] = q.claim("q", 1, 30)
    before = _snapshot(conn, job_id)
    with pytest.raises(PayloadError):
        q.complete(claimed.id, claimed.fence, {"x": float("nan")})
    with pytest.raises(PayloadError):
        q.complete_many([(claimed.id, claimed.fence, 1), (claimed.id, claimed.fence, object())])
    assert _snapshot(conn, job_id) == before


def test_bad_lease_or_limit_is_refused_before_anything_changes(queue: Queue, conn: Any) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 1, 1)])
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q", concurrency_key="k"))
    before = _snapshot(conn, job_id)
    for lease in (0, -1, float("nan"), float("inf"), None, True, "30"):
        with pytest.raises(InvalidOptionsError):
            queue.claim("q", 1, lease)  # type: ignore[arg-type]
    for limit in (1.5, None, "1"):
        with pytest.raises(InvalidOptionsError):
            queue.claim("q", limit, 30)  # type: ignore[arg-type]
    assert _snapshot(conn, job_id) == before
    [claimed] = queue.claim("q", 1, 30)
    before = _snapshot(conn, job_id)
    for lease in (0, float("nan"), None):
        with pytest.raises(InvalidOptionsError):
            queue.heartbeat([(claimed.id, claimed.fence, lease)])  # type: ignore[list-item]
    assert _snapshot(conn, job_id) == before
    assert queue.claim("q", 1, 30) == []  # the job still holds the queue's only slot


def test_expired_leases_are_reclaimed_by_priority_not_by_expiry(
    path_queue: Queue, conn: Any
) -> None:
    q = path_queue
    low, high = q.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", priority=p, concurrency_key=k))
         for p, k in ((0, "a"), (5, "b"))]
    )
    assert [job.id for job in q.claim("q", 2, 30)] == [high, low]
    _expire(conn, low, 2)  # the low-priority lease ran out first
    _expire(conn, high, 1)
    assert [job.id for job in q.claim("q", 1, 30)] == [high]
    assert [job.id for job in q.claim("q", 1, 30)] == [low]


def test_a_saturated_keys_expired_job_does_not_hide_others(queue: Queue, conn: Any) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", None, 2)])
    a1, a2, b1 = queue.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", priority=p, concurrency_key=k))
         for p, k in ((5, "a"), (5, "a"), (0, "b"))]
    )
    assert [job.id for job in queue.claim("q", 10, 30)] == [a1, a2, b1]
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", None, 1)])
    _expire(conn, a1, 1)
    _expire(conn, b1, 1)
    # a is still saturated by a2, so a1's expired lease, though it ranks first, cannot be
    # admitted; b1's can, and must not be hidden behind it.
    assert [job.id for job in queue.claim("q", 1, 30)] == [b1]
    assert queue.claim("q", 1, 30) == []
