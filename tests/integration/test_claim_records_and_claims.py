"""Record-and-claim (a slot's successes ride on its next claim) and release (jobs claimed ahead go
back), in one process against the real database."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, JobStatus, Queue, _ops, _sql
from workhorse._ops import admission
from workhorse.types import ClaimedJob

RETENTION = _ops.DEFAULT_RETENTION_JSON
CLAIM = _sql.function_name("claim")


def _fill(queue: Queue, name: str, n: int, keyed: bool = False) -> list[int]:
    return queue.enqueue_many([
        ("t", {"args": [i], "kwargs": {}},
         EnqueueOptions(queue=name, concurrency_key=f"k{i % 2}" if keyed else None))
        for i in range(n)])


def _successes(jobs: list[ClaimedJob]) -> list[tuple[int, int, str, str]]:
    return [(job.id, job.fence, f'"done {job.id}"', RETENTION) for job in jobs]


def _ride(conn: psycopg.Connection[Any], name: str, limit: int, jobs: list[ClaimedJob]) -> Any:
    return _ops.execute(conn, _ops.complete_and_claim(name, limit, 30, _successes(jobs)))


def _statuses(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute(
        "SELECT status, count(*) FROM workhorse.jobs GROUP BY status").fetchall())


def _govern(queue: Queue, name: str, max_active: int | None, per_key: int | None = None) -> None:
    queue.sync_concurrency_policies(
        "t", [ConcurrencyPolicyDefinition(name, max_active, per_key)])


def test_successes_free_their_places_for_the_claim_that_carries_them(conn, queue):
    _govern(queue, "g", 2)
    _fill(queue, "g", 5)
    first = queue.claim("g", 5, 30)
    assert len(first) == 2
    assert queue.claim("g", 5, 30) == []  # the budget is spent

    claimed, next_start, accepted = _ride(conn, "g", 5, first)
    assert accepted == {(job.id, job.fence): JobStatus.SUCCEEDED for job in first}
    assert next_start is None
    assert len(claimed) == 2  # the two places the successes freed, no more
    assert {job.id for job in claimed}.isdisjoint(job.id for job in first)
    assert _statuses(conn) == {"succeeded": 2, "active": 2, "ready": 1}
    results = dict(conn.execute(
        "SELECT id, result FROM workhorse.jobs WHERE status = 'succeeded'").fetchall())
    assert results == {job.id: f"done {job.id}" for job in first}


def test_a_stale_success_frees_nothing_and_is_not_accepted(conn, queue):
    _govern(queue, "g", 1)
    _fill(queue, "g", 3)
    [job] = queue.claim("g", 1, 30)
    stale = dataclasses.replace(job, fence=job.fence - 1)  # an older claim's fence
    claimed, _, accepted = _ride(conn, "g", 1, [stale])
    assert accepted == {}
    assert claimed == []
    assert _statuses(conn) == {"active": 1, "ready": 2}


def test_a_paused_queue_only_records_the_successes_that_ride_on_its_claim(conn, queue):
    _govern(queue, "g", 4)
    _fill(queue, "g", 4)
    first = queue.claim("g", 2, 30)
    queue.pause("g")
    claimed, _, accepted = _ride(conn, "g", 4, first)
    assert len(accepted) == 2
    assert claimed == []
    assert _statuses(conn) == {"succeeded": 2, "ready": 2}


def test_a_canceled_job_rides_as_canceled(conn, queue):
    _fill(queue, "u", 2)
    jobs = queue.claim("u", 2, 30)
    queue.cancel_jobs([jobs[0].id])  # active: a cancel request
    _, _, accepted = _ride(conn, "u", 0, jobs)
    assert accepted == {(jobs[0].id, jobs[0].fence): JobStatus.CANCELED,
                        (jobs[1].id, jobs[1].fence): JobStatus.SUCCEEDED}


def _notified(listener: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=0.3, stop_after=10)]


def test_governed_claimers_are_woken_only_when_the_claim_took_fewer_than_it_freed(
        conn, queue, database_url):
    _govern(queue, "g", 2)
    _fill(queue, "g", 6)
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(_ops_listen())
        first = queue.claim("g", 2, 30)
        _notified(listener)  # whatever the enqueue and the claim said
        claimed, _, _ = _ride(conn, "g", 2, first)
        assert len(claimed) == 2
        assert "g" not in _notified(listener)  # the places went straight to their replacements
        _, _, accepted = _ride(conn, "g", 0, claimed)
        assert len(accepted) == 2
        assert "g" in _notified(listener)  # freed and not taken: the fleet is told


def _ops_listen() -> str:
    return _sql.statement("listen").as_string()


def test_release_gives_back_jobs_ready_with_their_attempt_unused(conn, queue):
    _fill(queue, "u", 3)
    jobs = queue.claim("u", 3, 30)
    queue.cancel_jobs([jobs[2].id])  # a cancel request while it waited: it ends canceled
    stale = (jobs[1].id, jobs[1].fence - 1)
    released = _ops.execute(conn, _ops.release(
        [(jobs[0].id, jobs[0].fence), stale, (jobs[2].id, jobs[2].fence)], RETENTION))
    assert released == {jobs[0].id: JobStatus.READY, jobs[2].id: JobStatus.CANCELED}
    rows = {r[0]: r[1:] for r in conn.execute(
        "SELECT id, status, attempts, lease_until IS NULL, expires_at IS NOT NULL "
        "FROM workhorse.jobs").fetchall()}
    assert rows[jobs[0].id] == ("ready", 0, True, False)
    assert rows[jobs[1].id][:2] == ("active", 1)  # a stale pair changes nothing
    assert rows[jobs[2].id] == ("canceled", 1, True, True)
    again = queue.claim("u", 3, 30)
    assert [job.id for job in again] == [jobs[0].id]
    assert again[0].attempts == 1


def test_a_job_released_into_a_queue_governed_meanwhile_is_seen_by_the_head_scan(conn, queue):
    _fill(queue, "q", 2, keyed=True)
    jobs = queue.claim("q", 2, 30)  # ungoverned: claimed ahead
    _govern(queue, "q", 4, 1)  # a per-key policy now: heads are rebuilt without these two
    _ops.execute(conn, _ops.release([(j.id, j.fence) for j in jobs], RETENTION))
    again = queue.claim("q", 4, 30)
    assert sorted(job.id for job in again) == sorted(job.id for job in jobs)


@pytest.mark.parametrize("limit", [0, 3])
def test_a_record_and_claim_with_no_successes_is_a_plain_claim(conn, queue, limit):
    _fill(queue, "u", 3)
    claimed, next_start, accepted = _ops.execute(conn, _ops.complete_and_claim("u", limit, 30, []))
    assert (len(claimed), next_start, accepted) == (limit, None, {})


def test_the_claim_says_what_each_job_was_scheduled_for(conn, queue):
    from datetime import UTC, datetime

    ids = _fill(queue, "u", 3)
    occurrence = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    # As a schedule's firing leaves a job: its meta names the schedule, scheduled_for is set.
    conn.execute("UPDATE workhorse.jobs SET scheduled_for = %s, meta = '{\"schedule\": \"s\"}'"
                 " WHERE id = %s", (occurrence, ids[0]))
    conn.execute("UPDATE workhorse.jobs SET attempts = 1 WHERE id = %s", (ids[2],))  # a retry
    claimed, _, _ = _ops.execute(conn, _ops.complete_and_claim("u", 3, 30, []))
    by_id = {job.id: job for job in claimed}
    assert by_id[ids[0]].scheduled_for == occurrence  # a schedule's occurrence
    assert by_id[ids[1]].scheduled_for == by_id[ids[1]].run_at  # a first attempt: its run_at
    assert by_id[ids[2]].scheduled_for is None  # a retry moved run_at; the first is not kept


def test_the_claim_names_only_the_successes_that_did_not_end_succeeded(conn, queue):
    """The statement itself: no row per accepted success (they would cost more than the claim
    they ride on), one per canceled or stale one; `complete_and_claim` fills in the rest."""
    _fill(queue, "u", 4)
    first = queue.claim("u", 3, 30)

    def success_rows(jobs: list[ClaimedJob]) -> list[tuple[Any, ...]]:
        rows = conn.execute(
            f"SELECT id, fence, status FROM workhorse.{CLAIM}('u', 0, 30, %s, %s, %s, %s, %s)"
            " WHERE status IS NOT NULL", admission._success_columns(_successes(jobs))).fetchall()
        return sorted(rows)

    assert success_rows(first[:1]) == []  # accepted: nothing said
    conn.execute("UPDATE workhorse.jobs SET cancel_requested_at = now() WHERE id = %s",
                 (first[1].id,))
    stale = dataclasses.replace(first[2], fence=first[2].fence + 1000)
    assert success_rows([first[1], stale]) == [
        (first[1].id, first[1].fence, "canceled"), (stale.id, stale.fence, "stale")]


def _admission_lock_held(database_url: str, name: str) -> psycopg.Connection[Any]:
    """A connection whose open transaction holds `name`'s admission lock, as a claim does until
    it commits."""
    lock_id = _sql.function_name("_admission_lock_id")
    holder = psycopg.connect(database_url)
    holder.execute(f"SELECT pg_advisory_xact_lock(workhorse.{lock_id}(%s))", (name,))
    return holder


def _waits_for(conn: psycopg.Connection[Any], database_url: str, holder: psycopg.Connection[Any],
               call: Any) -> str | None:
    """Run `call(c)` on a fresh connection in a thread and say what it waited on, if it waited
    for `holder` (lock_wait with blocked_by); the holder then commits so that it can end."""
    import threading

    from _integration import lock_wait

    with psycopg.connect(database_url, autocommit=True) as c:
        done = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                call(c)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            done.set()

        thread = threading.Thread(target=run)
        thread.start()
        waited = lock_wait(conn, c.info.backend_pid, done.is_set, timeout=5,
                           blocked_by=holder.info.backend_pid)
        holder.commit()
        thread.join(30)
        assert not errors, errors
        return waited


@pytest.mark.parametrize("limit", [0, 1])
def test_a_claim_that_only_records_takes_no_admission_lock(conn, queue, database_url, limit):
    """Successes recorded by a claim that asks for no job (limit 0) do not queue for the
    admission lock that admitting claims hold (complete takes none either); one that asks for a
    job waits for it, which shows that the check sees a wait."""
    _govern(queue, "g", 4)
    _fill(queue, "g", 6)
    first = queue.claim("g", 2, 30)
    holder = _admission_lock_held(database_url, "g")
    try:
        waited = _waits_for(conn, database_url, holder,
                            lambda c: _ride(c, "g", limit, first))
    finally:
        holder.close()
    if limit == 0:
        assert waited is None
    else:
        assert waited == "advisory"
    assert _statuses(conn)["succeeded"] == 2


@pytest.mark.parametrize(("full", "expect_full"), [(True, True), (False, True), (True, False)])
def test_a_bare_claim_expecting_a_full_queue_returns_without_queueing_for_the_lock(
        conn, queue, database_url, full, expect_full):
    """A claim with no successes whose caller expects the queue full (its last claim said so)
    and that finds it full in its committed snapshot returns at once, admitting nothing, instead
    of waiting for the admission lock to find no room. On a queue with room it waits, and so does
    a claim that expects room (it does not pay for the unlocked look): the check can fail both
    ways. Exactness is the locked count's: the model and contention suites run through here."""
    _govern(queue, "g", 2)
    _fill(queue, "g", 5)
    assert len(queue.claim("g", 2 if full else 1, 30)) == (2 if full else 1)
    holder = _admission_lock_held(database_url, "g")
    got: list[Any] = []

    def claim(c: psycopg.Connection[Any]) -> None:
        reply = _ops.execute(c, _ops.claim_as("g", 2, 30, expect_full=expect_full))
        got.extend(reply.jobs)
        assert reply.full  # no room, or it took the last place

    try:
        waited = _waits_for(conn, database_url, holder, claim)
    finally:
        holder.close()
    if full and expect_full:
        assert waited is None and got == []
    else:
        assert waited == "advisory" and len(got) == (0 if full else 1)
    assert _statuses(conn)["active"] == 2
