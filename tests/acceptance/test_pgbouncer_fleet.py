"""A fleet through PgBouncer 1.18 in transaction mode, with no setting: two real supervisors
(2 slots x concurrency 8 each, more client connections than PgBouncer has server connections)
against max_active=5, max_active_per_key=2. The budget holds (overlap measured by the handlers
themselves, on a direct connection), nothing is lost or run twice, and wake-ups, which cannot
LISTEN there, poll: a job enqueued into the idle fleet starts within about a second although
--dequeue-timeout is 30 s."""

from __future__ import annotations

import time

import pytest
from apps import fleet, probe
from apps.harness import Worker, scalar, wait_for

from workhorse import EnqueueOptions, Queue
from workhorse.worker import wakeups

pytestmark = pytest.mark.slow

JOBS = 250


def test_a_fleet_through_pgbouncer_keeps_the_budget(database_url, pgbouncer_url, conn,
                                                     tmp_path):
    counters = {"queue": fleet.MAX_ACTIVE}
    counters.update({f"key:k{i}": fleet.PER_KEY for i in range(fleet.KEYS)})
    probe.setup(conn, counters)
    Queue(conn).sync_concurrency_policies(fleet.app.name, fleet.app.policy_definitions())
    with fleet.app.using(conn):
        fleet.app.enqueue_many(
            fleet.governed.call((f"t{n}", f"k{n % fleet.KEYS}")) for n in range(JOBS)
        )

    # The default --dequeue-timeout (30 s).
    options = ["--slots", "2", "--concurrency", "8", "--lease", "10s", "--queues", "fleet,late"]
    workers = [Worker(pgbouncer_url, "apps.fleet:app", tmp_path / f"w{i}.log", *options,
                      env={"PROBE_DATABASE_URL": database_url})
               for i in range(2)]
    try:
        for worker in workers:
            worker.wait_for_slots(2)
        wait_for(
            lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'")
            == JOBS,
            90, f"{JOBS} jobs to succeed", *workers, interval=0.25,
        )
        # The idle fleet: a job in an ungoverned queue (no saturation poll) starts within the
        # polled wake-up, not at the 30 s --dequeue-timeout.
        time.sleep(1.0)
        Queue(conn).enqueue(fleet.governed.name, {"args": ["late", "k0"], "kwargs": {}},
                            EnqueueOptions(queue="late"))
        enqueued = time.monotonic()
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'late'"),
                 10, "the late job to start", *workers, interval=0.02)
        late_start = time.monotonic() - enqueued
    finally:
        codes = [w.stop() for w in workers]
    logs = [w.output() for w in workers]
    assert codes == [0, 0], logs
    assert all("polling for ready jobs" in log for log in logs), logs
    assert late_start < wakeups.POLL_WAKEUPS + 1.5, late_start

    span = scalar(conn, "SELECT extract(epoch FROM max(finished_at) - min(started_at)) "
                        "FROM workhorse.jobs WHERE payload->'args'->>0 <> 'late'")
    print(f"{JOBS} jobs through pgbouncer in {span:.2f}s; the late job started after "
          f"{late_start:.2f}s")
    rows = conn.execute("SELECT name, cur, peak, violations FROM probe_counters").fetchall()
    by_name = {name: (cur, peak, violations) for name, cur, peak, violations in rows}
    assert sum(v for _, _, v in by_name.values()) == 0, by_name
    assert by_name["queue"][1] == fleet.MAX_ACTIVE, f"overlap never reached the limit: {by_name}"
    assert max(peak for name, (_, peak, _) in by_name.items() if name != "queue") == fleet.PER_KEY
    assert all(cur == 0 for cur, _, _ in by_name.values())

    statuses = dict(conn.execute(
        "SELECT status, count(*) FROM workhorse.jobs GROUP BY status").fetchall())
    assert statuses == {"succeeded": JOBS + 1}
    runs = dict(conn.execute("SELECT token, count(*) FROM probe_runs GROUP BY token").fetchall())
    assert len(runs) == JOBS + 1
    assert {t: n for t, n in runs.items() if n > 1} == {}
    assert scalar(conn, "SELECT count(*) FROM workhorse.workers") == 0
    # No server session of this database was left holding an advisory lock (a session-level
    # one would be; pg_locks is server-wide, and other tests run beside this one).
    assert scalar(conn, "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                        "WHERE l.locktype = 'advisory' AND d.datname = current_database()") == 0
