"""Feature levels (docs/design.md "Releases and SQL versioning"): every job and queue carries the
level of the features it uses, an enqueue that uses a newer feature raises its queue's level, and a
claim or outcome function admits and records nothing above its own level, its worker warning once.
So the workers of one release run safely beside the next one's (invariant 5).

The package's claim is at `_ops.FEATURE_LEVEL`; these tests make a job or queue one level newer by
hand, as the next release's enqueue will, through the enqueue function's feature levels. (The
outcome functions are still at level 1: no enqueue of this release makes a job above it.)"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

from workhorse import (
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    JobStatus,
    Queue,
    StaleLeaseError,
    _ops,
    _sql,
)
from workhorse._ops import admission

ENQUEUE = _sql.function_name("enqueue")
CLAIM = _sql.function_name("claim")
NEWER = _ops.FEATURE_LEVEL + 1  # a level no function of this package knows


def _enqueue(conn: psycopg.Connection[Any], queue: str, level: int, key: str | None = None,
             n: int = 1) -> list[int]:
    """n jobs of `level` in `queue`, through the enqueue function as a newer package calls it."""
    rows = conn.execute(
        f"SELECT id FROM workhorse.{ENQUEUE}"
        "(%s, %s, %s, %s, %s, NULL, NULL, %s, %s, NULL, NULL, %s)",
        (["t"] * n, [queue] * n, [key] * n, [0] * n, ["{}"] * n, [3] * n, ["fail"] * n,
         [level] * n)).fetchall()
    return [row[0] for row in rows]


def _levels(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute("SELECT queue, feature_level FROM workhorse.queue_levels").fetchall())


def test_an_enqueue_of_a_newer_feature_raises_its_queues_level_and_never_lowers_it(conn, queue):
    _enqueue(conn, "plain", 1)
    assert _levels(conn) == {}
    [job_id] = _enqueue(conn, "new", NEWER)
    assert _levels(conn) == {"new": NEWER}
    assert conn.execute("SELECT feature_level FROM workhorse.jobs WHERE id = %s",
                        (job_id,)).fetchone() == (NEWER,)
    _enqueue(conn, "new", 1)
    assert _levels(conn) == {"new": NEWER}


def test_a_raised_level_in_a_rolled_back_enqueue_leaves_nothing(database_url):
    with psycopg.connect(database_url) as caller:
        _enqueue(caller, "new", NEWER)
        caller.rollback()
        assert caller.execute("SELECT count(*) FROM workhorse.queue_levels").fetchone() == (0,)


@pytest.mark.parametrize("governed", [None, "queue-wide", "per-key"])
def test_a_claim_admits_nothing_from_a_queue_raised_above_its_level(conn, queue, governed):
    """Not the level-2 job, and not the level-1 jobs beside it either: the queue's rules may use
    the newer feature (a cost, a fair share) that this claim cannot count."""
    if governed:
        queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition(
            "q", 10, 2 if governed == "per-key" else None)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", concurrency_key="k"))] * 3)
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="other"))] * 2)
    _enqueue(conn, "q", NEWER, key="k")
    assert queue.claim("q", 10, 30) == []
    assert len(queue.claim("other", 10, 30)) == 2  # other queues are served
    rows = conn.execute(
        f"SELECT id, queue, attempts, status FROM workhorse.{CLAIM}"
        "('q', 10, 30, NULL, NULL, NULL, NULL, NULL)").fetchall()
    assert rows == [(None, "q", NEWER, "feature_level")]  # the marker the worker warns about
    statuses = conn.execute("SELECT DISTINCT status FROM workhorse.jobs WHERE queue = 'q'")
    assert statuses.fetchall() == [("ready",)]


def test_a_policy_of_a_newer_level_stops_the_claim_too(conn, queue):
    queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition("q", 10)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="q"))] * 2)
    conn.execute("UPDATE workhorse.policies SET feature_level = %s WHERE queue = 'q'", (NEWER,))
    assert queue.claim("q", 10, 30) == []
    conn.execute("UPDATE workhorse.policies SET feature_level = 1 WHERE queue = 'q'")
    assert len(queue.claim("q", 10, 30)) == 2


@pytest.mark.parametrize("per_key", [None, 1])
def test_a_job_above_the_claims_level_in_a_level_1_queue_is_never_activated_and_keeps_its_head(
        conn, queue, per_key):
    """Belt and braces: a job above the claim's level is never activated, even where its queue's
    level says nothing (the queue's level is what normally keeps the claim away, raised in the
    job's own enqueue), and its key's head is set again, so the job is claimed once a claim of
    its level runs (here: once its level is lowered by hand)."""
    queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition("q", 10, per_key)])
    [newer] = queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", concurrency_key="k"))])
    [older] = queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", concurrency_key="k"))])
    conn.execute("UPDATE workhorse.jobs SET feature_level = %s WHERE id = %s", (NEWER, newer))
    first = queue.claim("q", 10, 30)
    assert newer not in [job.id for job in first]
    if per_key:
        # One place for the key, and its first job is the refused one: the key waits for it.
        assert [job.id for job in first] == []
        assert [job.id for job in queue.claim("q", 10, 30)] == []
        conn.execute("UPDATE workhorse.jobs SET feature_level = 1 WHERE id = %s", (newer,))
        assert [job.id for job in queue.claim("q", 10, 30)] == [newer]
    else:
        assert [job.id for job in first] == [older]


def test_outcome_functions_record_nothing_for_a_job_above_their_level(conn, queue):
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="q"))] * 3)
    jobs = queue.claim("q", 3, 30)
    conn.execute("UPDATE workhorse.jobs SET feature_level = 2")
    assert not queue.complete_many([(jobs[0].id, jobs[0].fence, None)])
    assert queue.heartbeat([(jobs[1].id, jobs[1].fence, 30.0)]) == set()
    with pytest.raises(StaleLeaseError):
        queue.fail(jobs[2].id, jobs[2].fence, {"type": "E", "message": "m", "traceback": None})
    statuses = conn.execute("SELECT DISTINCT status FROM workhorse.jobs").fetchall()
    assert statuses == [("active",)]


def test_the_worker_warns_once_per_queue(conn, queue, caplog):
    _enqueue(conn, "q", NEWER)
    admission._too_new_warned.discard("q")
    with caplog.at_level(logging.WARNING, logger="workhorse.worker"):
        for _ in range(3):
            assert _ops.execute(conn, _ops.claim_batch("q", 5, 30)) == ([], None)
    warnings = [r.getMessage() for r in caplog.records if f"level {NEWER}" in r.getMessage()]
    assert len(warnings) == 1 and "'q'" in warnings[0]


def test_the_level_check_can_fail(conn, queue):
    """A copy of the claim that ignores levels admits from the raised queue: the tests above
    would see it."""
    text = _sql.function_files()[CLAIM]
    # The job's guard is in both activations: the plain queue's and the other paths'.
    for guard, count in (("IF v_level > c_level THEN", 1), ("AND j.feature_level <= c_level", 2)):
        assert text.count(guard) == count, guard
    broken = (text.replace(f"workhorse.{CLAIM}(", "workhorse.claim_broken(", 1)
              .replace("IF v_level > c_level THEN", "IF false THEN")
              .replace("AND j.feature_level <= c_level", ""))
    conn.execute(broken)
    _enqueue(conn, "q", NEWER)
    rows = conn.execute("SELECT id FROM workhorse.claim_broken"
                        "('q', 10, 30, NULL, NULL, NULL, NULL, NULL)").fetchall()
    assert len(rows) == 1 and rows[0][0] is not None
    assert Queue(conn).get_job(rows[0][0]).status is JobStatus.ACTIVE  # type: ignore[union-attr]
    # A plain governed queue (max_active only) whose level says nothing, holding a newer job:
    # only the job's own guard keeps it back (the test above), and the broken copy takes it.
    queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition("plain", 10)])
    [newer] = queue.enqueue_many([("t", {}, EnqueueOptions(queue="plain"))])
    conn.execute("UPDATE workhorse.jobs SET feature_level = %s WHERE id = %s", (NEWER, newer))
    rows = conn.execute("SELECT id FROM workhorse.claim_broken"
                        "('plain', 10, 30, NULL, NULL, NULL, NULL, NULL)").fetchall()
    assert [row[0] for row in rows if row[0] is not None] == [newer]
