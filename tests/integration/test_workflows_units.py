"""Workflow members carry every option an enqueue does (issue #28, docs/design.md "Workflows" and
"Fair share and job cost"): `.set(cost=, rate_cost=, weight=)`, the task's own defaults and
callables, stored on the member's row and counted by the real claim once it is released; and
the members the database ends itself get an expiry, so that a workflow is pruned whole, once
every member finished and the last one's retention passed ("Bounds"), by the supervisor's pruner
and by `workhorse jobs prune`."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

from workhorse import App, InvalidOptionsError, JobStatus, Queue, _ops, _sql, chain, group
from workhorse.testing import drain
from workhorse.worker._registry import PRUNE_BATCH


@pytest.fixture
def app(database_url: str) -> Any:
    app = App("wfu", database_url=database_url, retention={"succeeded": "1s", "failed": "1s",
                                                             "canceled": "1s"})

    @app.task(name="wfu.add", queue="wfu-plain")
    def add(a: int, b: int = 0) -> int:
        return a + b

    @app.task(name="wfu.boom", queue="wfu-plain", max_attempts=1)
    def boom(*args: Any) -> None:
        raise ValueError("boom")

    @app.task(name="wfu.hold", queue="wfu-plain", max_attempts=1, on_failure="hold")
    def hold(*args: Any) -> None:
        raise ValueError("held")

    @app.task(name="wfu.kept", queue="wfu-plain", retention={"succeeded": "1h"})
    def kept(*args: Any) -> None:
        return None

    # Units from the arguments (callables), a default weight, on a fair queue of 4 units.
    @app.task(name="wfu.unit", queue="wfu-fair", max_active=4, fairness="key",
              concurrency_key=lambda key, n, *rest: key, cost=lambda key, n, *rest: n,
              rate_limit="1000/s", rate_cost=lambda key, n, *rest: n + 1, weight=3)
    def unit(key: str, n: int, *rest: Any) -> int:
        return n

    @app.task(name="wfu.note", queue="wfu-fair")
    def note(failed_id: int) -> int:
        return failed_id

    app.sync()
    app.t = {"add": add, "boom": boom, "hold": hold, "kept": kept, "unit": unit,  # type: ignore
             "note": note}
    yield app
    app.close()


def _units(h: Any) -> list[tuple[int, int, int]]:
    return [(j.cost, j.rate_cost, j.weight) for j in h.jobs()]


def _count_jobs(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return int(conn.execute("SELECT count(*) FROM workhorse.jobs").fetchone()[0])  # type: ignore[index]


def test_members_store_set_units_and_the_tasks_defaults(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    h = chain(t["unit"].si("a", 2),                                 # the task's callables
              t["unit"].si("a", 1).set(cost=3, rate_cost=4, weight=5),  # .set() wins
              t["unit"].si("b", 1).set(cost=lambda key, n: 2 * n + 1),  # a callable of .set()
              t["add"].si(1)).delay()                                 # defaults: 1, 1, 1
    assert _units(h) == [(2, 3, 3), (3, 4, 5), (3, 2, 3), (1, 1, 1)]
    # Read back through get_job too, and a depends_on member from apply_async.
    jobs = h.jobs()
    assert app.get_job(jobs[1].id).cost == 3  # type: ignore[union-attr]
    after = t["unit"].apply_async(args=("c", 2), depends_on=[jobs[0].id], weight=9)
    job = after.job()
    assert job.status is JobStatus.WAITING and (job.cost, job.rate_cost, job.weight) == (2, 3, 9)
    # The on_error signature's units reach its job when it is enqueued.
    g = group(t["boom"].s(), on_error=t["note"].s().set(cost=2, rate_cost=3, weight=7)).delay()
    drain(app, ["wfu-plain"])
    with psycopg.connect(app.database_url) as conn:
        row = conn.execute("SELECT cost, rate_cost, weight, payload FROM workhorse.jobs "
                           "WHERE id = (SELECT on_error_job FROM workhorse.workflows "
                           "WHERE id = %s)", (g.id,)).fetchone()
    assert row is not None and row[:3] == (2, 3, 7), row
    assert row[3]["args"][0] == g.jobs()[0].id


def test_members_and_the_on_error_job_take_a_budget_from_set(app: App, database_url: str) -> None:
    """`.set(budget=...)` names a budget for a member and for the on_error signature (issue
    #30); the on_error job names it when a member fails, and its queue is budgeted."""
    t = app.t  # type: ignore[attr-defined]
    g = group(t["boom"].s().set(budget="api"), t["add"].si(1),
              on_error=t["note"].s().set(budget="alerts")).delay()
    assert [j.budget for j in g.jobs()] == ["api", None]
    drain(app, ["wfu-plain"])
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT budget, queue FROM workhorse.jobs "
                           "WHERE id = (SELECT on_error_job FROM workhorse.workflows "
                           "WHERE id = %s)", (g.id,)).fetchone()
        pairs = conn.execute("SELECT budget, queue FROM workhorse.budget_queues "
                             "ORDER BY 1, 2").fetchall()
    assert row == ("alerts", "wfu-fair")
    assert pairs == [("alerts", "wfu-fair"), ("api", "wfu-plain")]
    with pytest.raises(InvalidOptionsError):
        t["note"].s().set(budget="")


def test_bad_units_typed_and_nothing_written(app: App, database_url: str) -> None:
    t = app.t  # type: ignore[attr-defined]
    before = _count_jobs(database_url)
    for bad in ({"cost": 0}, {"rate_cost": 1_000_001}, {"weight": 1001}, {"weight": True},
                {"cost": "2"}, {"weight": lambda *a: 1}):
        with pytest.raises(InvalidOptionsError):
            t["add"].s(1).set(**bad)
    # Beyond the synced policy (max_active=4, rate 1000/s): refused, nothing written, also in
    # the middle of a canvas and for the on_error signature.
    with pytest.raises(InvalidOptionsError, match="can never start"):
        chain(t["add"].si(1), t["unit"].si("a", 5)).delay()
    with pytest.raises(InvalidOptionsError, match="can never start"):
        chain(t["add"].si(1), t["unit"].si("a", 1).set(rate_cost=1001)).delay()
    with pytest.raises(InvalidOptionsError, match="can never start"):
        group(t["add"].si(1), on_error=t["note"].s().set(cost=9)).delay()
    # A callable fed a parent's result: it cannot see the result at enqueue (typed).
    with pytest.raises(InvalidOptionsError):
        chain(t["add"].si(1), t["unit"].s(1)).delay()
    assert _count_jobs(database_url) == before


def _claimed_units(app: App, units: bool) -> list[tuple[str, int]]:
    """Release a group of six members on the fair queue (4 units) by one success, then claim
    up to 10 through the real claim: (key, cost) of what it admitted."""
    t = app.t  # type: ignore[attr-defined]
    members = [t["unit"].si(key, 2 if units and key == "a" else 1).set(
        **({} if units else {"cost": 1})) for key in ("a", "b") for _ in range(3)]
    h = chain(t["add"].si(1), group(members)).delay()
    assert [j.status.value for j in h.jobs()][1:] == ["waiting"] * 6
    drain(app, ["wfu-plain"])  # the head only: its success releases the six
    assert [j.status.value for j in h.jobs()][1:] == ["ready"] * 6
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        claimed = Queue(conn).claim("wfu-fair", 10, 30.0)
        rows = conn.execute("SELECT ckey, cost FROM workhorse.jobs WHERE id = ANY(%s) "
                            "ORDER BY id", ([c.id for c in claimed],)).fetchall()
        conn.execute("UPDATE workhorse.jobs SET status = 'canceled', finished_at = now(), "
                     "lease_until = NULL WHERE queue = 'wfu-fair' AND status IN "
                     "('active', 'ready')")
    return [(k, c) for k, c in rows]


def check_admitted_in_units(claimed: list[tuple[str, int]], limit: int) -> None:
    """The released members were admitted by their units, fairly: the units fit the queue,
    fill it, and the key whose head costs 2 got one place beside the other key's two."""
    assert sum(c for _, c in claimed) <= limit, claimed
    assert sum(c for _, c in claimed) == limit, claimed
    assert sorted(claimed) == [("a", 2), ("b", 1), ("b", 1)], claimed


def test_a_fair_queues_released_members_are_admitted_in_units(app: App) -> None:
    check_admitted_in_units(_claimed_units(app, units=True), 4)
    # The broken variant: the same group with every member's cost lost (1): the checker fails.
    with pytest.raises(AssertionError):
        check_admitted_in_units(_claimed_units(app, units=False), 4)


def _rows(conn: psycopg.Connection[Any], workflow_id: int) -> tuple[int, int, int, int]:
    """(member jobs, release rows, dependency rows, workflow row) left of a workflow."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM workhorse.jobs WHERE workflow_id = %(w)s),"
        " (SELECT count(*) FROM workhorse.workflow_members WHERE workflow_id = %(w)s),"
        " (SELECT count(*) FROM workhorse.job_deps d JOIN workhorse.workflow_members m"
        "   ON m.job_id = d.job_id WHERE m.workflow_id = %(w)s),"
        " (SELECT count(*) FROM workhorse.workflows WHERE id = %(w)s)", {"w": workflow_id}
    ).fetchone()
    assert row is not None
    return row  # type: ignore[return-value]


def check_whole(conn: psycopg.Connection[Any], workflow_id: int, members: int,
                edges: int) -> bool:
    """A workflow is all there (True) or all gone (False), never in part."""
    left = _rows(conn, workflow_id)
    assert left in ((members, members, edges, 1), (0, 0, 0, 0)), left
    return left != (0, 0, 0, 0)


def _prune(conn: psycopg.Connection[Any]) -> int:
    """What the supervisor's tick runs (worker/_registry.py `_prune`): batches until short."""
    total = 0
    while True:
        n = _ops.execute(conn, _ops.prune_jobs(PRUNE_BATCH))
        assert n >= 0
        total += n
        if n < PRUNE_BATCH:
            return total


def test_canceled_members_expire_and_workflows_are_pruned_whole(app: App,
                                                                 database_url: str) -> None:
    t = app.t  # type: ignore[attr-defined]
    failed = chain(t["boom"].s(), t["add"].s(1), t["add"].s(2)).delay()   # fails, cancels 2
    canceled = chain(t["add"].si(1), t["add"].s(2)).delay()
    canceled.cancel()                                                     # both canceled
    done = chain(t["add"].si(1), t["add"].s(2)).delay()                   # succeeds
    slow = chain(t["add"].si(1), t["kept"].s()).delay()    # the last one kept for an hour
    held = chain(t["add"].si(1), t["hold"].s(), t["add"].s(1)).delay()    # unfinished
    plain = t["add"].delay(1)
    drain(app, ["wfu-plain"])
    # Every member the database ended has an expiry: its finish plus its task's retention.
    for job in failed.jobs() + canceled.jobs():
        assert job.status in (JobStatus.FAILED, JobStatus.CANCELED), job
        assert job.expires_at is not None and job.finished_at is not None, job
        assert 0.9 <= (job.expires_at - job.finished_at).total_seconds() <= 1.1, job
    assert [j.expires_at is None for j in held.jobs()] == [False, True, True]
    time.sleep(1.3)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _prune(conn) == 1 + 3 + 2 + 2 + 0  # the plain job, failed, canceled, done
        assert app.get_job(plain.id) is None
        assert not check_whole(conn, failed.id, 3, 2)
        assert not check_whole(conn, canceled.id, 2, 1)
        assert not check_whole(conn, done.id, 2, 1)
        # The first member of `slow` expired an hour before the last: both stay, as `held`'s.
        assert check_whole(conn, slow.id, 2, 1) and check_whole(conn, held.id, 3, 2)
        conn.execute("UPDATE workhorse.jobs SET expires_at = now() - interval '1 s' "
                     "WHERE workflow_id = %s AND task = 'wfu.kept'", (slow.id,))
        assert _prune(conn) == 2 and not check_whole(conn, slow.id, 2, 1)
        assert check_whole(conn, held.id, 3, 2)


def test_jobs_prune_skips_unfinished_workflows_and_takes_finished_ones_whole(
        app: App, database_url: str) -> None:
    t = app.t  # type: ignore[attr-defined]
    held = chain(t["add"].si(1), t["hold"].s(), t["add"].s(1)).delay()
    done = chain(t["add"].si(1), group(t["add"].s(2), t["boom"].s()), t["add"].s()).delay()
    drain(app, ["wfu-plain"])
    assert held.status().counts == {"succeeded": 1, "held": 1, "waiting": 1}

    def prune(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "workhorse", "--database-url", database_url, "jobs", "prune",
             *args, "--json"], capture_output=True, text=True, timeout=60)

    with psycopg.connect(database_url, autocommit=True) as conn:
        # Only failed ones named: `done` has succeeded members too, so it stays whole.
        run = prune("--older-than", "0s", "--status", "failed")
        assert run.returncode == 0, run.stderr
        assert check_whole(conn, done.id, 4, 4) and check_whole(conn, held.id, 3, 2)
        run = prune("--older-than", "0s")
        assert run.returncode == 0, run.stderr
        assert '"pruned": 4' in run.stdout, run.stdout
        assert not check_whole(conn, done.id, 4, 4)
        # Even naming held: its dependent waits, so the workflow is unfinished and stays.
        run = prune("--older-than", "0s", "--status", "held", "--status", "succeeded")
        assert run.returncode == 0 and '"pruned": 0' in run.stdout, run.stdout
        assert check_whole(conn, held.id, 3, 2)


def test_the_whole_checker_fails_on_a_prune_of_members_one_by_one(app: App,
                                                                  database_url: str) -> None:
    """The broken variant: 0.2.0's prune function takes each member by its own expiry,
    and leaves a workflow in part; check_whole fails on it."""
    t = app.t  # type: ignore[attr-defined]
    slow = chain(t["add"].si(1), t["kept"].s()).delay()
    drain(app, ["wfu-plain"])
    time.sleep(1.3)
    with psycopg.connect(database_url, autocommit=True) as conn:
        # The prune function 0.2.0 shipped, by its file in released.json.
        [function] = [path.split("/")[1].removesuffix(".sql") for path in _sql.released()["0.2.0"]
                      if path.startswith("functions/prune_jobs_")]
        assert function != _sql.function_name("prune_jobs")
        conn.execute(f"SELECT workhorse.{function}(5000, NULL, NULL)")
        with pytest.raises(AssertionError):
            check_whole(conn, slow.id, 2, 1)
