"""on_key_full (docs/design.md "Job keys"): what an enqueue does when its job's key is full, on a
real PostgreSQL: the policy field synced, listed and in health; cancel_newest and
cancel_in_progress at enqueue; a superseded run records no result and holds its place until it
stops; concurrent enqueues of one key serialize (one survivor), shown to fail without the lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from _integration import collect, spawn, start

from workhorse import (
    App,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidPolicyError,
    JobStatus,
    Queue,
    _sql,
)

HERE = Path(__file__).resolve().parent
NS = "index-app"


def _policy(mode: str, per_key: int = 1) -> ConcurrencyPolicyDefinition:
    return ConcurrencyPolicyDefinition("index", max_active=10, max_active_per_key=per_key,
                                       on_key_full=mode)


def _enqueue(queue: Queue, key: str | None = "doc", n: int = 0) -> int:
    return queue.enqueue("index.doc", {"args": [n], "kwargs": {}},
                         EnqueueOptions(queue="index", concurrency_key=key))


def _status(queue: Queue, job_id: int) -> JobStatus:
    job = queue.get_job(job_id)
    assert job is not None
    return job.status


@pytest.mark.parametrize("bad", [
    dict(on_key_full="x"), dict(on_key_full=None), dict(on_key_full=True),
    dict(on_key_full="cancel_newest", max_active_per_key=None),
    dict(on_key_full="cancel_in_progress", max_active_per_key=None),
])
def test_a_bad_on_key_full_is_refused_and_writes_nothing(queue: Queue, bad: dict[str, Any]
                                                         ) -> None:
    fields: dict[str, Any] = {"max_active": 5, "max_active_per_key": 1, **bad}
    with pytest.raises(InvalidPolicyError):
        ConcurrencyPolicyDefinition("index", **fields)
    app = App("bad-index")
    with pytest.raises(InvalidPolicyError):
        app.queue("index", **fields)
    with pytest.raises(InvalidPolicyError):
        @app.task(name="index.doc", queue="index2", **fields)
        def doc(n: int) -> None: ...
    assert queue.list_concurrency_policies() == []


def test_the_policy_field_is_synced_listed_and_in_health(queue: Queue) -> None:
    [policy] = queue.sync_concurrency_policies(NS, [_policy("cancel_in_progress")])
    assert policy.on_key_full == "cancel_in_progress"
    [health] = queue.health().policies
    assert health.on_key_full == "cancel_in_progress"
    app = App(NS)
    app.queue("index", max_active=10, max_active_per_key=1, on_key_full="cancel_newest")
    app2 = App(NS)
    app2.queue("index", max_active=10, max_active_per_key=1, on_key_full="cancel_newest")
    report = queue.sync_concurrency_policies(NS, [_policy("cancel_newest")])
    assert report[0].on_key_full == "cancel_newest"
    back = queue.sync_concurrency_policies(NS, [_policy("queue")])
    assert back[0].on_key_full == "queue"
    # Two declarations that disagree on it in one app conflict, as limits do.
    with pytest.raises(InvalidPolicyError, match="on_key_full"):
        app.queue("index", max_active=10, max_active_per_key=1, on_key_full="queue")


def test_cancel_newest_cancels_the_new_job_of_a_full_key_only(queue: Queue) -> None:
    queue.sync_concurrency_policies(NS, [_policy("cancel_newest")])
    first = _enqueue(queue)
    second = _enqueue(queue)  # the key's one place is taken by a pending job: full
    other = _enqueue(queue, key="other")
    keyless = _enqueue(queue, key=None)
    assert _status(queue, first) is JobStatus.READY
    assert _status(queue, second) is JobStatus.CANCELED
    assert _status(queue, other) is JobStatus.READY
    assert _status(queue, keyless) is JobStatus.READY


def test_queue_waits_as_before(queue: Queue) -> None:
    queue.sync_concurrency_policies(NS, [_policy("queue")])
    ids = [_enqueue(queue, n=n) for n in range(3)]
    assert [_status(queue, i) for i in ids] == [JobStatus.READY] * 3


def test_cancel_in_progress_cancels_older_pending_jobs(queue: Queue) -> None:
    queue.sync_concurrency_policies(NS, [_policy("cancel_in_progress", per_key=2)])
    a, b = _enqueue(queue, n=1), _enqueue(queue, n=2)  # 2 pending: the key is full for a third
    later = queue.enqueue("index.doc", {"args": [9], "kwargs": {}},
                          EnqueueOptions(queue="index", concurrency_key="doc", delay=60))
    assert _status(queue, later) is JobStatus.SCHEDULED  # b and later now: newest wins
    assert _status(queue, a) is JobStatus.CANCELED and _status(queue, b) is JobStatus.CANCELED
    newest = _enqueue(queue, n=3)  # 1 pending + 1 new fits in 2: nothing to cancel
    assert _status(queue, later) is JobStatus.SCHEDULED
    assert _status(queue, newest) is JobStatus.READY
    last = _enqueue(queue, n=4)  # the scheduled job counts as pending too: full again
    assert _status(queue, later) is JobStatus.CANCELED
    assert _status(queue, newest) is JobStatus.CANCELED
    assert _status(queue, last) is JobStatus.READY


def test_cancel_in_progress_asks_the_running_job_to_stop_and_waits_for_it(queue: Queue) -> None:
    queue.sync_concurrency_policies(NS, [_policy("cancel_in_progress")])
    first = _enqueue(queue, n=1)
    [running] = queue.claim("index", 1, 30)
    assert running.id == first
    second = _enqueue(queue, n=2)
    job = queue.get_job(first)
    assert job is not None and job.status is JobStatus.ACTIVE and job.cancel_requested
    assert _status(queue, second) is JobStatus.READY
    # The first still holds the key's one place until its handler stops.
    assert queue.claim("index", 1, 30) == []
    # Its late result is not recorded: it ends canceled.
    queue.complete(running.id, running.fence, {"late": True})
    ended = queue.get_job(first)
    assert ended is not None and ended.status is JobStatus.CANCELED and ended.result is None
    [next_run] = queue.claim("index", 1, 30)
    assert next_run.id == second


def test_inside_a_rolled_back_transaction_nothing_changes(database_url: str,
                                                          queue: Queue) -> None:
    queue.sync_concurrency_policies(NS, [_policy("cancel_in_progress")])
    first = _enqueue(queue, n=1)
    with psycopg.connect(database_url) as conn:
        _enqueue(Queue(conn), n=2)
        conn.rollback()
    assert _status(queue, first) is JobStatus.READY
    assert len(queue.list_jobs(queue="index")) == 1


def _unlocked_enqueue(conn: psycopg.Connection[Any]) -> None:
    """The product's enqueue without the admission lock on_key_full takes, and with a pause
    between the insert and the count: concurrent enqueues of one key no longer see each other."""
    name = _sql.function_name("enqueue")
    text = _sql.function_files()[name]
    lock_id, on_key_full = _sql.function_name("_admission_lock_id"), _sql.function_name(
        "_on_key_full")
    lock = (f"PERFORM pg_advisory_xact_lock(workhorse.{lock_id}(v_queue));\n"
            "        v_full_queues := v_full_queues || v_queue;")
    assert text.count(lock) == 1
    check = (f"PERFORM workhorse.{on_key_full}(v_full_queues, v_inserted, "
             "c_canceled_retention);")
    assert text.count(check) == 1
    conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                 .replace(lock, "v_full_queues := v_full_queues || v_queue;")
                 .replace(check, "PERFORM pg_sleep(0.3);\n            " + check))


@pytest.mark.parametrize("broken", [False, True], ids=["enqueue", "unlocked-enqueue"])
def test_concurrent_enqueues_of_one_full_key_leave_one_survivor(
        database_url: str, conn: psycopg.Connection[Any], queue: Queue, broken: bool) -> None:
    queue.sync_concurrency_policies(NS, [_policy("cancel_in_progress")])
    if broken:
        _unlocked_enqueue(conn)
    # Twelve processes enqueue one job each at one instant: without the lock they all insert
    # before any sees another's job.
    processes = [spawn("enqueue", database_url, script=HERE / "_full_key_enqueuer.py", times=1)
                 for _ in range(12)]
    start(processes)
    reports = collect(processes)
    ids = sorted(i for report in reports for i in report["ids"])
    assert len(ids) == 12
    alive = [row[0] for row in conn.execute(
        "SELECT id FROM workhorse.jobs WHERE status <> 'canceled' ORDER BY id").fetchall()]
    if broken:
        assert len(alive) > 1, "the checker must see enqueues that missed each other"
        return
    assert alive == [ids[-1]], "the newest job of the key is the one left"
