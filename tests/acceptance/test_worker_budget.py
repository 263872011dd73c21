"""Fleet-wide budgets, measured by the handlers themselves: two supervisors x 4 slots x
concurrency 8 against max_active=5, max_active_per_key=2; and --max-concurrent-tasks."""

from __future__ import annotations

import pytest
from apps import fleet, lifecycle, probe
from apps.harness import Worker, scalar, wait_for

from workhorse import Queue

pytestmark = [pytest.mark.slow, pytest.mark.fleet]

JOBS = 1200


def test_two_supervisors_never_exceed_the_fleet_budget(database_url, conn, tmp_path):
    counters = {"queue": fleet.MAX_ACTIVE}
    counters.update({f"key:k{i}": fleet.PER_KEY for i in range(fleet.KEYS)})
    probe.setup(conn, counters)
    Queue(conn).sync_concurrency_policies(fleet.app.name, fleet.app.policy_definitions())
    with fleet.app.using(conn):
        fleet.app.enqueue_many(
            fleet.governed.call((f"t{n}", f"k{n % fleet.KEYS}")) for n in range(JOBS)
        )

    options = ["--slots", "4", "--concurrency", "8", "--lease", "10s", "--dequeue-timeout", "5s"]
    workers = [Worker(database_url, "apps.fleet:app", tmp_path / f"w{i}.log", *options)
               for i in range(2)]
    try:
        slots = [set(w.wait_for_slots(4)) for w in workers]
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'")
            == JOBS,
            120, f"{JOBS} jobs to succeed", *workers, interval=0.25,
        )
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]

    rows = conn.execute("SELECT name, cur, peak, violations FROM probe_counters").fetchall()
    by_name = {name: (cur, peak, violations) for name, cur, peak, violations in rows}
    assert sum(v for _, _, v in by_name.values()) == 0, by_name
    assert by_name["queue"][1] == fleet.MAX_ACTIVE, f"overlap never reached the limit: {by_name}"
    assert max(peak for name, (_, peak, _) in by_name.items() if name != "queue") == fleet.PER_KEY
    assert all(cur == 0 for cur, _, _ in by_name.values())

    statuses = dict(conn.execute(
        "SELECT status, count(*) FROM workhorse.jobs GROUP BY status").fetchall())
    assert statuses == {"succeeded": JOBS}
    runs = dict(conn.execute(
        "SELECT token, count(*) FROM probe_runs GROUP BY token").fetchall())
    more_than_once = {t: n for t, n in runs.items() if n > 1}
    assert len(runs) == JOBS
    assert more_than_once == {}, f"{len(more_than_once)} jobs ran more than once"
    # Both supervisors did part of the work, and both removed their registry rows.
    pids = {pid for (pid,) in conn.execute("SELECT DISTINCT pid FROM probe_runs").fetchall()}
    assert all(pids & mine for mine in slots), (pids, slots)
    assert scalar(conn, "SELECT count(*) FROM workhorse.workers") == 0


def test_max_concurrent_tasks_caps_the_whole_supervisor(database_url, conn, tmp_path):
    cap = 3
    probe.setup(conn, {"queue": cap})
    worker = Worker(database_url, "apps.lifecycle:app", tmp_path / "w.log",
                    "--slots", "3", "--concurrency", "4", "--max-concurrent-tasks", str(cap),
                    "--queues", "capped", "--dequeue-timeout", "5s")
    try:
        # Every slot has made its first claim before the work arrives: under load a slot forked
        # last could start after the first had run the whole backlog (three live processes are
        # not enough: CI once saw one slot run all 45 jobs), and the test would prove nothing.
        worker.wait_for_slots(3)
        wait_for(
            lambda: scalar(conn, "SELECT count(DISTINCT application_name) FROM pg_stat_activity "
                                 "WHERE datname = current_database() "
                                 "AND application_name LIKE 'workhorse-slot%%-claim'") == 3,
            20, "every slot's first claim", worker, interval=0.05,
        )
        with lifecycle.app.using(conn):
            lifecycle.app.enqueue_many(lifecycle.capped.call((f"c{n}",)) for n in range(45))
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'")
            == 45,
            60, "45 jobs to succeed", worker, interval=0.1,
        )
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    _cur, peak, violations = conn.execute(
        "SELECT cur, peak, violations FROM probe_counters WHERE name = 'queue'").fetchone()
    assert violations == 0 and peak <= cap
    assert peak == cap, "the cap was never reached: the test proves nothing"
    # More than one slot took part (the cap is across slots, not per slot).
    assert scalar(conn, "SELECT count(DISTINCT pid) FROM probe_runs") > 1


def test_two_supervisors_on_a_queue_wide_limit_only_never_exceed_the_budget(
        database_url, conn, tmp_path):
    """A queue with only max_active (the claim's row walk, no key heads), two supervisors of
    two slots: the handlers' own overlap never exceeds the limit and reaches it."""
    probe.setup(conn, {"queue": fleet.MAX_ACTIVE})
    Queue(conn).sync_concurrency_policies(fleet.app.name, fleet.app.policy_definitions())
    with fleet.app.using(conn):
        fleet.app.enqueue_many(fleet.fifo.call((f"t{n}",)) for n in range(JOBS))

    options = ["--slots", "2", "--concurrency", "8", "--lease", "10s", "--dequeue-timeout", "5s",
               "--queues", "fleet-fifo"]
    workers = [Worker(database_url, "apps.fleet:app", tmp_path / f"g{i}.log", *options)
               for i in range(2)]
    try:
        for w in workers:
            w.wait_for_slots(2)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'")
            == JOBS,
            120, f"{JOBS} jobs to succeed", *workers, interval=0.25,
        )
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]

    (cur, peak, violations), = conn.execute(
        "SELECT cur, peak, violations FROM probe_counters WHERE name = 'queue'").fetchall()
    assert violations == 0 and cur == 0
    assert peak == fleet.MAX_ACTIVE, "the overlap never reached the limit: the test proves nothing"
    runs = dict(conn.execute("SELECT token, count(*) FROM probe_runs GROUP BY token").fetchall())
    assert len(runs) == JOBS and max(runs.values()) == 1
    assert scalar(conn, "SELECT count(DISTINCT pid) FROM probe_runs") > 1, "several slots ran"
