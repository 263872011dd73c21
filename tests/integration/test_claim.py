"""Claim: admission order, scheduling, and the limits of invariants 1 and 2."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from _integration import count

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, JobStatus, Queue


def _ids(jobs: list[Any]) -> list[int]:
    return [job.id for job in jobs]


def test_claim_takes_priority_desc_then_fifo(path_queue: Queue) -> None:
    q = path_queue
    plan = [(0, "a"), (5, "b"), (-3, None), (5, "a"), (0, None), (32767, "c"), (-32768, "b"),
            (5, None), (0, "c"), (1, "a")]
    ids = q.enqueue_many(
        [("t", {"n": n}, EnqueueOptions(queue="q", priority=p, concurrency_key=k))
         for n, (p, k) in enumerate(plan)]
    )
    expected = [job_id for _, job_id in sorted(zip(plan, ids, strict=True),
                                               key=lambda pair: (-pair[0][0], pair[1]))]
    # One at a time: each claim admits the best job left.
    claimed = [q.claim("q", 1, 30) for _ in plan]
    assert [_ids(batch) for batch in claimed] == [[job_id] for job_id in expected]
    assert q.claim("q", 1, 30) == []


def test_claim_batch_comes_back_in_admission_order(path_queue: Queue) -> None:
    q = path_queue
    ids = q.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", priority=n % 3, concurrency_key=f"k{n % 4}"))
         for n in range(12)]
    )
    batch = q.claim("q", 5, 30)
    expected = sorted(ids, key=lambda i: (-(ids.index(i) % 3), i))[:5]
    assert _ids(batch) == expected
    assert all(job.attempts == 1 and job.fence > 0 for job in batch)
    assert len({job.fence for job in batch}) == 5


def test_claimed_job_is_active_with_lease_and_fence(path_queue: Queue) -> None:
    q = path_queue
    job_id = q.enqueue("mail.send", {"args": [1]}, EnqueueOptions(queue="q", concurrency_key="k"))
    [claimed] = q.claim("q", 10, 30)
    assert (claimed.id, claimed.task, claimed.queue, claimed.concurrency_key) == (
        job_id, "mail.send", "q", "k",
    )
    assert claimed.payload == {"args": [1]}
    assert timedelta(seconds=29) < claimed.lease_until - datetime.now(UTC) <= timedelta(seconds=30)
    job = q.get_job(job_id)
    assert job is not None and job.status is JobStatus.ACTIVE and job.fence == claimed.fence
    assert job.started_at is not None and job.attempts == 1


def test_fences_are_monotonic(path_queue: Queue) -> None:
    q = path_queue
    q.enqueue_many([("t", {}, EnqueueOptions(queue="q")) for _ in range(6)])
    fences = [job.fence for _ in range(3) for job in q.claim("q", 2, 30)]
    assert fences == sorted(fences) and len(set(fences)) == 6


def test_other_queues_are_not_claimed(path_queue: Queue) -> None:
    q = path_queue
    q.enqueue("t", {}, EnqueueOptions(queue="other"))
    assert q.claim("q", 10, 30) == []
    assert len(q.claim("other", 10, 30)) == 1


def test_nonpositive_limit_claims_nothing(path_queue: Queue, conn: Any) -> None:
    path_queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    assert path_queue.claim("q", 0, 30) == []
    assert path_queue.claim("q", -1, 30) == []
    assert count(conn, "status = 'ready'") == 1


def test_scheduled_jobs_wait_until_due(path_queue: Queue) -> None:
    q = path_queue
    soon = q.enqueue("t", {}, EnqueueOptions(queue="q", delay=0.6, concurrency_key="k"))
    at = q.enqueue("t", {}, EnqueueOptions(queue="q", run_at=datetime.now(UTC) + timedelta(
        seconds=0.6)))
    far = q.enqueue("t", {}, EnqueueOptions(queue="q", delay=timedelta(hours=1)))
    assert q.claim("q", 10, 30) == []
    job = q.get_job(soon)
    assert job is not None and job.status is JobStatus.SCHEDULED
    time.sleep(0.8)
    assert sorted(_ids(q.claim("q", 10, 30))) == [soon, at]
    assert q.claim("q", 10, 30) == []
    far_job = q.get_job(far)
    assert far_job is not None and far_job.status is JobStatus.SCHEDULED


def test_due_scheduled_job_competes_by_priority(path_queue: Queue) -> None:
    q = path_queue
    ready = q.enqueue("t", {}, EnqueueOptions(queue="q", priority=1, concurrency_key="a"))
    urgent = q.enqueue("t", {}, EnqueueOptions(queue="q", priority=9, delay=0.3,
                                               concurrency_key="b"))
    time.sleep(0.5)
    assert _ids(q.claim("q", 1, 30)) == [urgent]
    assert _ids(q.claim("q", 1, 30)) == [ready]


# ---- limits ------------------------------------------------------------------------------------

def _enqueue(q: Queue, queue: str, keys: list[str | None], **options: Any) -> list[int]:
    return q.enqueue_many(
        [("t", {}, EnqueueOptions(queue=queue, concurrency_key=k, **options)) for k in keys]
    )


def test_max_active_only_ignores_keys(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", max_active=3)])
    ids = _enqueue(queue, "q", ["k", "k", "k", "k", None])
    first = queue.claim("q", 10, 30)
    assert _ids(first) == ids[:3]  # same key three times: only the queue limit applies
    assert queue.claim("q", 10, 30) == []
    queue.complete(first[0].id, first[0].fence)
    assert _ids(queue.claim("q", 10, 30)) == [ids[3]]


def test_per_key_only_has_no_queue_limit(queue: Queue) -> None:
    queue.sync_concurrency_policies(
        "ns", [ConcurrencyPolicyDefinition("q", max_active=None, max_active_per_key=2)]
    )
    keys: list[str | None] = [f"k{n % 10}" for n in range(50)]
    _enqueue(queue, "q", keys)
    claimed = queue.claim("q", 100, 30)
    assert len(claimed) == 20  # 10 keys x 2
    per_key: dict[str | None, int] = {}
    for job in claimed:
        per_key[job.concurrency_key] = per_key.get(job.concurrency_key, 0) + 1
    assert set(per_key.values()) == {2}
    assert queue.claim("q", 100, 30) == []


def test_both_limits(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 5, 2)])
    ids = _enqueue(queue, "q", ["a", "a", "a", "b", "b", "c", "c", "c", "d"])
    claimed = queue.claim("q", 100, 30)
    assert _ids(claimed) == [ids[0], ids[1], ids[3], ids[4], ids[5]]
    assert queue.claim("q", 100, 30) == []
    queue.complete(claimed[0].id, claimed[0].fence)  # frees one of "a" and one queue slot
    assert _ids(queue.claim("q", 100, 30)) == [ids[2]]


def test_keyless_jobs_use_queue_capacity_only(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("capped", max_active=3, max_active_per_key=1),
        ConcurrencyPolicyDefinition("uncapped", max_active=None, max_active_per_key=1),
    ])
    capped = _enqueue(queue, "capped", [None] * 5)
    assert _ids(queue.claim("capped", 10, 30)) == capped[:3]
    uncapped = _enqueue(queue, "uncapped", [None] * 5 + ["k", "k"])
    assert _ids(queue.claim("uncapped", 10, 30)) == uncapped[:6]


def test_keyless_and_keyed_share_the_queue_limit_in_order(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 4, 1)])
    ids = _enqueue(queue, "q", [None, "a", "a", None, "b", None])
    assert _ids(queue.claim("q", 10, 30)) == [ids[0], ids[1], ids[3], ids[4]]


def test_keys_are_scoped_per_queue(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("one", max_active=10, max_active_per_key=1),
        ConcurrencyPolicyDefinition("two", max_active=10, max_active_per_key=1),
    ])
    one = _enqueue(queue, "one", ["shared", "shared"])
    two = _enqueue(queue, "two", ["shared", "shared"])
    assert _ids(queue.claim("one", 10, 30)) == [one[0]]
    # "shared" is saturated in "one", not in "two".
    assert _ids(queue.claim("two", 10, 30)) == [two[0]]
    assert queue.claim("one", 10, 30) == [] and queue.claim("two", 10, 30) == []


def test_ungoverned_queue_does_not_share_a_key_with_a_governed_one(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("gov", 10, 1)])
    _enqueue(queue, "gov", ["k", "k"])
    free = _enqueue(queue, "free", ["k", "k", "k"])
    assert len(queue.claim("gov", 10, 30)) == 1
    assert _ids(queue.claim("free", 10, 30)) == free


def test_lowering_a_limit_does_not_preempt(queue: Queue, conn: Any) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 3, 3)])
    ids = _enqueue(queue, "q", ["k"] * 6)
    running = queue.claim("q", 10, 30)
    assert _ids(running) == ids[:3]
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 1, 1)])
    # The three keep running: leases renew, their outcomes are accepted.
    assert count(conn, "status = 'active'") == 3
    assert queue.heartbeat([(j.id, j.fence, 30.0) for j in running]) == set(ids[:3])
    assert queue.claim("q", 10, 30) == []
    queue.complete(running[0].id, running[0].fence)
    assert queue.claim("q", 10, 30) == []  # 2 active, limit 1
    queue.complete(running[1].id, running[1].fence)
    assert queue.claim("q", 10, 30) == []  # 1 active, limit 1
    queue.fail(running[2].id, running[2].fence, {"type": "E", "message": "", "traceback": None})
    assert _ids(queue.claim("q", 10, 30)) == [ids[3]]


def test_raising_a_limit_takes_effect_at_the_next_claim(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 1, 1)])
    ids = _enqueue(queue, "q", ["a", "a", "b", "b"])
    assert _ids(queue.claim("q", 10, 30)) == [ids[0]]
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 4, 2)])
    assert _ids(queue.claim("q", 10, 30)) == ids[1:]


def test_per_key_limit_turned_on_later_sees_the_existing_backlog(queue: Queue) -> None:
    ids = _enqueue(queue, "q", ["a", "a", "b", None, "c"])
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 10, None)])
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 10, 1)])
    assert _ids(queue.claim("q", 10, 30)) == [ids[0], ids[2], ids[3], ids[4]]


def test_removing_a_policy_ungoverns_the_queue(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 1, 1)])
    ids = _enqueue(queue, "q", ["a", "a", "a"])
    assert _ids(queue.claim("q", 10, 30)) == [ids[0]]
    queue.sync_concurrency_policies("ns", [], prune=True)
    assert _ids(queue.claim("q", 10, 30)) == ids[1:]


def test_priority_beats_an_older_key_head(queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", None, 1)])
    old = _enqueue(queue, "q", ["a", "b"])
    assert _ids(queue.claim("q", 1, 30)) == [old[0]]
    urgent = _enqueue(queue, "q", ["c"], priority=10)
    # A new, better job of an existing key must move that key's head too.
    better_b = _enqueue(queue, "q", ["b"], priority=20)
    assert _ids(queue.claim("q", 1, 30)) == better_b
    assert _ids(queue.claim("q", 1, 30)) == urgent
