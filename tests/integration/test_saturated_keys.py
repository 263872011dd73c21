"""Invariant 3: a full key never blocks the queue, however deep its backlog.

Besides "the next claim admits the other key", each test reads what the claim itself cost from
`pg_stat_xact_user_tables` (the claim runs in an explicit transaction, so the counters are the
claim's own): a design that walks a saturated key's backlog fetches thousands of job rows, the key
heads design a handful.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue
from workhorse.types import ClaimedJob


def _enqueue(q: Queue, key: str | None, n: int, priority: int = 0) -> list[int]:
    return q.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", concurrency_key=key, priority=priority))] * n
    )


def _measured_claim(
    database_url: str, limit: int = 1
) -> tuple[list[ClaimedJob], dict[str, int]]:
    """Claim once inside a transaction and report the rows that claim read from `jobs`."""
    with psycopg.connect(database_url) as c:
        claimed = Queue(c).claim("q", limit, 30)
        row = c.execute(
            "SELECT seq_scan, seq_tup_read, idx_scan, idx_tup_fetch"
            " FROM pg_stat_xact_user_tables WHERE relid = 'workhorse.jobs'::regclass"
        ).fetchone()
        c.commit()
    assert row is not None
    return claimed, dict(zip(("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch"),
                             row, strict=True))


@pytest.mark.parametrize("max_active", [10, None])
def test_key_with_5000_ready_does_not_delay_a_later_key(
    queue: Queue, database_url: str, max_active: int | None
) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", max_active, 1)])
    busy = _enqueue(queue, "busy", 5000)
    [first] = queue.claim("q", 1, 30)
    assert first.id == busy[0]
    later_b = _enqueue(queue, "b", 3)
    later_c = _enqueue(queue, "c", 1)

    claimed, cost = _measured_claim(database_url)
    assert [job.id for job in claimed] == [later_b[0]]
    assert cost["seq_tup_read"] == 0, cost
    assert cost["idx_tup_fetch"] < 100, cost  # not the 5,000-row backlog

    # b is saturated now too; c is next, and nothing more of busy or b.
    assert [job.id for job in queue.claim("q", 10, 30)] == later_c
    assert queue.claim("q", 10, 30) == []


@pytest.mark.parametrize("max_active", [4, None])
def test_flood_of_10000_at_the_head(
    queue: Queue, database_url: str, max_active: int | None
) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", max_active, 1)])
    before = _enqueue(queue, "early", 1)
    flood = _enqueue(queue, "flood", 10_000, priority=5)  # all ahead of everything else
    after = _enqueue(queue, "a", 2) + _enqueue(queue, None, 1) + _enqueue(queue, "z", 1)

    [head] = queue.claim("q", 1, 30)
    assert head.id == flood[0]

    claimed, cost = _measured_claim(database_url)
    assert [job.id for job in claimed] == before
    assert cost["seq_tup_read"] == 0, cost
    assert cost["idx_tup_fetch"] < 100, cost

    # A batch passes over the flood as well: a's head, then the keyless job, then z
    # (within max_active 4 when there is one: flood + early + 2 more).
    claimed, cost = _measured_claim(database_url, limit=10)
    expected = [after[0], after[2]] if max_active else [after[0], after[2], after[3]]
    assert [job.id for job in claimed] == expected
    assert cost["idx_tup_fetch"] < 100, cost


def test_many_saturated_keys_cost_per_key_not_per_row(queue: Queue, database_url: str) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", None, 1)])
    queue.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", concurrency_key=f"k{n % 50}")) for n in range(10_000)]
    )
    assert len(queue.claim("q", 100, 30)) == 50  # every key saturated, 9,950 ready behind them
    fresh = _enqueue(queue, "fresh", 1)
    claimed, cost = _measured_claim(database_url, limit=5)
    assert [job.id for job in claimed] == fresh
    assert cost["seq_tup_read"] == 0, cost
    assert cost["idx_tup_fetch"] < 500, cost  # ~ the 50 active rows, not the backlog


def test_saturated_key_backlog_drains_in_order(queue: Queue, conn: Any) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 2, 1)])
    a = _enqueue(queue, "a", 5)
    b = _enqueue(queue, "b", 2)
    seen = []
    while True:
        batch = queue.claim("q", 10, 30)
        if not batch:
            break
        seen.append([job.id for job in batch])
        for job in batch:
            queue.complete(job.id, job.fence)
    assert seen == [[a[0], b[0]], [a[1], b[1]], [a[2]], [a[3]], [a[4]]]
