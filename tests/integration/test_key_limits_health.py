"""Health lists the keys at their own limit (docs/design.md "Per-key limits"), against the real
claim: a key counts as saturated when its active units reach its limit in force (its own
key_limits row's max_active, else the set's default, else max_active_per_key), in
`PolicyHealth.saturated_keys`, in `blocked_ready`, in the reason code `key_saturated` and in the
dashboard's saturated keys (each with its limit); a queue whose policy has only max_active
reports its keys at their own limits too. `PolicyHealth.key_limits` counts a set's rows (up to
the health sample and one more) and `key_limit_default` is its default.

`test_the_checks_fail_on_health_that_compares_with_max_active_per_key_only` runs the same checks
on health's statements with each key compared with max_active_per_key alone (the statements
before per-key limits): they must fail there. The reads stay index-driven with 100,000 rows of
key_limits: one probe of the primary key per key with active jobs, and a bounded count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from workhorse import (
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    KeyLimit,
    Queue,
    _ops,
    _sql,
)
from workhorse.types import PolicyHealth

Q = "kh"


def _enqueue(queue: Queue, keys: dict[str | None, int], cost: int = 1) -> None:
    queue.enqueue_many([("t", {}, EnqueueOptions(queue=Q, concurrency_key=key, cost=cost))
                        for key, n in keys.items() for _ in range(n)])


def _claim_all(queue: Queue) -> None:
    while queue.claim(Q, 10, 600):
        pass


def _row(queue: Queue) -> tuple[PolicyHealth, dict[str, int]]:
    """The queue's PolicyHealth and its reason codes' counts."""
    health = queue.health()
    [row] = [p for p in health.policies if p.queue == Q]
    return row, {r.code: r.count for r in health.reasons if r.queue == Q}


def _saturated(queue: Queue) -> dict[str, tuple[int, int | None, int]]:
    """The dashboard's saturated keys: key -> (active units, its limit, its ready backlog)."""
    return {k.key: (k.active, k.limit, k.backlog)
            for k in queue._run(_ops.saturated_keys(Q, limit=100))}


Observed = tuple[PolicyHealth, dict[str, int], dict[str, tuple[int, int | None, int]]]


def _tiers(queue: Queue) -> Observed:
    """Policy: 100 active, 3 per key. Own limits: gold 5 (4 jobs: below its limit, though above
    the policy's 3), trial and trial2 1 (3 jobs each), vip 6 (8 jobs); plain has no row (5 jobs:
    the policy's 3)."""
    queue.sync_concurrency_policies("tiers", [
        ConcurrencyPolicyDefinition(Q, max_active=100, max_active_per_key=3)])
    queue.set_key_limits("tiers", Q, {"gold": KeyLimit(max_active=5),
                                      "trial": KeyLimit(max_active=1),
                                      "trial2": KeyLimit(max_active=1, weight=2),
                                      "vip": KeyLimit(max_active=6)})
    _enqueue(queue, {"gold": 4, "trial": 3, "trial2": 3, "vip": 8, "plain": 5, None: 2})
    _claim_all(queue)
    return (*_row(queue), _saturated(queue))


def _check_tiers(observed: Observed) -> None:
    row, reasons, saturated = observed
    assert row.active == 4 + 1 + 1 + 6 + 3 + 2
    assert saturated == {"trial": (1, 1, 2), "trial2": (1, 1, 2), "vip": (6, 6, 2),
                         "plain": (3, 3, 2)}
    assert row.saturated_keys == 4
    assert row.blocked_ready == 8          # the ready jobs of the four saturated keys
    assert reasons["key_saturated"] == 4
    assert (row.key_limits, row.key_limit_default) == (4, None)


def _only_key_limits(queue: Queue) -> Observed:
    """Policy: max_active 100 only (no per-key limit). Set: default 2, big 4 (two jobs of cost
    2: four units) and wide 4 (one job of cost 2). Keys x (3 jobs: 2 active, at the default), y
    (1 job), and keyless jobs."""
    queue.sync_concurrency_policies("tiers", [ConcurrencyPolicyDefinition(Q, max_active=100)])
    queue.set_key_limits("tiers", Q, {"big": KeyLimit(max_active=4),
                                      "wide": KeyLimit(max_active=4)},
                         default=KeyLimit(max_active=2, rate_limit="100/m"))
    _enqueue(queue, {"x": 3, "y": 1, None: 3})
    _enqueue(queue, {"big": 3, "wide": 1}, cost=2)
    _claim_all(queue)
    return (*_row(queue), _saturated(queue))


def _check_only_key_limits(observed: Observed) -> None:
    row, reasons, saturated = observed
    assert (row.max_active, row.max_active_per_key) == (100, None)
    assert row.active == 2 + 1 + 3 + 4 + 2
    assert saturated == {"x": (2, 2, 1), "big": (4, 4, 1)}
    assert row.saturated_keys == 2
    assert row.blocked_ready == 2
    assert reasons["key_saturated"] == 2
    assert row.key_limits == 2
    assert row.key_limit_default == KeyLimit(max_active=2, rate_limit="100/m")


SCENARIOS: dict[str, tuple[Callable[[Queue], Observed], Callable[[Observed], None]]] = {
    "tiers": (_tiers, _check_tiers),
    "only_key_limits": (_only_key_limits, _check_only_key_limits),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_health_counts_each_key_against_its_own_limit(queue: Queue, scenario: str) -> None:
    run, check = SCENARIOS[scenario]
    check(run(queue))


def test_an_override_of_the_per_key_limit_applies_to_the_keys_without_their_own(
        queue: Queue) -> None:
    _tiers(queue)
    queue.override_policy(Q, max_active_per_key=5)
    row, _ = _row(queue)
    # plain (3 active) is below the override's 5 now; the keys with rows keep their own limits.
    assert set(_saturated(queue)) == {"trial", "trial2", "vip"}
    assert row.saturated_keys == 3 and row.blocked_ready == 6


def test_clearing_the_key_limits_gives_the_policy_back(queue: Queue) -> None:
    _tiers(queue)
    queue.clear_key_limits(Q)
    row, _ = _row(queue)
    # Against the policy's 3 per key: gold (4), vip (6) and plain (3) are at it or above.
    assert set(_saturated(queue)) == {"gold", "vip", "plain"}
    assert (row.saturated_keys, row.key_limits, row.key_limit_default) == (3, 0, None)


# ---- the same checks against statements that compare with max_active_per_key only -------------

BROKEN = {
    "policy_health": ("k.n >= k.key_max", "k.n >= l.max_active_per_key"),
    "saturated_keys": ("WHERE m.active >= m.key_max",
                       "CROSS JOIN l WHERE m.active >= l.max_active_per_key"),
}


@pytest.fixture(params=list(BROKEN))
def per_key_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """One of health's statements (policy_health: health(); saturated_keys: the dashboard's
    keys) as it was before per-key limits: each key's active units compared with
    max_active_per_key alone."""
    name: str = request.param
    original = _sql.statement
    old, new = BROKEN[name]
    text = original(name).as_string(None)
    assert text.count(old) == (2 if name == "policy_health" else 1), name
    broken = sql.SQL(text.replace(old, new))

    def statement(wanted: str, folder: str = "statements") -> Any:
        return broken if (wanted, folder) == (name, "statements") else original(wanted, folder)

    monkeypatch.setattr(_sql, "statement", statement)
    return name


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_checks_fail_on_health_that_compares_with_max_active_per_key_only(
        queue: Queue, per_key_only: str, scenario: str) -> None:
    run, check = SCENARIOS[scenario]
    observed = run(queue)
    with pytest.raises(AssertionError):
        check(observed)
    # The broken statement disagrees with the other (health's count, the dashboard's keys).
    row, _, saturated = observed
    assert row.saturated_keys != len(saturated)


# ---- bounded reads with 100,000 rows -----------------------------------------------------------


def test_the_reads_stay_index_driven_with_100000_key_rows(
        queue: Queue, conn: psycopg.Connection[Any], database_url: str) -> None:
    queue.sync_concurrency_policies("tiers", [
        ConcurrencyPolicyDefinition(Q, max_active=1000, max_active_per_key=2)])
    queue.set_key_limits("tiers", Q, {f"k{i:06}": KeyLimit(max_active=1 + i % 3)
                                      for i in range(100_000)})
    conn.execute("ANALYZE workhorse.key_limits")
    _enqueue(queue, {f"k{i:06}": 4 for i in range(0, 100_000, 2000)} | {"z": 3})
    _claim_all(queue)
    with psycopg.connect(database_url) as c:   # one transaction: its counters are its own
        reader = Queue(c)
        health = reader.health()
        saturated = {k.key for k in reader._run(_ops.saturated_keys(Q, limit=100))}
        page = reader._run(_ops.key_limits(Q, limit=50))
        # The table's sequential scans, and the entries read from its primary key's index.
        stats = c.execute(
            "SELECT t.seq_scan, pg_stat_get_xact_tuples_returned(i.indexrelid) "
            "FROM pg_stat_xact_user_tables t JOIN pg_index i ON i.indrelid = t.relid "
            "WHERE t.relid = 'workhorse.key_limits'::regclass AND i.indisprimary").fetchone()
        c.rollback()
    [row] = [p for p in health.policies if p.queue == Q]
    # k000000 (own 1, i % 3 == 0) ... 50 keys with rows, and z (the policy's 2): all saturated.
    assert row.saturated_keys == 51 and len(saturated) == 51
    assert row.key_limits == 1001          # counted up to the sample and one more
    assert page is not None and len(page.limits) == 50
    assert stats is not None
    seq_scan, idx_tup_read = stats
    assert seq_scan == 0, stats
    # Health: a probe per active key (51) and the bounded count (1,001 entries); the dashboard's
    # saturated keys: a probe per active key; its page of keys: 50 entries.
    assert idx_tup_read < 1001 + 2 * 51 + 50 + 20, stats


def test_the_reason_says_the_keys_are_at_their_own_limit(queue: Queue) -> None:
    _only_key_limits(queue)
    [reason] = [r for r in queue.health().reasons if r.queue == Q and r.code == "key_saturated"]
    assert reason.detail == "2 keys at their own limit (key limits)"
