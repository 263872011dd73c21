"""Deadlines under a real fleet (issue #43, docs/design.md "Deadlines"): two supervisors drain
3,000 jobs of 20 ms through 16 places (about 4 s of work) while the jobs' deadlines fall over
the first 3 s, so that the fleet runs some and must let the rest expire. Checked from the jobs'
own rows: zero starts at or after a job's deadline (`started_at`, the database clock the claim
stamps), every job ends succeeded or expired, an expired job never started, and health counts
the expired ones. The checker is shown to fail on a claim without its deadline clauses in
tests/integration/test_deadlines.py."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from apps import deadlines
from apps.harness import Worker, scalar, wait_for

from workhorse import EnqueueOptions, Queue

pytestmark = [pytest.mark.slow, pytest.mark.fleet]

JOBS = 3_000


def test_a_fleet_starts_nothing_past_a_deadline(database_url, conn, tmp_path):
    q = Queue(conn)
    q.sync_concurrency_policies(deadlines.app.name, deadlines.app.policy_definitions())
    workers = [Worker(database_url, "apps.deadlines:app", tmp_path / f"w{i}.log",
                      "--slots", "2", "--concurrency", "8") for i in range(2)]
    try:
        # Enqueued once the fleet is up, each with its deadline 0.5-3.5 s from now.
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.workers") >= 2, 30,
                 "two supervisors", *workers, interval=0.2)
        rng = random.Random(7)
        now = conn.execute("SELECT now()").fetchone()[0]
        q.enqueue_many([
            (deadlines.work.name, {"args": [n], "kwargs": {}},
             EnqueueOptions(queue="deadlines", max_attempts=1,
                            deadline=now + timedelta(seconds=0.5 + 3 * rng.random())))
            for n in range(JOBS)])
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs"
                                      " WHERE status IN ('succeeded', 'expired')") == JOBS,
                 120, f"{JOBS} jobs to succeed or expire", *workers, interval=0.25)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]

    late = scalar(conn, "SELECT count(*) FROM workhorse.jobs"
                        " WHERE started_at IS NOT NULL AND started_at >= deadline")
    assert late == 0
    succeeded = scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'")
    expired = scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'expired'")
    assert succeeded + expired == JOBS and succeeded > 0 and expired > 0, (succeeded, expired)
    assert scalar(conn, "SELECT count(*) FROM workhorse.jobs"
                        " WHERE status = 'expired' AND started_at IS NOT NULL") == 0
    assert q.health().depth["expired"] == expired
