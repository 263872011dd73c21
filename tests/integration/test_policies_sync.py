"""Desired-state sync of concurrency policies: namespaces, prune, conflicts, validation, report."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime
from typing import Any

import psycopg
import pytest
from _integration import lock_wait

from workhorse import (
    AsyncQueue,
    ConcurrencyPolicy,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidPolicyError,
    PolicyConflictError,
    Queue,
    SyncReport,
)

D = ConcurrencyPolicyDefinition


def _policies(conn: Any) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT namespace, queue, max_active, max_active_per_key, created_at, updated_at"
        " FROM workhorse.policies ORDER BY queue"
    ).fetchall()


def _limits(policies: list[ConcurrencyPolicy]) -> list[tuple[str, str, int | None, int | None]]:
    return [(p.namespace, p.queue, p.max_active, p.max_active_per_key) for p in policies]


def test_sync_returns_the_namespace_rows_typed(queue: Queue) -> None:
    queue.sync_concurrency_policies("other", [D("elsewhere", 1)])
    rows = queue.sync_concurrency_policies(
        "billing", [D("mail", 20, 3), D("api", None, 2), D("batch", 1)]
    )
    assert _limits(rows) == [
        ("billing", "api", None, 2), ("billing", "batch", 1, None), ("billing", "mail", 20, 3),
    ]
    assert all(isinstance(p, ConcurrencyPolicy) for p in rows)
    assert all(isinstance(p.created_at, datetime) and p.created_at.tzinfo for p in rows)
    listed = queue.list_concurrency_policies()
    assert _limits(listed) == [("billing", q, m, k) for _, q, m, k in _limits(rows)] + [
        ("other", "elsewhere", 1, None)
    ]
    assert _limits(queue.list_concurrency_policies("other")) == [("other", "elsewhere", 1, None)]
    assert queue.list_concurrency_policies("nobody") == []


def test_sync_report_created_updated_unchanged_pruned(queue: Queue, conn: Any) -> None:
    report = queue.sync_report("ns", [D("a", 5), D("b", 5, 2), D("c", None, 1)])
    assert report == SyncReport(created=["a", "b", "c"])
    stamps = {row[1]: row[4:] for row in _policies(conn)}

    report = queue.sync_report("ns", [D("a", 5), D("b", 6, 2), D("d", 1)])
    assert report == SyncReport(created=["d"], updated=["b"], unchanged=["a"], pruned=["c"])
    after = {row[1]: row[4:] for row in _policies(conn)}
    assert after["a"] == stamps["a"]  # unchanged is untouched
    assert after["b"][0] == stamps["b"][0] and after["b"][1] >= stamps["b"][1]
    assert "c" not in after

    assert queue.sync_report("ns", [D("a", 5), D("b", 6, 2), D("d", 1)]) == SyncReport(
        unchanged=["a", "b", "d"]
    )
    # Changing only the per-key limit, or dropping it, is an update too.
    assert queue.sync_report("ns", [D("a", 5, 5), D("b", 6), D("d", 1)]).updated == ["a", "b"]


def test_prune_deletes_only_this_namespaces_omitted_queues(queue: Queue, conn: Any) -> None:
    queue.sync_concurrency_policies("one", [D("a", 1), D("b", 1)])
    queue.sync_concurrency_policies("two", [D("x", 1), D("y", 1)])
    rows = queue.sync_concurrency_policies("one", [D("b", 2)], prune=True)
    assert _limits(rows) == [("one", "b", 2, None)]
    assert [(r[0], r[1]) for r in _policies(conn)] == [("one", "b"), ("two", "x"), ("two", "y")]
    # An empty sync with prune empties the namespace, and only it.
    assert queue.sync_concurrency_policies("one", [], prune=True) == []
    assert [(r[0], r[1]) for r in _policies(conn)] == [("two", "x"), ("two", "y")]


def test_prune_false_keeps_omitted_queues(queue: Queue, conn: Any) -> None:
    queue.sync_concurrency_policies("one", [D("a", 1), D("b", 1)])
    report = queue.sync_report("one", [D("c", 3)], prune=False)
    assert report == SyncReport(created=["c"])
    rows = queue.sync_concurrency_policies("one", [D("a", 4)], prune=False)
    assert _limits(rows) == [("one", "a", 4, None), ("one", "b", 1, None), ("one", "c", 3, None)]


def test_conflict_with_another_namespace_writes_nothing(queue: Queue, conn: Any) -> None:
    queue.sync_concurrency_policies("owner", [D("taken", 5)])
    queue.sync_concurrency_policies("me", [D("mine", 1), D("old", 1)])
    before = _policies(conn)
    with pytest.raises(PolicyConflictError, match="taken"):
        # A new queue, an update, a prune and the conflict, all in one call.
        queue.sync_concurrency_policies("me", [D("fresh", 3), D("mine", 2), D("taken", 7)])
    assert _policies(conn) == before
    with pytest.raises(PolicyConflictError):
        queue.sync_report("me", [D("taken", 5)], prune=False)
    assert _policies(conn) == before


def test_conflict_inside_the_callers_transaction_leaves_it_usable(
    database_url: str, queue: Queue, conn: Any
) -> None:
    queue.sync_concurrency_policies("owner", [D("taken", 5)])
    with psycopg.connect(database_url) as caller:
        q = Queue(caller)
        q.enqueue("t", {}, EnqueueOptions(queue="mine"))
        with pytest.raises(PolicyConflictError):
            q.sync_concurrency_policies("me", [D("mine", 2), D("taken", 1)])
        rows = q.sync_concurrency_policies("me", [D("mine", 2)])  # the transaction goes on
        assert _limits(rows) == [("me", "mine", 2, None)]
        assert _limits(queue.list_concurrency_policies("me")) == []  # not committed yet
        caller.commit()
    assert _limits(queue.list_concurrency_policies("me")) == [("me", "mine", 2, None)]
    assert conn.execute("SELECT count(*) FROM workhorse.jobs").fetchone() == (1,)


def test_sync_as_first_statement_of_callers_transaction_rolls_back(
    database_url: str, queue: Queue
) -> None:
    with psycopg.connect(database_url) as caller:
        Queue(caller).sync_concurrency_policies("me", [D("mine", 2)])
        assert queue.list_concurrency_policies() == []  # nothing behind the caller's back
        caller.rollback()
        assert Queue(caller).sync_report("me", [D("again", 1)]) == SyncReport(created=["again"])
        caller.commit()
    assert _limits(queue.list_concurrency_policies()) == [("me", "again", 1, None)]

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as c:
            await AsyncQueue(c).sync_concurrency_policies("me", [D("async", 2)])
            assert _limits(queue.list_concurrency_policies()) == [("me", "again", 1, None)]
            await c.rollback()

    asyncio.run(main())
    assert _limits(queue.list_concurrency_policies()) == [("me", "again", 1, None)]


@pytest.mark.parametrize(
    "build",
    [
        lambda: [D("q", 0)],
        lambda: [D("q", -1)],
        lambda: [D("q", 1, 0)],
        lambda: [D("q", 2, 3)],
        lambda: [D("q", None, None)],
        lambda: [D("q", None)],
        lambda: [D("", 1)],
        lambda: [D("q" * 256, 1)],
        lambda: [D("q", True)],
        lambda: [D("q", 2.0)],
        lambda: [D("q", 1), D("q", 2)],
        lambda: [D(f"q{n}", 1) for n in range(1001)],
        lambda: ["q"],
    ],
    ids=["zero", "negative", "per-key-zero", "per-key-over", "neither", "neither-default",
         "empty-name", "long-name", "bool", "float", "duplicate", "1001", "not-a-definition"],
)
def test_invalid_definitions_raise_and_write_nothing(queue: Queue, conn: Any, build: Any) -> None:
    queue.sync_concurrency_policies("ns", [D("keep", 1)])
    before = _policies(conn)
    with pytest.raises(InvalidPolicyError):
        queue.sync_concurrency_policies("ns", build(), prune=True)
    assert _policies(conn) == before


@pytest.mark.parametrize("namespace", ["", "n" * 256, None])
def test_invalid_namespace(queue: Queue, namespace: Any) -> None:
    with pytest.raises(InvalidPolicyError):
        queue.sync_concurrency_policies(namespace, [D("q", 1)])


def test_a_thousand_definitions_are_accepted(queue: Queue) -> None:
    rows = queue.sync_concurrency_policies("big", [D(f"q{n:04}", n + 1) for n in range(1000)])
    assert len(rows) == 1000 and rows[999].max_active == 1000


def test_async_sync_report(database_url: str) -> None:
    async def main() -> tuple[SyncReport, list[ConcurrencyPolicy]]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
            aq = AsyncQueue(c)
            await aq.sync_concurrency_policies("ns", [D("a", 1), D("b", 1)])
            report = await aq.sync_report("ns", [D("a", 2)])
            return report, await aq.list_concurrency_policies("ns")

    report, rows = asyncio.run(main())
    assert report == SyncReport(updated=["a"], pruned=["b"])
    assert _limits(rows) == [("ns", "a", 2, None)]


def test_concurrent_syncs_of_a_new_queue_serialize(database_url: str, queue: Queue) -> None:
    """Two namespaces race to create one queue: one wins, the other gets PolicyConflictError."""
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def race(namespace: str) -> None:
        with psycopg.connect(database_url) as c:
            barrier.wait()
            try:
                Queue(c).sync_concurrency_policies(namespace, [D("contested", 1)])
                time.sleep(0.2)  # hold the lock a while, so the loser really waits
                c.commit()
                outcomes.append("won")
            except PolicyConflictError:
                outcomes.append("conflict")

    threads = [threading.Thread(target=race, args=(ns,)) for ns in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict", "won"]
    assert len(queue.list_concurrency_policies()) == 1


@pytest.mark.parametrize("target", ["same queue", "another queue"])
def test_sync_waits_for_an_in_flight_governed_claim(
    database_url: str, queue: Queue, target: str
) -> None:
    """A policy change takes the queue's admission lock: it waits for a claim's transaction,
    seen waiting on a lock in pg_stat_activity. The same check on a sync of another queue, which
    has no reason to wait, sees no wait: it cannot pass for a sync that does not wait."""
    queue.sync_concurrency_policies("ns", [D("q", 5, 1)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", concurrency_key=k)) for k in "abc"])
    namespace, name = ("ns", "q") if target == "same queue" else ("elsewhere", "other")
    with psycopg.connect(database_url) as claimer, \
            psycopg.connect(database_url, autocommit=True) as syncing:
        assert len(Queue(claimer).claim("q", 10, 30)) == 3  # lock held until commit
        done = threading.Event()

        def sync() -> None:
            Queue(syncing).sync_concurrency_policies(namespace, [D(name, 1, 1)])
            done.set()

        thread = threading.Thread(target=sync)
        thread.start()
        waited = lock_wait(queue.conn, syncing.info.backend_pid, done.is_set,
                           blocked_by=claimer.info.backend_pid)
        if target == "same queue":
            assert waited is not None, "the sync should wait for the claim's admission lock"
            assert not done.is_set()
        else:
            assert waited is None and done.wait(30)
        claimer.commit()
        assert done.wait(30)
        thread.join()
