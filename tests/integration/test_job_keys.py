"""Job keys (issue #27, docs/design.md "Job keys"): `Unique` jobs, `job_key` (debounce, throttle,
superseding the active job), and `JobHandle.duplicate`, on a real PostgreSQL.

The claim, complete, fail and snooze used here are 0.2.0's (`*_v1`): rows with keys must work
with them unchanged, a retry of a job that lost its key included (no feature level is raised)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from _integration import HERE, collect, count, spawn, start

from workhorse import (
    App,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    JobStatus,
    Queue,
    Unique,
    _ops,
)
from workhorse.testing import drain

ERROR = {"type": "ValueError", "message": "bad", "traceback": ""}
ENQUEUER = HERE / "_keys_enqueuer.py"


@pytest.fixture
def app(database_url: str) -> Any:
    app = App("keys", database_url=database_url)
    ran: list[Any] = []
    app.ran = ran  # type: ignore[attr-defined]

    @app.task(name="keys.refresh", queue="keys", unique=Unique())
    def refresh(user_id: int, force: bool = False) -> None:
        ran.append(("refresh", user_id, force))

    @app.task(name="keys.sync", queue="keys")
    def sync(n: int, note: str = "") -> None:
        ran.append(("sync", n, note))

    @app.task(name="keys.mail", queue="mail", concurrency_key=lambda to, *_, **__: to)
    def mail(to: str, subject: str = "") -> None: ...

    yield app
    app.close()


def _claim(queue: Queue, name: str = "keys") -> Any:
    [job] = queue.claim(name, 1, 30)
    return job


def _job_keys(conn: psycopg.Connection[Any], task: str) -> dict[int, str | None]:
    rows = conn.execute("SELECT id, job_key FROM workhorse.jobs WHERE task = %s ORDER BY id",
                        (task,)).fetchall()
    return dict(rows)


# ---- unique ---------------------------------------------------------------------------------


def test_unique_compares_arguments_bound_through_the_signature(app: App, queue: Queue) -> None:
    refresh = app.tasks["keys.refresh"]
    first = refresh.delay(42)
    assert first.duplicate is False
    for again in (refresh.delay(42), refresh.delay(user_id=42),
                  refresh.apply_async((42, False)), refresh.apply_async(kwargs={"user_id": 42})):
        assert (again.id, again.duplicate) == (first.id, True)
    other = refresh.delay(43)
    forced = refresh.delay(42, force=True)
    assert len({first.id, other.id, forced.id}) == 3
    assert not other.duplicate and not forced.duplicate
    assert count(queue.conn, "task = 'keys.refresh'") == 3


def test_unique_keys_compare_only_the_named_arguments(app: App, queue: Queue) -> None:
    sync = app.tasks["keys.sync"]
    rule = Unique(keys=("n",))
    a = sync.apply_async((1, "first"), unique=rule)
    b = sync.apply_async((1,), {"note": "second"}, unique=rule)
    c = sync.apply_async((2, "first"), unique=rule)
    assert (b.id, b.duplicate) == (a.id, True) and c.id != a.id
    job = a.job()
    assert job is not None and job.payload == {"args": [1, "first"], "kwargs": {}}


def test_unique_by_queue_and_concurrency_key(app: App, queue: Queue) -> None:
    mail = app.tasks["keys.mail"]
    by_args = Unique()
    by_key = Unique(by=("concurrency_key",))
    by_queue = Unique(by=("args", "queue"))
    a = mail.apply_async(("ann",), unique=by_args)
    assert mail.apply_async(("ann",), queue="bulk", unique=by_args).id == a.id
    b = mail.apply_async(("ann",), queue="bulk", unique=by_queue)
    assert b.id != a.id and not b.duplicate
    assert mail.apply_async(("ann",), queue="bulk", unique=by_queue).id == b.id
    k = mail.apply_async(("bob", "hi"), unique=by_key)
    assert mail.apply_async(("bob", "other subject"), unique=by_key).duplicate
    assert not mail.apply_async(("cid", "hi"), unique=by_key).duplicate
    assert mail.apply_async(("bob",), unique=by_key).id == k.id


def test_unique_allows_a_new_job_once_the_job_left_its_states(app: App, queue: Queue) -> None:
    refresh = app.tasks["keys.refresh"]
    first = refresh.delay(7)
    claimed = _claim(queue)
    assert refresh.delay(7).id == first.id  # active is one of the default states
    assert queue.fail(claimed.id, claimed.fence, ERROR) is JobStatus.FAILED
    second = refresh.delay(7)
    assert second.id != first.id and not second.duplicate
    assert refresh.delay(7).id == second.id
    # A retry of the failed first job brings it back beside the second (0.2.0's retry): no
    # conflict, and equal enqueues keep finding the newer job.
    assert app.retry([first.id]) == [first.id]
    assert refresh.delay(7).id == second.id
    claimed = _claim(queue)  # the retried first job (id order), which runs without the key
    assert claimed.id == first.id
    queue.complete(claimed.id, claimed.fence)
    assert refresh.delay(7).id == second.id


def test_unique_states_narrower_than_the_default(app: App, queue: Queue) -> None:
    """states=("scheduled", "ready"): a running job does not block a new one, and the running
    job's retry back to scheduled (0.2.0's fail) does not conflict with the new one."""
    sync = app.tasks["keys.sync"]
    pending = Unique(states=("scheduled", "ready"))
    first = sync.apply_async((1,), unique=pending)
    claimed = _claim(queue)
    second = sync.apply_async((1,), unique=pending)
    assert second.id != first.id and not second.duplicate
    retry_at = datetime.now(UTC) + timedelta(seconds=60)
    assert queue.fail(claimed.id, claimed.fence, ERROR, retry_at) is JobStatus.SCHEDULED
    assert sync.apply_async((1,), unique=pending).id == second.id


def test_a_batch_with_two_equal_unique_jobs_inserts_one(app: App, queue: Queue) -> None:
    refresh = app.tasks["keys.refresh"]
    handles = app.enqueue_many([refresh.call((1,)), refresh.call((2,)), refresh.call((), {
        "user_id": 1}), app.tasks["keys.sync"].call((5,))])
    assert [h.duplicate for h in handles] == [False, False, True, False]
    assert handles[2].id == handles[0].id
    assert handles[0].id < handles[1].id < handles[3].id  # ids follow input order
    assert count(queue.conn, "task = 'keys.refresh'") == 2
    # Task.map with one options object takes the shared-options statement.
    mapped = refresh.map([(1,), (3,), (3,)])
    assert [h.duplicate for h in mapped] == [True, False, True]
    assert mapped[0].id == handles[0].id and mapped[1].id == mapped[2].id


def test_unique_at_the_queue_level_compares_the_payload(queue: Queue) -> None:
    rule = EnqueueOptions(queue="raw", unique=Unique())
    a = queue.enqueue("raw.task", {"b": 2, "a": 1}, rule)
    assert queue.enqueue("raw.task", {"a": 1, "b": 2}, rule) == a
    assert queue.enqueue("raw.task", {"a": 1}, rule) != a
    assert queue.enqueue("other.task", {"a": 1, "b": 2}, rule) != a  # scoped to the task
    by_field = EnqueueOptions(queue="raw", unique=Unique(keys=("user",)))
    u = queue.enqueue("raw.task", {"user": 1, "at": 1}, by_field)
    assert queue.enqueue("raw.task", {"user": 1, "at": 2}, by_field) == u
    assert queue.enqueue_outcomes([("raw.task", {"user": 1, "at": 3}, by_field)]) == [(u, True)]


def test_unique_with_a_period_makes_one_job_per_bucket(app: App, queue: Queue) -> None:
    sync = app.tasks["keys.sync"]
    rule = Unique(period="1s")
    # Start just after a second turns, so that the first calls fall in one bucket.
    time.sleep(1 - time.time() % 1 + 0.05)
    handles = []
    deadline = time.monotonic() + 2.2
    while time.monotonic() < deadline:
        handles.append(sync.apply_async((9,), unique=rule))
        time.sleep(0.05)
    jobs = {h.id: h.job() for h in handles}
    assert 2 <= len(jobs) <= 4, "one job per 1-second bucket"
    buckets = [int(j.enqueued_at.timestamp()) for j in jobs.values() if j is not None]
    assert len(set(buckets)) == len(buckets), "never two jobs in one bucket"
    assert sum(not h.duplicate for h in handles) == len(jobs)
    # Without a period the same calls make one job.
    assert len({sync.apply_async((10,), unique=Unique()).id for _ in range(5)}) == 1


@pytest.mark.fleet
def test_twenty_processes_enqueue_one_unique_job_and_get_one(database_url: str,
                                                             queue: Queue) -> None:
    processes = [spawn("unique", database_url, script=ENQUEUER, times=3) for _ in range(20)]
    start(processes, delay=0.3)
    reports = collect(processes)
    ids = {job_id for report in reports for job_id in report["ids"]}
    assert len(ids) == 1
    assert sum(not dup for report in reports for dup in report["duplicates"]) == 1
    assert count(queue.conn, "task = 'keys.refresh'") == 1


def test_a_task_declared_unique_can_be_enqueued_without_it(app: App, queue: Queue) -> None:
    refresh = app.tasks["keys.refresh"]
    a = refresh.delay(5)
    b = refresh.apply_async((5,), unique=False)
    assert b.id != a.id and not b.duplicate
    with pytest.raises(InvalidOptionsError, match="at most one"):
        refresh.apply_async((5,), job_key="k")  # the task's unique and a job key
    c = refresh.apply_async((5,), unique=False, job_key="k")
    assert not c.duplicate


# ---- job_key --------------------------------------------------------------------------------


def test_a_debounce_of_50_enqueues_runs_once_with_the_last_arguments(app: App,
                                                                    queue: Queue) -> None:
    sync = app.tasks["keys.sync"]
    handles = []
    for n in range(50):
        handles.append(sync.apply_async((n,), job_key="sync:42", delay="1s"))
        time.sleep(2 / 50)
    assert len({h.id for h in handles}) == 1
    assert [h.duplicate for h in handles] == [False] + [True] * 49
    job = handles[0].job()
    assert job is not None and job.status is JobStatus.SCHEDULED and job.job_key == "sync:42"
    # Replace moved run_at with every enqueue: due 1 s after the last one, not the first.
    assert job.run_at > job.enqueued_at + timedelta(seconds=2.5)
    assert drain(app, ["keys"]).succeeded == 0  # not due yet
    time.sleep(max((job.run_at - datetime.now(UTC)).total_seconds(), 0) + 0.1)
    report = drain(app, ["keys"])
    assert report.succeeded == 1
    assert app.ran == [("sync", 49, "")]  # type: ignore[attr-defined]
    assert count(queue.conn, "task = 'keys.sync'") == 1


def test_replace_moves_run_at_and_priority_preserve_run_at_keeps_them(app: App,
                                                                     queue: Queue) -> None:
    sync = app.tasks["keys.sync"]
    first = sync.apply_async((1,), job_key="a", delay=60, priority=1)
    before = first.job()
    assert before is not None
    kept = sync.apply_async((2,), job_key="a", job_key_mode="preserve_run_at", delay=600,
                            priority=9)
    job = kept.job()
    assert kept.duplicate and job is not None
    assert (job.payload["args"], job.run_at, job.priority) == ([2], before.run_at, 1)
    moved = sync.apply_async((3,), job_key="a", priority=5)  # replace, due now
    job = moved.job()
    assert moved.duplicate and job is not None
    assert (job.payload["args"], job.priority, job.status) == ([3], 5, JobStatus.READY)
    assert job.run_at < before.run_at
    claimed = _claim(queue)
    assert (claimed.id, claimed.payload["args"]) == (first.id, [3])
    # The key is scoped to the task: another task's job with the same key is its own.
    other = app.tasks["keys.mail"].apply_async(("ann",), job_key="a")
    assert other.id != first.id and not other.duplicate


def test_a_job_key_update_keeps_a_per_key_queue_admitting_in_order(app: App, queue: Queue) -> None:
    """On a queue with per-key heads, a ready job whose priority or status an update changed is
    admitted as its new self (its key hinted, as after a cancel)."""
    queue.sync_concurrency_policies("keys", [ConcurrencyPolicyDefinition("mail", 10, 1)])
    mail = app.tasks["keys.mail"]
    low = mail.apply_async(("ann", "low"))
    keyed = mail.apply_async(("ann", "v1"), job_key="m")
    assert mail.apply_async(("ann", "v2"), job_key="m", priority=5).duplicate
    [first] = queue.claim("mail", 10, 30)
    assert (first.id, first.payload["args"]) == (keyed.id, ["ann", "v2"])
    queue.complete(first.id, first.fence)
    pushed = mail.apply_async(("bob",), job_key="n")
    assert mail.apply_async(("bob",), job_key="n", delay=60).duplicate  # ready -> scheduled
    claimed = {job.id for job in queue.claim("mail", 10, 30)}
    assert claimed == {low.id}
    assert pushed.job().status is JobStatus.SCHEDULED  # type: ignore[union-attr]


def test_when_the_keys_job_is_active_a_new_job_takes_the_key_over(app: App, queue: Queue,
                                                                   conn: psycopg.Connection[Any]
                                                                   ) -> None:
    sync = app.tasks["keys.sync"]
    first = sync.apply_async((1,), job_key="k")
    running = _claim(queue)
    second = sync.apply_async((2,), job_key="k")
    assert second.id != first.id and not second.duplicate
    assert _job_keys(conn, "keys.sync") == {first.id: None, second.id: "k"}
    third = sync.apply_async((3,), job_key="k")
    assert (third.id, third.duplicate) == (second.id, True)
    # The older job retries (0.2.0's fail) without its key: no conflict, and it runs on.
    retry_at = datetime.now(UTC) - timedelta(seconds=1)
    assert queue.fail(running.id, running.fence, ERROR, retry_at) is JobStatus.SCHEDULED
    assert _job_keys(conn, "keys.sync") == {first.id: None, second.id: "k"}
    # An update reaches the key's job, not the retried one.
    assert sync.apply_async((4,), job_key="k").id == second.id
    claimed = {job.id: job.payload["args"] for job in queue.claim("keys", 10, 30)}
    assert claimed == {first.id: [1], second.id: [4]}


def test_a_snoozed_or_retried_older_job_runs_on_without_the_key(app: App, queue: Queue,
                                                                conn: psycopg.Connection[Any]
                                                                ) -> None:
    sync = app.tasks["keys.sync"]
    first = sync.apply_async((1,), job_key="k", max_attempts=1)
    running = _claim(queue)
    second = sync.apply_async((2,), job_key="k")
    status = _ops.execute(conn, _ops.snooze(running.id, running.fence, 0.0))
    assert status is JobStatus.SCHEDULED
    again = _claim(queue)  # the snoozed first job, or the second: both are ready
    other = _claim(queue)
    assert {again.id, other.id} == {first.id, second.id}
    older = again if again.id == first.id else other
    newer = other if older is again else again
    assert queue.fail(older.id, older.fence, ERROR) is JobStatus.FAILED
    assert app.retry([first.id]) == [first.id]  # h.retry(): back to ready, still keyless
    assert _job_keys(conn, "keys.sync") == {first.id: None, second.id: "k"}
    queue.complete(newer.id, newer.fence)
    # The key's job finished: it frees the key, and a new enqueue inserts.
    third = sync.apply_async((3,), job_key="k")
    assert third.id not in (first.id, second.id) and not third.duplicate
    assert _job_keys(conn, "keys.sync") == {first.id: None, second.id: None, third.id: "k"}


def test_a_failed_job_that_kept_its_key_and_is_retried_holds_it_again(app: App, queue: Queue
                                                                     ) -> None:
    sync = app.tasks["keys.sync"]
    first = sync.apply_async((1,), job_key="k", max_attempts=1)
    running = _claim(queue)
    queue.fail(running.id, running.fence, ERROR)
    assert first.retry() is not None
    again = sync.apply_async((2,), job_key="k")
    assert (again.id, again.duplicate) == (first.id, True)


def test_inside_a_rolled_back_transaction_nothing_changes(app: App, database_url: str,
                                                          queue: Queue) -> None:
    sync, refresh = app.tasks["keys.sync"], app.tasks["keys.refresh"]
    held = sync.apply_async((1,), job_key="k", delay=60)
    unique = refresh.delay(1)
    before = [queue.get_job(held.id), queue.get_job(unique.id)]
    jobs_before = count(queue.conn)
    with psycopg.connect(database_url) as caller:
        with app.using(caller):
            updated = sync.apply_async((2,), job_key="k", priority=3)
            inserted = sync.apply_async((3,), job_key="fresh")
            dup = refresh.delay(1)
            new = refresh.delay(2)
        assert updated.duplicate and dup.duplicate and not inserted.duplicate
        assert not new.duplicate
        # Queue(conn) reaches the same, in the same transaction.
        q = Queue(caller)
        assert q.enqueue("keys.sync", {"args": [4], "kwargs": {}}, EnqueueOptions(
            queue="keys", job_key="k")) == held.id
        caller.rollback()
    assert [queue.get_job(held.id), queue.get_job(unique.id)] == before
    assert count(queue.conn) == jobs_before
    # And committed, it sticks.
    with psycopg.connect(database_url) as caller, caller.transaction(), app.using(caller):
        sync.apply_async((5,), job_key="k")
    job = held.job()
    assert job is not None and job.payload["args"] == [5]


def test_one_job_key_twice_in_a_batch_ends_with_the_later_arguments(app: App,
                                                                    queue: Queue) -> None:
    sync = app.tasks["keys.sync"]
    handles = app.enqueue_many([
        sync.call((1,), job_key="k"), sync.call((2,)), sync.call((3,), job_key="k"),
        sync.call((4,), idempotency_key="i"), sync.call((5,), idempotency_key="i"),
    ])
    assert [h.duplicate for h in handles] == [False, False, True, False, True]
    assert handles[0].id == handles[2].id and handles[3].id == handles[4].id
    assert handles[0].id < handles[1].id < handles[3].id
    job = handles[0].job()
    assert job is not None and job.payload["args"] == [3]


def test_the_async_api_reports_duplicates_too(app: App, queue: Queue) -> None:
    sync = app.tasks["keys.sync"]

    async def run() -> list[Any]:
        try:
            a = await sync.enqueue_async((1,), job_key="k")
            b = await sync.enqueue_async((2,), job_key="k")
            return [a, b]
        finally:
            await app.close_async()

    a, b = asyncio.run(run())
    assert (b.id, a.duplicate, b.duplicate) == (a.id, False, True)


@pytest.mark.slow
def test_ten_processes_debouncing_one_key_make_one_job(database_url: str, queue: Queue) -> None:
    processes = [spawn("job_key", database_url, script=ENQUEUER, values=[i * 10 + n
                                                                         for n in range(5)])
                 for i in range(10)]
    start(processes, delay=0.3)
    reports = collect(processes)
    ids = {job_id for report in reports for job_id in report["ids"]}
    assert len(ids) == 1
    assert sum(not dup for report in reports for dup in report["duplicates"]) == 1
    [job] = queue.list_jobs(task="keys.sync")
    assert job.payload["args"][0] in {i * 10 + 4 for i in range(10)}  # some process's last
