"""Per-key limits as data against the real claim (docs/design.md "Per-key limits", issue #41 item
2), one claim at a time: a key's own `max_active` (or the default) replaces the policy's per-key
limit, exactly, from the next claim on; a key's own rate and the default's are counted in their
own windows; a key's weight shares a fair queue; the rows need a policy and its owner; clearing
them gives the policy back. `test_the_checks_fail_on_a_claim_that_ignores_key_limits` runs the
central check on a claim that never reads the rows: it must fail there.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from _integration import install_broken

from workhorse import (
    App,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    InvalidPolicyError,
    KeyLimit,
    PolicyConflictError,
    Queue,
    SyncReport,
    _sql,
)

Q = "kl"
TASK = "t"
CHOOSE = _sql.function_name("_choose_units")


def _enqueue(queue: Queue, keys: dict[str, int], **options: Any) -> None:
    jobs = [(TASK, {"n": i}, EnqueueOptions(queue=Q, concurrency_key=key, **options))
            for key, count in keys.items() for i in range(count)]
    queue.enqueue_many(jobs)


def _active_by_key(conn: psycopg.Connection[Any]) -> Counter[str]:
    rows = conn.execute(
        "SELECT ckey, count(*) FROM workhorse.jobs WHERE queue = %s AND status = 'active' "
        "GROUP BY ckey", (Q,)).fetchall()
    return Counter({key: n for key, n in rows})


def _claim_all(queue: Queue, limit: int = 7) -> int:
    """Claim until a claim takes nothing; the number of jobs claimed."""
    total = 0
    while True:
        claimed = queue.claim(Q, limit, 60)
        if not claimed:
            return total
        total += len(claimed)


def _premium_and_free(queue: Queue, conn: psycopg.Connection[Any]) -> Counter[str]:
    """200 keys, 20 premium (limit 10) and 180 free (the default, limit 1), 15 ready jobs each:
    the active jobs per key once the claims stop."""
    queue.sync_concurrency_policies("tiers", [
        ConcurrencyPolicyDefinition(Q, max_active=10_000, max_active_per_key=3)])
    premium = {f"p{i:03}": KeyLimit(max_active=10) for i in range(20)}
    queue.set_key_limits("tiers", Q, premium, default=KeyLimit(max_active=1))
    _enqueue(queue, {f"p{i:03}": 15 for i in range(20)} | {f"f{i:03}": 15 for i in range(180)})
    _claim_all(queue)
    return _active_by_key(conn)


def _below_the_default(queue: Queue, conn: psycopg.Connection[Any]) -> Counter[str]:
    """A default above some keys' own limits (trial keys 2, the rest 5), claimed in large
    batches: a key met first from its head must read its own row then."""
    queue.sync_concurrency_policies("tiers", [
        ConcurrencyPolicyDefinition(Q, max_active=10_000, max_active_per_key=8)])
    trial = {f"t{i:02}": KeyLimit(max_active=2) for i in range(20)}
    queue.set_key_limits("tiers", Q, trial, default=KeyLimit(max_active=5))
    _enqueue(queue, {f"t{i:02}": 9 for i in range(20)} | {f"o{i:02}": 9 for i in range(20)})
    _claim_all(queue, 1000)
    return _active_by_key(conn)


def _check_below(active: Counter[str]) -> None:
    assert active == Counter({f"t{i:02}": 2 for i in range(20)}
                             | {f"o{i:02}": 5 for i in range(20)})


def _check_tiers(active: Counter[str]) -> None:
    assert {key: n for key, n in active.items() if key.startswith("p")} == {
        f"p{i:03}": 10 for i in range(20)}
    assert {key: n for key, n in active.items() if key.startswith("f")} == {
        f"f{i:03}": 1 for i in range(180)}


def test_every_key_holds_exactly_its_own_limit(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    _check_tiers(_premium_and_free(queue, conn))


def test_a_key_below_the_default_holds_its_own(queue: Queue,
                                               conn: psycopg.Connection[Any]) -> None:
    _check_below(_below_the_default(queue, conn))


def test_a_change_is_in_force_at_the_next_claim(queue: Queue,
                                                conn: psycopg.Connection[Any]) -> None:
    _premium_and_free(queue, conn)
    # Promote one free key, demote one premium key (its 10 running stay: nothing is preempted).
    report = queue.set_key_limits("tiers", Q, {"f000": KeyLimit(max_active=4)}, prune=False)
    assert report.created == ["f000"]
    _claim_all(queue)
    active = _active_by_key(conn)
    assert active["f000"] == 4 and active["f001"] == 1 and active["p000"] == 10
    # Without the default, the other keys get the policy's max_active_per_key (3).
    queue.set_key_limits("tiers", Q, {"f000": KeyLimit(max_active=4)}, default=None)
    _claim_all(queue)
    active = _active_by_key(conn)
    assert active["f001"] == 3 and active["p000"] == 10 and active["f000"] == 4
    # Cleared: the policy alone.
    assert "" in queue.clear_key_limits(Q).pruned
    assert queue.key_limits(Q) is None


def test_a_key_limit_above_the_policy_per_key_limit(queue: Queue,
                                                    conn: psycopg.Connection[Any]) -> None:
    queue.sync_concurrency_policies("tiers", [
        ConcurrencyPolicyDefinition(Q, max_active=100, max_active_per_key=1)])
    queue.set_key_limits("tiers", Q, {"big": KeyLimit(max_active=6)})
    _enqueue(queue, {"big": 10, "small": 10})
    _claim_all(queue)
    assert _active_by_key(conn) == Counter({"big": 6, "small": 1})


def test_a_queue_without_a_per_key_limit_gets_heads_for_its_keys(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    # max_active only: the queue kept no heads before its key limits.
    queue.sync_concurrency_policies("tiers", [ConcurrencyPolicyDefinition(Q, max_active=50)])
    _enqueue(queue, {"a": 5, "b": 5})
    queue.set_key_limits("tiers", Q, {"a": KeyLimit(max_active=2)})
    _enqueue(queue, {"a": 5, "c": 3})
    _claim_all(queue)
    assert _active_by_key(conn) == Counter({"a": 2, "b": 5, "c": 3})


def test_a_keys_own_rate_and_the_defaults(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_concurrency_policies("tiers", [
        ConcurrencyPolicyDefinition(Q, max_active=100, rate_limit_per_key="1/h")])
    queue.set_key_limits("tiers", Q, {"fast": KeyLimit(rate_limit="5/h")},
                         default=KeyLimit(rate_limit="2/h"))
    _enqueue(queue, {"fast": 10, "other": 10})
    _claim_all(queue)
    assert _active_by_key(conn) == Counter({"fast": 5, "other": 2})
    # The starts were filed in each key's own window: still none left after another claim.
    assert queue.claim(Q, 10, 60) == []


def test_weights_share_a_fair_queue(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_concurrency_policies("tiers", [
        ConcurrencyPolicyDefinition(Q, max_active=8, fairness="key")])
    queue.set_key_limits("tiers", Q, {"heavy": KeyLimit(weight=3)})
    _enqueue(queue, {"heavy": 20, "light": 20})
    _claim_all(queue)
    assert _active_by_key(conn) == Counter({"heavy": 6, "light": 2})


def test_key_limits_need_a_policy_and_its_owner(queue: Queue) -> None:
    with pytest.raises(InvalidPolicyError, match="no policy"):
        queue.set_key_limits("tiers", Q, {"a": KeyLimit(max_active=1)})
    queue.sync_concurrency_policies("owner", [ConcurrencyPolicyDefinition(Q, max_active=5)])
    with pytest.raises(PolicyConflictError):
        queue.set_key_limits("intruder", Q, {"a": KeyLimit(max_active=1)})
    assert queue.key_limits(Q) is None
    # An operator (no namespace) acts for the owner.
    queue.set_key_limits(None, Q, {"a": KeyLimit(max_active=1)})
    stored = queue.key_limits(Q)
    assert stored is not None and stored.namespace == "owner"
    assert stored.limits == {"a": KeyLimit(max_active=1)}
    # Pruning the policy drops its key limits.
    queue.sync_concurrency_policies("owner", [])
    assert queue.key_limits(Q) is None


@pytest.mark.parametrize("limits, default", [
    ({"": KeyLimit(max_active=1)}, None),
    ({"a" * 256: KeyLimit(max_active=1)}, None),
    ({"a": 3}, None),
    ({"a": KeyLimit(max_active=1)}, 5),
    ([("a", KeyLimit(max_active=1))], None),
])
def test_bad_key_limits_write_nothing(queue: Queue, limits: Any, default: Any) -> None:
    queue.sync_concurrency_policies("tiers", [ConcurrencyPolicyDefinition(Q, max_active=5)])
    with pytest.raises(InvalidPolicyError):
        queue.set_key_limits("tiers", Q, limits, default=default)
    assert queue.key_limits(Q) is None


@pytest.mark.parametrize("fields", [
    {"max_active": 0}, {"max_active": True}, {"weight": 1001}, {"weight": 0},
    {"rate_limit": "0/s"}, {"rate_limit": "5 per minute"}, {},
])
def test_a_bad_key_limit_is_refused_when_built(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidPolicyError):
        KeyLimit(**fields)


# ---- the checks fail where the claim is broken -----------------------------------------------

# Deliberately broken copies of the claim: (function, text, replacement).
BROKEN = {
    # The rows are never read: every key gets the policy's per-key limit.
    "rows_ignored": (CHOOSE,
                     "WHERE p_key_limits AND k.queue = p_queue AND k.ckey = g.ckey",
                     "WHERE false AND k.queue = p_queue AND k.ckey = g.ckey"),
    # A key newly met (from its head) does not read its row.
    "heads_ignore_rows": (CHOOSE,
                          "WHERE p_key_limits AND k.queue = p_queue AND k.ckey = v_key;",
                          "WHERE false AND k.queue = p_queue AND k.ckey = v_key;"),
}


SCENARIOS = {"rows_ignored": (_premium_and_free, _check_tiers),
             "heads_ignore_rows": (_below_the_default, _check_below)}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_checks_fail_on_a_claim_that_ignores_key_limits(
        queue: Queue, conn: psycopg.Connection[Any], broken: str) -> None:
    install_broken(conn, *BROKEN[broken])
    scenario, check = SCENARIOS[broken]
    with pytest.raises(AssertionError):
        check(scenario(queue, conn))


# ---- declared by an app ----------------------------------------------------------------------


def test_an_app_declares_key_limits_and_sync_makes_them_so(database_url: str,
                                                           queue: Queue) -> None:
    app = App("tenants", database_url=database_url)
    api = app.queue(Q, max_active=50, max_active_per_key=1)
    app.key_limits(api, {"acme": KeyLimit(max_active=10), "globex": KeyLimit(weight=3)},
                   default=KeyLimit(max_active=2))
    report = app.sync()
    assert report.key_limits is not None and report.key_limits.updated == [Q]
    stored = queue.key_limits(Q)
    assert stored is not None and stored.namespace == "tenants"
    assert stored.default == KeyLimit(max_active=2)
    assert stored.limits == {"acme": KeyLimit(max_active=10), "globex": KeyLimit(weight=3)}
    assert app.sync().key_limits == SyncReport(unchanged=[Q])
    # A key no longer declared loses its row; a queue no longer declared loses its set.
    app.key_limits(api, {"acme": KeyLimit(max_active=10)})
    app.sync()
    stored = queue.key_limits(Q)
    assert stored is not None and list(stored.limits) == ["acme"] and stored.default is None
    del app.declared_key_limits[Q]
    assert app.sync().key_limits == SyncReport(pruned=[Q])
    assert queue.key_limits(Q) is None


def test_an_app_cannot_declare_key_limits_on_a_queue_without_limits(database_url: str) -> None:
    app = App("tenants", database_url=database_url)
    app.key_limits("plain", {"acme": KeyLimit(max_active=10)})
    with pytest.raises(InvalidPolicyError, match="no limits of the queue's own"):
        app.sync()


def test_on_key_full_counts_a_key_against_its_own_limit(queue: Queue,
                                                        conn: psycopg.Connection[Any]) -> None:
    queue.sync_concurrency_policies("tiers", [ConcurrencyPolicyDefinition(
        Q, max_active=50, max_active_per_key=1, on_key_full="cancel_newest")])
    queue.set_key_limits("tiers", Q, {"vip": KeyLimit(max_active=2)})
    _enqueue(queue, {"vip": 3, "std": 2})
    rows = conn.execute("SELECT ckey, status, count(*) FROM workhorse.jobs WHERE queue = %s "
                        "GROUP BY ckey, status", (Q,)).fetchall()
    assert {(key, status): n for key, status, n in rows} == {
        ("vip", "ready"): 2, ("vip", "canceled"): 1, ("std", "ready"): 1, ("std", "canceled"): 1}


def test_the_enqueue_checks_a_cost_against_the_keys_own_limits(queue: Queue) -> None:
    queue.sync_concurrency_policies("tiers", [ConcurrencyPolicyDefinition(
        Q, max_active=50, max_active_per_key=1, rate_limit_per_key="100/m")])
    queue.set_key_limits("tiers", Q, {"big": KeyLimit(max_active=10),
                                      "slow": KeyLimit(rate_limit="2/m")})
    _enqueue(queue, {"big": 1}, cost=5)  # above the policy's per-key 1, within big's own 10
    with pytest.raises(InvalidOptionsError, match="can never start"):
        _enqueue(queue, {"big": 1}, cost=11)
    with pytest.raises(InvalidOptionsError, match="can never start"):
        _enqueue(queue, {"slow": 1}, rate_cost=3)  # above slow's own N=2
    with pytest.raises(InvalidOptionsError, match="can never start"):
        _enqueue(queue, {"other": 1}, cost=2)  # the policy's 1 for a key with no row


def test_keyless_jobs_keep_their_own_weight_on_a_fair_queue(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_concurrency_policies("tiers", [
        ConcurrencyPolicyDefinition(Q, max_active=8, fairness="key")])
    queue.set_key_limits("tiers", Q, {}, default=KeyLimit(weight=3))
    _enqueue(queue, {"tenant": 20})
    queue.enqueue_many([(TASK, {"n": i}, EnqueueOptions(queue=Q)) for i in range(20)])
    _claim_all(queue)
    # The tenant's default weight 3 against the keyless jobs' own 1: 6 to 2.
    assert _active_by_key(conn) == Counter({"tenant": 6, "": 2})
