"""Two claim functions on the same random states must make the same admissions: the harness
for every new claim version (and for a claim rewritten without a change of version).

`differences(conn, queue, seed, rate, reference, candidate)` builds one random per-key queue
(priorities, keyless jobs, limits, optionally rate limits), walks it through claims,
completions and expired leases, and at each step runs both functions on the same state, each in
a transaction that is rolled back: the jobs claimed (in order), the key heads left and the job
rows must be equal. Functions are named as (schema, name) pairs, so a reference kept as a test
fixture (tests/fixtures/reference_claim.sql, in the schema workhorse_reference) can stand beside
the product's claim.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _ops, _sql

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
Function = tuple[str, str]  # (schema, name)

PRODUCT: Function = ("workhorse", _sql.function_name("claim"))
REFERENCE: Function = ("workhorse_reference", "claim")


def install_reference(conn: psycopg.Connection[Any]) -> Function:
    """The fixture's reference claim, installed beside the product's."""
    conn.execute((FIXTURES / "reference_claim.sql").read_text("utf-8"))
    return REFERENCE


def product_claim_text() -> str:
    """The product's claim file, for tests that install a deliberately broken copy of it."""
    return _sql.function_files()[PRODUCT[1]]


def _claim(conn: psycopg.Connection[Any], function: Function, queue: str, limit: int) -> Any:
    """What `function` claims now, and what it leaves, undone afterwards."""
    with conn.transaction(force_rollback=True):
        rows = conn.execute(
            sql.SQL("SELECT id, next_start_in FROM {}"
                    "(%s, %s, 30, NULL, NULL, NULL, NULL, NULL)").format(
                sql.Identifier(*function)),
            (queue, limit)).fetchall()
        heads = conn.execute(
            "SELECT ckey, head_rank, head_id FROM workhorse.key_heads WHERE queue = %s "
            "ORDER BY ckey", (queue,)).fetchall()
        jobs = conn.execute(
            "SELECT id, status, attempts FROM workhorse.jobs WHERE queue = %s ORDER BY id",
            (queue,)).fetchall()
    return [row[0] for row in rows if row[0] is not None], heads, jobs


def _shape(queue: Queue, name: str, seed: int, rate: bool) -> random.Random:
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


def differences(conn: psycopg.Connection[Any], queue: Queue, seed: int, rate: bool,
                reference: Function, candidate: Function) -> list[str]:
    """Walk one random queue through claims, completions and expired leases; at each step compare
    what `reference` and `candidate` would claim. Empty when they agree everywhere."""
    name = f"q{seed}-{int(rate)}"
    rng = _shape(queue, name, seed, rate)
    found = []
    for step in range(8):
        limit = rng.choice([1, 2, 5, 16])
        expected = _claim(conn, reference, name, limit)
        got = _claim(conn, candidate, name, limit)
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
