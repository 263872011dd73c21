"""Capacity grants (migration 0002, the claim's header, and the rebalance function's file):
on a FIFO queue with only a queue-wide limit, each claiming process holds a share of max_active
that only it admits into, in shared mode, so that claimers do not wait for each other.

What must hold, checked one claim at a time here (test_admission_contention.py races 8 processes):
the shares never add up past the limit, with the jobs claimed outside any grant counted; a
claimer gets the units another leaves; a change of the rules (sync, override, pause) makes every
grant admit nothing until it is shared out again; a grant that expires gives its units back; and
the released level-1 claim, which knows nothing of grants, admits nothing from a granted queue.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sql_names import called_function

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _ops

# The claim 0.2.0's workers call (the released statement's function), which knows no grants.
LEVEL_1_CLAIM = called_function("claim")


def _fill(queue: Queue, name: str = "g", n: int = 40) -> None:
    queue.enqueue_many([("t", {}, EnqueueOptions(queue=name))] * n)


def _claim(conn: psycopg.Connection[Any], holder: str | None, n: int,
           name: str = "g") -> _ops.ClaimReply:
    return _ops.execute(conn, _ops.claim_as(name, n, 30, holder=holder))


def _grants(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute(
        "SELECT holder, units FROM workhorse.capacity_grants ORDER BY holder").fetchall())


def _active(conn: psycopg.Connection[Any], name: str = "g") -> int:
    return conn.execute("SELECT count(*) FROM workhorse.jobs WHERE queue = %s AND status = "
                        "'active'", (name,)).fetchone()[0]  # type: ignore[index]


def _complete(queue: Queue, reply: _ops.ClaimReply, n: int | None = None) -> None:
    jobs = reply.jobs[:n] if n is not None else reply.jobs
    queue.complete_many([(job.id, job.fence, None) for job in jobs])


@pytest.fixture
def governed(queue: Queue) -> Queue:
    queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition("g", 10)])
    _fill(queue)
    return queue


def test_a_lone_claimer_gets_the_whole_limit_and_claims_inside_its_grant(conn, governed):
    first = _claim(conn, "A", 8)
    assert len(first.jobs) == 8 and first.granted
    second = _claim(conn, "A", 8)
    assert len(second.jobs) == 2 and second.granted  # grown to the limit, no further
    assert _grants(conn) == {"A": 10} and _active(conn) == 10
    assert conn.execute("SELECT count(*) FROM workhorse.jobs WHERE grant_id IS NOT NULL"
                        ).fetchone() == (10,)


def test_shares_never_add_up_past_the_limit_and_move_to_who_waits(conn, governed):
    a = _claim(conn, "A", 8)
    b = _claim(conn, "B", 8)
    assert (len(a.jobs), len(b.jobs)) == (8, 2)  # B gets what is left, not A's running jobs
    assert _active(conn) == 10
    # B waits for more: A, above its fair share (5 of 10), gives units back as it claims...
    assert _claim(conn, "A", 8).jobs == []
    assert _grants(conn)["A"] == 5
    # ...and they are B's once A's jobs have ended, never while they run.
    assert _claim(conn, "B", 8).jobs == []
    _complete(governed, a, 4)
    grown = _claim(conn, "B", 8)
    assert len(grown.jobs) == 3 and _active(conn) == 9  # A: 4 of its 5, B: 5
    assert _grants(conn) == {"A": 5, "B": 5}


def test_a_claim_without_a_grant_takes_the_unused_units_back_first(conn, governed):
    """A claim with no holder (Queue.claim, drain) counts as level 1 did; grants' units that no
    job uses yet are taken back, down to each grant's own active jobs, so nothing runs over."""
    a = _claim(conn, "A", 3)
    assert len(a.jobs) == 3
    conn.execute("UPDATE workhorse.capacity_grants SET units = 10")  # A could take 7 more
    plain = governed.claim("g", 10, 30)
    assert len(plain) == 7 and _grants(conn) == {"A": 3}
    assert _claim(conn, "A", 5).jobs == [] and _active(conn) == 10


@pytest.mark.parametrize("change", ["lower", "same-value", "pause"])
def test_a_change_of_the_rules_stops_every_grant_until_it_is_shared_out_again(
        conn, governed, change):
    """Even a sync to the same limit: the rules of another version may have let claims outside
    the grants use units a grant still counts as its own (the grant stamp function)."""
    first = _claim(conn, "A", 4)
    assert len(first.jobs) == 4
    if change == "pause":
        governed.pause("g")
    else:
        governed.override_policy("g", max_active=3 if change == "lower" else 10)
    stamp = conn.execute("SELECT stamp FROM workhorse.capacity_grants").fetchone()
    reply = _claim(conn, "A", 4)
    if change == "pause":
        assert reply.jobs == [] and _active(conn) == 4
        governed.resume("g")
        assert len(_claim(conn, "A", 4).jobs) == 4
    elif change == "lower":
        # Shared out again under the new limit: nothing while A's own jobs are above it.
        assert reply.jobs == [] and _active(conn) == 4
        assert _grants(conn) == {"A": 3}
        _complete(governed, first, 1)
        assert _claim(conn, "A", 4).jobs == []  # 3 running: the new limit
        _complete(governed, first, 2)
        assert len(_claim(conn, "A", 4).jobs) == 1 and _active(conn) == 3
    else:
        # The claim went exclusive and shared the limit out again before it admitted.
        assert len(reply.jobs) == 4 and _active(conn) == 8
        assert conn.execute("SELECT stamp FROM workhorse.capacity_grants").fetchone() != stamp


def test_an_expired_grant_gives_its_units_back(conn, governed):
    a = _claim(conn, "A", 10)
    assert len(a.jobs) == 10
    _complete(governed, a)
    # A still wants 10: B gets its fair share, A keeps the rest while its grant lives.
    b = _claim(conn, "B", 10)
    assert len(b.jobs) == 5 and _grants(conn) == {"A": 5, "B": 5}
    conn.execute("UPDATE workhorse.capacity_grants SET expires_at = now() - interval '1 second'"
                 " WHERE holder = 'A'")
    assert len(_claim(conn, "B", 10).jobs) == 5
    assert _grants(conn) == {"B": 10} and _active(conn) == 10


def test_jobs_of_a_dead_grant_count_until_their_leases_run_out(conn, governed):
    a = _claim(conn, "A", 6)
    conn.execute("DELETE FROM workhorse.capacity_grants WHERE holder = 'A'")
    assert len(_claim(conn, "B", 10).jobs) == 4
    assert _active(conn) == 10
    conn.execute("UPDATE workhorse.jobs SET lease_until = now() - interval '1 second'"
                 " WHERE id = ANY(%s)", ([job.id for job in a.jobs],))
    # The expired jobs are claimable again, inside B's grant once it grows.
    assert len(_claim(conn, "B", 10).jobs) == 6
    assert _active(conn) == 10


def test_per_key_and_rate_limited_queues_claim_exclusively_as_before(conn, queue):
    queue.sync_concurrency_policies("t", [
        ConcurrencyPolicyDefinition("k", 10, 2), ConcurrencyPolicyDefinition("r", 10,
                                                                             rate_limit="5/m")])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="k", concurrency_key="x"))] * 5)
    _fill(queue, "r", 10)
    keyed = _claim(conn, "A", 5, "k")
    rated = _claim(conn, "A", 10, "r")
    assert (len(keyed.jobs), keyed.granted) == (2, False)
    assert (len(rated.jobs), rated.granted) == (5, False)
    assert _grants(conn) == {}


def test_the_released_level_1_claim_admits_nothing_from_a_granted_queue(conn, governed, caplog):
    """The first grant raises the queue's level to 2 (invariant 5): a 0.2.0 worker beside the new
    ones would count grants' unused units as free, so it must stay away, and it says why."""
    def level_1_claim() -> list[tuple[Any, ...]]:
        return conn.execute(
            f"SELECT id, status, attempts FROM workhorse.{LEVEL_1_CLAIM}"
            "('g', 10, 30, NULL, NULL, NULL, NULL, NULL)").fetchall()

    assert len([row for row in level_1_claim() if row[0] is not None]) == 10  # before a grant
    conn.execute("UPDATE workhorse.jobs SET status = 'ready', lease_until = NULL")
    assert len(_claim(conn, "A", 3).jobs) == 3
    assert level_1_claim() == [(None, "feature_level", 2)]
    assert _active(conn) == 3
