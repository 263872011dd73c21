"""Suspended jobs in health (docs/design.md "Reason codes", docs/operations.md "Durable jobs"):
per queue, its suspended jobs by what they wait for (`QueueHealth.suspended`, with the soonest
timer), `depth["suspended"]`, the queue list's depth, and the reason code `suspended` (its count
and a detail in words): present while the queue has suspended jobs, gone at the next read once
none is left. The count reads jobs_suspended_idx, never the table. The rule itself is pure and
tested without a database too."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from _durable_world import QUEUE, World, suspended_world

from workhorse import EnqueueOptions, Queue, _reasons, _sql


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    found = suspended_world(database_url)
    try:
        yield found
    finally:
        found.app.close()


def _suspended_reason(q: Queue) -> list[tuple[str | None, int, str]]:
    return [(r.queue, r.count, r.detail) for r in q.health().reasons if r.code == "suspended"]


def test_health_counts_suspended_jobs_by_what_they_wait_for(
        world: World, queue: Queue, conn: psycopg.Connection[Any]) -> None:
    health = queue.health()
    assert health.suspended == {QUEUE: {"sleep": 3, "signal": 2, "children": 1}}
    assert health.depth["suspended"] == 6
    soonest = conn.execute("SELECT min(wake_at) FROM workhorse.jobs WHERE status = 'suspended'"
                           ).fetchone()[0]
    assert health.suspended_next_wake_at == {QUEUE: soonest}
    assert _suspended_reason(queue) == [
        (QUEUE, 6, "6 suspended: 3 sleeping, 2 waiting for a signal, "
                   "1 waiting for their children")]
    [summary] = [s for s in queue.list_queues() if s.queue == QUEUE]
    assert summary.depth["suspended"] == 6  # a queue of only suspended jobs is listed


def test_the_counts_follow_signals_and_cancels_and_the_code_goes_with_the_last(
        world: World, queue: Queue) -> None:
    assert queue.signal(world.waiter, "approval", {"ok": True})
    health = queue.health()
    assert health.suspended[QUEUE] == {"sleep": 3, "signal": 1, "children": 1}
    assert health.depth["suspended"] == 5 and health.depth["ready"] == 1
    assert _suspended_reason(queue)[0][1] == 5
    queue.cancel_jobs([world.sleeper, world.patient, world.parent, *world.kids])
    health = queue.health()
    assert health.suspended == {} and health.suspended_next_wake_at == {}
    assert health.depth["suspended"] == 0
    assert _suspended_reason(queue) == []
    assert "suspended" not in {r.code for r in health.reasons}


def test_a_queue_with_ready_work_and_suspended_jobs_reports_both(
        world: World, queue: Queue) -> None:
    """The code is informational: beside the others, not instead of them."""
    queue.enqueue("ops.other", {}, EnqueueOptions(queue=QUEUE))
    codes = {r.code: r.count for r in queue.health().reasons if r.queue == QUEUE}
    assert codes == {"no_worker": 1, "suspended": 6}


def test_the_count_reads_the_suspended_index_not_the_table(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.enqueue_many([("t", {}, EnqueueOptions(queue=f"q{n % 5}")) for n in range(20_000)])
    conn.execute("ANALYZE workhorse.jobs")
    plan = "\n".join(row[0] for row in conn.execute(
        psycopg.sql.SQL("EXPLAIN ") + _sql.statement("suspended_health")).fetchall())
    assert "jobs_suspended_idx" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_the_rule_without_a_database() -> None:
    now = datetime.now(UTC)
    counts = {"a": {"sleep": 0, "signal": 4, "children": 0},
              "b": {"sleep": 0, "signal": 0, "children": 0}}
    reasons = _reasons.queue_reasons(suspended=counts, now=now)
    assert [(r.queue, r.code, r.count, r.detail) for r in reasons] == [
        ("a", "suspended", 4, "4 suspended: 4 waiting for a signal")]
    assert _reasons.suspended_detail({"sleep": 1, "signal": 0, "children": 2, "later": 1}) == (
        "4 suspended: 1 sleeping, 2 waiting for their children, 1 waiting on later")
    # After the limits' codes and before `expired`/`stalled`, as REASON_CODES orders them.
    ordered = _reasons.queue_reasons(suspended=counts, expired={"a": 1}, now=now)
    assert [r.code for r in ordered] == ["suspended", "stalled"]
