"""claim_v5 admits exactly what claim_v4 admits: the same jobs, in the same order, leaving the same
key heads, on random per-key queues (priorities, keyless jobs, active and expired leases), with
and without rate limits. Each comparison runs both claims on the same state, each in a
transaction that is rolled back. A claim_v5 with a broken per-key count is caught by the same
comparison, so it can fail."""

from __future__ import annotations

import random
from importlib import resources
from typing import Any

import psycopg
import pytest
from psycopg import sql

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _ops

SEEDS = range(24)


def _claim(conn: psycopg.Connection[Any], function: str, queue: str, limit: int) -> Any:
    """What `function` claims now, and what it leaves, undone afterwards."""
    with conn.transaction(force_rollback=True):
        rows = conn.execute(
            sql.SQL("SELECT id, next_start_in FROM workhorse.{}"
                    "(%s, %s, 30, NULL, NULL, NULL, NULL, NULL)").format(sql.Identifier(function)),
            (queue, limit)).fetchall()
        heads = conn.execute(
            "SELECT ckey, head_rank, head_id FROM workhorse.key_heads WHERE queue = %s "
            "ORDER BY ckey", (queue,)).fetchall()
        jobs = conn.execute(
            "SELECT id, status, attempts FROM workhorse.jobs WHERE queue = %s ORDER BY id",
            (queue,)).fetchall()
    return [row[0] for row in rows if row[0] is not None], heads, jobs


def _shape(queue: Queue, conn: psycopg.Connection[Any], name: str, seed: int,
           rate: bool) -> random.Random:
    rng = random.Random(seed)
    max_active = rng.choice([None, 3, 8, 20])
    queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition(
        name, max_active, min(rng.choice([1, 2, 4]), max_active or 4),
        rate_limit="1000/s" if rate else None,
        rate_limit_per_key=rng.choice([None, "1000/s"]) if rate else None)])
    keys = [f"k{i}" for i in range(rng.randint(1, 6))]
    queue.enqueue_many([
        ("t", {"args": [], "kwargs": {}},
         EnqueueOptions(queue=name, priority=rng.choice([-1, 0, 0, 1]),
                        concurrency_key=None if rng.random() < 0.2 else rng.choice(keys)))
        for _ in range(rng.randint(10, 60))])
    return rng


def _differences(conn: psycopg.Connection[Any], queue: Queue, seed: int, rate: bool,
                 candidate: str = "claim_v5") -> list[str]:
    """Walk one random queue through claims, completions and expired leases; at each step compare
    what claim_v4 and `candidate` would claim."""
    name = f"q{seed}-{int(rate)}"
    rng = _shape(queue, conn, name, seed, rate)
    found = []
    for step in range(8):
        limit = rng.choice([1, 2, 5, 16])
        expected, got = _claim(conn, "claim_v4", name, limit), _claim(conn, candidate, name, limit)
        if expected != got:
            found.append(f"seed {seed} step {step} limit {limit}: {expected[0]} != {got[0]}")
        # Move on: claim for real, finish some, let some leases expire.
        claimed = queue.claim(name, limit, 30)
        done = [job for job in claimed if rng.random() < 0.5]
        if done:
            _ops.execute(conn, _ops.complete_encoded(
                [(job.id, job.fence, "null", _ops.DEFAULT_RETENTION_JSON) for job in done]))
        if rng.random() < 0.3:
            conn.execute(
                "UPDATE workhorse.jobs SET lease_until = now() - interval '1 second' "
                "WHERE id = (SELECT id FROM workhorse.jobs WHERE queue = %s AND status = 'active' "
                "ORDER BY id LIMIT 1)", (name,))
    return found


@pytest.mark.parametrize("rate", [False, True], ids=["no-rate-limit", "rate-limits"])
def test_claim_v5_admits_what_claim_v4_admits(conn, queue, rate):
    found = [d for seed in SEEDS for d in _differences(conn, queue, seed, rate)]
    assert found == []


def test_the_comparison_catches_a_claim_that_ignores_active_jobs_of_a_key(conn, queue):
    text = resources.files("workhorse").joinpath("sql/functions/claim_v5.sql").read_text("utf-8")
    lean = "WHERE c.ckey = '' OR c.nth <= v_per_key - COALESCE(a.n, 0)"
    assert text.count(lean) == 1  # the no-rate-limit statement's per-key room
    broken = text.replace("workhorse.claim_v5(", "workhorse.claim_v5_broken(", 1).replace(
        lean, "WHERE c.ckey = '' OR c.nth <= v_per_key")
    conn.execute(broken)
    found = [d for seed in SEEDS for d in _differences(conn, queue, seed, False,
                                                       candidate="claim_v5_broken")]
    assert found
