"""Enqueue: ids, the caller's transaction, the async twin, and bad input that must write nothing."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from _integration import count

from workhorse import (
    AsyncQueue,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    JobStatus,
    PayloadError,
    Queue,
)


def test_enqueue_returns_the_new_id_and_stores_the_job(queue: Queue, conn: Any) -> None:
    job_id = queue.enqueue(
        "mail.send",
        {"args": [7], "kwargs": {"to": "ü@example.com"}},
        EnqueueOptions(queue="mail", concurrency_key="tenant-1", priority=5, max_attempts=7),
    )
    job = queue.get_job(job_id)
    assert job is not None
    assert (job.id, job.task, job.queue, job.concurrency_key) == (
        job_id, "mail.send", "mail", "tenant-1",
    )
    assert job.payload == {"args": [7], "kwargs": {"to": "ü@example.com"}}
    assert (job.priority, job.max_attempts, job.attempts) == (5, 7, 0)
    assert job.status is JobStatus.READY
    assert job.result is None and job.error is None and job.started_at is None
    assert job.run_at <= datetime.now(UTC) + timedelta(seconds=1)
    assert job.on_failure == "fail"
    assert queue.get_job(job_id + 1000) is None


def test_default_options_are_keyless_default_queue(queue: Queue) -> None:
    job = queue.get_job(queue.enqueue("t", None))
    assert job is not None
    assert (job.queue, job.concurrency_key, job.priority) == ("default", None, 0)
    assert job.max_attempts == 3
    assert job.payload is None


def test_enqueue_many_returns_ids_in_input_order(queue: Queue, conn: Any) -> None:
    items = [
        ("t", {"n": n}, EnqueueOptions(queue=f"q{n % 3}", priority=(n * 7) % 5 - 2,
                                       concurrency_key=None if n % 2 else f"k{n % 4}"))
        for n in range(50)
    ]
    ids = queue.enqueue_many(items)
    assert len(ids) == 50
    assert ids == sorted(ids) and len(set(ids)) == 50
    for n, job_id in enumerate(ids):
        job = queue.get_job(job_id)
        assert job is not None and job.payload == {"n": n} and job.queue == f"q{n % 3}"
    # A second batch continues after the first: enqueue order is id order.
    more = queue.enqueue_many([("t", {"n": n}, None) for n in range(3)])
    assert more == sorted(more) and more[0] > ids[-1]
    assert queue.enqueue_many([]) == []


def test_enqueue_many_is_one_statement_in_one_transaction(database_url: str) -> None:
    executed: list[str] = []

    class CountingCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            executed.append(str(query))
            return super().execute(query, params, **kwargs)

    with psycopg.connect(database_url, autocommit=True, cursor_factory=CountingCursor) as c:
        ids = Queue(c).enqueue_many(
            [("t", {"n": n}, EnqueueOptions(queue=f"q{n % 4}", concurrency_key=f"k{n}"))
             for n in range(200)]
        )
        assert len(executed) == 1, executed
        # Autocommit: one statement is one transaction, so every row has the same xmin.
        row = c.execute(
            "SELECT count(*), count(DISTINCT xmin::text) FROM workhorse.jobs"
        ).fetchone()
        assert row == (200, 1)
    assert len(ids) == 200


def test_enqueue_many_accepts_on_failure_per_job(queue: Queue) -> None:
    ids = queue.enqueue_many(
        [("t", {}, None), ("t", {}, None)], on_failure=["hold", "fail"]
    )
    first, second = (queue.get_job(i) for i in ids)
    assert first is not None and first.on_failure == "hold"
    assert second is not None and second.on_failure == "fail"


def test_enqueue_many_rejects_bad_on_failure(queue: Queue, conn: Any) -> None:
    for bad in (["hold"], ["hold", "explode"], "hold", ["hold", "fail", "fail"]):
        with pytest.raises(InvalidOptionsError):
            queue.enqueue_many([("t", {}, None), ("t", {}, None)], on_failure=bad)
    assert count(conn) == 0


def test_caller_transaction_rollback_removes_the_job(database_url: str, conn: Any) -> None:
    with psycopg.connect(database_url) as caller:  # not autocommit: the caller owns the transaction
        q = Queue(caller)
        job_id = q.enqueue("t", {"a": 1}, EnqueueOptions(queue="q"))
        caller.execute("CREATE TABLE caller_write (v int)")
        assert q.get_job(job_id) is not None  # visible inside the transaction
        assert count(conn) == 0  # not committed behind the caller's back
        caller.rollback()
        assert q.get_job(job_id) is None
    assert count(conn) == 0
    assert conn.execute("SELECT to_regclass('caller_write')").fetchone() == (None,)


def test_caller_transaction_commit_keeps_the_job(database_url: str, conn: Any) -> None:
    with psycopg.connect(database_url) as caller:
        q = Queue(caller)
        ids = q.enqueue_many([("t", {"a": n}, EnqueueOptions(queue="q")) for n in range(3)])
        caller.execute("CREATE TABLE caller_write (v int)")
        assert count(conn) == 0
        caller.commit()
    assert count(conn) == 3
    assert [row[0] for row in conn.execute("SELECT id FROM workhorse.jobs ORDER BY id")] == ids


def test_enqueue_in_caller_transaction_with_governed_queue_rolls_back_hints(
    database_url: str, queue: Queue, conn: Any
) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 5, 1)])
    with psycopg.connect(database_url) as caller:
        Queue(caller).enqueue("t", {}, EnqueueOptions(queue="q", concurrency_key="k"))
        caller.rollback()
    assert count(conn) == 0
    assert conn.execute("SELECT count(*) FROM workhorse.key_hints").fetchone() == (0,)
    assert queue.claim("q", 10, 30) == []


def test_async_queue_twin(database_url: str) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            aq = AsyncQueue(aconn)
            await aq.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("aq", 2, 1)])
            first = await aq.enqueue("t", {"n": 0}, EnqueueOptions(queue="aq", concurrency_key="a"))
            ids = await aq.enqueue_many(
                [("t", {"n": n}, EnqueueOptions(queue="aq", concurrency_key=k))
                 for n, k in ((1, "a"), (2, "b"), (3, "c"))]
            )
            assert ids == sorted(ids) and ids[0] > first
            job = await aq.get_job(first)
            assert job is not None and job.status is JobStatus.READY
            claimed = await aq.claim("aq", 10, 30)
            assert [c.id for c in claimed] == [first, ids[1]]  # per key 1, max_active 2
            assert await aq.heartbeat([(c.id, c.fence, 30.0) for c in claimed]) == {
                c.id for c in claimed
            }
            await aq.complete(claimed[0].id, claimed[0].fence, {"ok": 1})
            assert await aq.fail(claimed[1].id, claimed[1].fence, {"type": "E", "message": "m",
                                                                    "traceback": None}) == "failed"
            health = await aq.health()
            assert health.depth["succeeded"] == 1 and health.depth["failed"] == 1
            policies = await aq.list_concurrency_policies()
            assert [p.queue for p in policies] == ["aq"]
            with pytest.raises(PayloadError):
                await aq.enqueue("t", {"x": math.nan}, EnqueueOptions(queue="aq"))

        # The caller's transaction, async: rollback removes, commit keeps.
        async with await psycopg.AsyncConnection.connect(database_url) as caller:
            aq = AsyncQueue(caller)
            await aq.enqueue("t", {}, EnqueueOptions(queue="tx"))
            await caller.rollback()
            kept = await aq.enqueue("t", {}, EnqueueOptions(queue="tx"))
            await caller.commit()
            cur = await caller.execute("SELECT id FROM workhorse.jobs WHERE queue = 'tx'")
            assert await cur.fetchall() == [(kept,)]
            await caller.commit()

    asyncio.run(main())


# ---- bad input: the typed error, and nothing written ------------------------------------------

class Unserialisable:
    pass


NOW = datetime.now(UTC)

BAD_PAYLOADS: dict[str, Any] = {
    "object": {"x": Unserialisable()},
    "set": {1, 2},
    "bytes": b"raw",
    "tuple-key": {(1, 2): "v"},
    "nan": {"x": float("nan")},
    "infinity": [float("inf")],
    "-infinity": {"deep": [{"x": -math.inf}]},
    "too-large": "x" * (1024 * 1024),  # the quotes push it over 1 MiB
    "too-large-multibyte": "é" * (512 * 1024 + 1),
    "nul": {"s": "a\x00b"},
    "nul-in-key": {"a\x00": 1},
    "lone-surrogate": {"s": "\ud800"},
}


def _deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


_circular: dict[str, Any] = {}
_circular["self"] = _circular
BAD_PAYLOADS["circular"] = _circular
BAD_PAYLOADS["too-deep"] = _deep(100_000)


def test_bad_payload_raises_and_writes_nothing(queue: Queue, conn: Any) -> None:
    # One database for every case (a fresh one costs more than all of them together).
    for name, payload in BAD_PAYLOADS.items():
        with pytest.raises(PayloadError):
            queue.enqueue("t", payload, EnqueueOptions(queue="q"))
            pytest.fail(f"{name}: accepted")
        assert count(conn) == 0, name


def test_payload_at_the_limit_is_accepted(queue: Queue) -> None:
    payload = "x" * (1024 * 1024 - 2)  # exactly 1 MiB once encoded with its quotes
    job = queue.get_job(queue.enqueue("t", payload))
    assert job is not None and job.payload == payload


def test_escaped_backslash_before_u0000_text_is_not_nul(queue: Queue) -> None:
    text = "\\u0000 is six characters, not a NUL"
    job = queue.get_job(queue.enqueue("t", {"s": text}))
    assert job is not None and job.payload == {"s": text}


BAD_OPTIONS: dict[str, dict[str, Any]] = {
    "empty-queue": {"queue": ""},
    "long-queue": {"queue": "q" * 256},
    "queue-not-str": {"queue": 5},
    "nul-queue": {"queue": "a\x00b"},
    "empty-key": {"concurrency_key": ""},
    "long-key": {"concurrency_key": "k" * 256},
    "key-not-str": {"concurrency_key": 42},
    "naive-run-at": {"run_at": datetime.now()},
    "run-at-not-datetime": {"run_at": "2030-01-01T00:00:00Z"},
    "negative-delay": {"delay": -1},
    "negative-timedelta": {"delay": timedelta(seconds=-0.5)},
    "nan-delay": {"delay": math.nan},
    "infinite-delay": {"delay": math.inf},
    "huge-delay": {"delay": 1e13},
    "huge-timedelta": {"delay": timedelta(days=999_999_999)},
    "bool-delay": {"delay": True},
    "both": {"run_at": NOW, "delay": 5},
    "max-attempts-0": {"max_attempts": 0},
    "max-attempts-1001": {"max_attempts": 1001},
    "max-attempts-float": {"max_attempts": 2.0},
    "priority-high": {"priority": 32768},
    "priority-low": {"priority": -32769},
    "priority-bool": {"priority": True},
}


def test_bad_options_or_task_raise_before_anything_is_written(queue: Queue, conn: Any) -> None:
    for name, bad in BAD_OPTIONS.items():
        with pytest.raises(InvalidOptionsError):
            queue.enqueue("t", {}, EnqueueOptions(**bad))
            pytest.fail(f"{name}: accepted")
    for task in ["", "t" * 256, None, 7, "a\x00"]:
        with pytest.raises(InvalidOptionsError):
            queue.enqueue(task, {})
            pytest.fail(f"task {task!r}: accepted")
        with pytest.raises(InvalidOptionsError):
            queue.enqueue_many([("ok", {}, None), (task, {}, None)])
    assert count(conn) == 0


def test_names_of_255_characters_are_accepted(queue: Queue) -> None:
    name = "n" * 255
    job = queue.get_job(queue.enqueue(name, {}, EnqueueOptions(queue=name, concurrency_key=name)))
    assert job is not None and (job.task, job.queue, job.concurrency_key) == (name, name, name)


def test_enqueue_many_with_only_the_last_bad_writes_nothing(queue: Queue, conn: Any) -> None:
    good = [("t", {"n": n}, EnqueueOptions(queue="q", concurrency_key=f"k{n}")) for n in range(20)]
    bad_last: list[Any] = [
        ("t", {"x": math.nan}, None),
        ("t", "x" * (1024 * 1024 + 1), None),
        ("t", {"s": "\x00"}, None),
        ("", {}, None),
        ("t", {}, "not-options"),
        ("only-two", {}),
    ]
    for last in bad_last:
        with pytest.raises((PayloadError, InvalidOptionsError)):
            queue.enqueue_many([*good, last])
            pytest.fail(f"{last!r:.60}: accepted")
        assert count(conn) == 0, repr(last)[:60]


def test_bad_input_in_caller_transaction_leaves_it_usable(database_url: str, conn: Any) -> None:
    with psycopg.connect(database_url) as caller:
        q = Queue(caller)
        q.enqueue("t", {}, EnqueueOptions(queue="q"))
        with pytest.raises(PayloadError):
            q.enqueue("t", {"x": math.inf})
        with pytest.raises(InvalidOptionsError):
            q.enqueue("t", {}, EnqueueOptions(delay=1e13))
        q.enqueue("t", {}, EnqueueOptions(queue="q"))  # the transaction is not aborted
        caller.commit()
    assert count(conn) == 2


def test_run_at_and_delay_are_stored_as_due_times(queue: Queue) -> None:
    run_at = datetime.now(UTC) + timedelta(hours=2)
    at = queue.get_job(queue.enqueue("t", {}, EnqueueOptions(run_at=run_at)))
    later = queue.get_job(queue.enqueue("t", {}, EnqueueOptions(delay=timedelta(minutes=5))))
    past = queue.get_job(
        queue.enqueue("t", {}, EnqueueOptions(run_at=datetime.now(UTC) - timedelta(days=1)))
    )
    now = queue.get_job(queue.enqueue("t", {}, EnqueueOptions(delay=0)))
    assert at is not None and at.status is JobStatus.SCHEDULED and at.run_at == run_at
    assert later is not None and later.status is JobStatus.SCHEDULED
    assert timedelta(minutes=4) < later.run_at - later.enqueued_at <= timedelta(minutes=5)
    assert past is not None and past.status is JobStatus.READY
    assert now is not None and now.status is JobStatus.READY


def test_far_delay_round_trips(queue: Queue) -> None:
    job = queue.get_job(queue.enqueue("t", {}, EnqueueOptions(delay=timedelta(days=365 * 200))))
    assert job is not None and job.run_at.year >= datetime.now(UTC).year + 199


@pytest.mark.parametrize("options", [
    EnqueueOptions(),
    EnqueueOptions(queue="mail", concurrency_key="tenant-1", priority=-3, max_attempts=9),
    EnqueueOptions(queue="later", run_at=datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)),
    EnqueueOptions(queue="soon", delay=timedelta(minutes=5), priority=32767),
])
def test_a_batch_sharing_one_options_object_stores_what_one_object_per_job_does(
    queue: Queue, conn: Any, options: EnqueueOptions
) -> None:
    """enqueue_many sends the options once when the batch shares one object (a statement of its
    own): the jobs must be the same as with an equal copy per job (one value per job)."""
    import dataclasses

    def stored(ids: list[int]) -> list[tuple[Any, ...]]:
        return conn.execute(
            "SELECT task, queue, ckey, priority, payload, status, max_attempts, on_failure, meta,"
            " idempotency_key, run_at - enqueued_at > interval '4 minutes',"
            " CASE WHEN run_at > now() + interval '1 hour' THEN run_at END"
            " FROM workhorse.jobs WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()

    def batch(copies: bool) -> list[tuple[str, Any, EnqueueOptions]]:
        return [(f"t{i % 2}", {"args": [i]}, dataclasses.replace(options) if copies else options)
                for i in range(5)]

    shared = queue.enqueue_many(batch(copies=False), on_failure=["fail", "hold"] * 2 + ["fail"])
    apart = queue.enqueue_many(batch(copies=True), on_failure=["fail", "hold"] * 2 + ["fail"])
    assert len(shared) == len(apart) == 5 and max(shared) < min(apart)
    assert stored(shared) == stored(apart)


def test_a_shared_idempotency_key_makes_one_job_for_the_whole_batch(queue: Queue) -> None:
    options = EnqueueOptions(queue="q", idempotency_key="once")
    ids = queue.enqueue_many([("t", {"args": [i]}, options) for i in range(3)])
    assert len(set(ids)) == 1
    assert queue.enqueue_many([("t", {"args": [9]}, EnqueueOptions(queue="q",
                                                                    idempotency_key="once"))]) \
        == ids[:1]
