"""health(): per-policy capacity and blocked work, and depth by status, in known states."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from workhorse import (
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    JobStatus,
    PolicyHealth,
    Queue,
    QueueHealth,
)

ERROR = {"type": "E", "message": "m", "traceback": None}


def _enqueue(q: Queue, queue: str, keys: list[str | None], **options: Any) -> list[int]:
    return q.enqueue_many(
        [("t", {}, EnqueueOptions(queue=queue, concurrency_key=k, **options)) for k in keys]
    )


def _policy(health: QueueHealth, queue: str) -> PolicyHealth:
    [found] = [p for p in health.policies if p.queue == queue]
    return found


def test_empty_database(queue: Queue) -> None:
    health = queue.health()
    assert health == QueueHealth(policies=[], depth={s.value: 0 for s in JobStatus})


def test_depth_counts_every_status(queue: Queue) -> None:
    _enqueue(queue, "q", [None] * 9)
    _enqueue(queue, "q", [None, None], delay=3600)
    jobs = queue.claim("q", 6, 30)
    queue.complete(jobs[0].id, jobs[0].fence)
    queue.complete(jobs[1].id, jobs[1].fence)
    queue.fail(jobs[2].id, jobs[2].fence, ERROR)
    held = queue.enqueue_many([("t", {}, EnqueueOptions(queue="h"))], on_failure=["hold"])
    [h] = queue.claim("h", 1, 30)
    assert h.id == held[0]
    queue.fail(h.id, h.fence, ERROR)
    queue.conn.execute("UPDATE workhorse.jobs SET status = 'canceled' WHERE id = %s", (jobs[3].id,))
    assert queue.health().depth == {
        "scheduled": 2, "ready": 3, "active": 2, "succeeded": 2, "failed": 1, "held": 1,
        "canceled": 1, "waiting": 0, "expired": 0, "suspended": 0,
    }


def test_policy_health_in_known_states(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("both", 3, 1),
        ConcurrencyPolicyDefinition("per-key", None, 2),
        ConcurrencyPolicyDefinition("queue-only", 10),
    ])
    a1, a2, _a3, b1, n1, _n2 = _enqueue(queue, "both", ["a", "a", "a", "b", None, None])
    claimed = queue.claim("both", 10, 30)
    assert [job.id for job in claimed] == [a1, b1, n1]

    health = queue.health()
    assert [p.queue for p in health.policies] == ["both", "per-key", "queue-only"]
    assert _policy(health, "both") == PolicyHealth(
        namespace="ns", queue="both", max_active=3, max_active_per_key=1, active=3, available=0,
        blocked_ready=3, saturated_keys=2, capped=False, active_units=3, active_jobs=3,
    )  # the queue is full: every ready job is blocked
    assert _policy(health, "per-key") == PolicyHealth(
        namespace="ns", queue="per-key", max_active=None, max_active_per_key=2, active=0,
        available=None, blocked_ready=0, saturated_keys=0, capped=False,
    )
    assert _policy(health, "queue-only").available == 10

    queue.complete(claimed[0].id, claimed[0].fence)  # a1 done: a is free, b still saturated
    both = _policy(queue.health(), "both")
    assert (both.active, both.available, both.blocked_ready, both.saturated_keys) == (2, 1, 0, 1)

    [a2_claimed] = queue.claim("both", 1, 30)
    assert a2_claimed.id == a2
    queue.complete(claimed[2].id, claimed[2].fence)  # n1 done: room, but a is saturated again
    both = _policy(queue.health(), "both")
    assert (both.active, both.available, both.blocked_ready, both.saturated_keys) == (2, 1, 1, 2)

    # Per-key only: two keys saturated at 2, their remaining ready jobs are blocked.
    _enqueue(queue, "per-key", ["x"] * 3 + ["y"] * 2 + ["z"])
    assert len(queue.claim("per-key", 10, 30)) == 5
    per_key = _policy(queue.health(), "per-key")
    assert (per_key.active, per_key.available, per_key.blocked_ready, per_key.saturated_keys) == (
        5, None, 1, 2,
    )
    assert asdict(per_key)["max_active_per_key"] == 2


def test_expired_leases_do_not_count_as_active(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 2, 1)])
    _enqueue(queue, "q", ["a", "a"])
    queue.claim("q", 1, 0.5)
    assert _policy(queue.health(), "q").active == 1
    time.sleep(0.65)
    health = queue.health()
    assert (_policy(health, "q").active, _policy(health, "q").saturated_keys) == (0, 0)
    assert health.depth["active"] == 1  # the row is still active until a claim reclaims it


def test_capped_when_more_than_1000_ready(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("big", 1),
        ConcurrencyPolicyDefinition("exact", 1),
    ])
    _enqueue(queue, "big", [None] * 1500)
    _enqueue(queue, "exact", [None] * 1001)
    queue.claim("big", 1, 30)
    queue.claim("exact", 1, 30)
    health = queue.health()
    big, exact = _policy(health, "big"), _policy(health, "exact")
    assert (big.capped, big.blocked_ready) == (True, 1000)
    assert (exact.capped, exact.blocked_ready) == (False, 1000)  # 1,000 ready left: all sampled
    assert health.depth["ready"] == 2499
