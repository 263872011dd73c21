"""Dead letters redriven under a real fleet (issue #43, docs/design.md "Dead letters"): 10,000
dead jobs of a queue limited to 1,000 starts a second, redriven while two supervisors serve it.
Checked from the jobs' own rows: the dry run names exactly the jobs (and release times) the
real run then touches; no window of 1 s holds more than 1,000 starts (`started_at`, the
database clock); the releases are spaced 1 ms apart in the queue's admission order; every job
carries its redrive (`redrive_count`, `redriven_at`, an attempt entry naming the audit row), and
the audit row names them all.

Shown to fail on the broken variant: the same checker on a queue with no rate limit, redriven
with no pace, sees the stampede (far more than 1,000 starts in a second)."""

from __future__ import annotations

import bisect

import pytest
from apps import redrive
from apps.harness import Worker, scalar, wait_for

from workhorse import EnqueueOptions, Queue, _ops

pytestmark = [pytest.mark.slow]  # the rate it keeps is the claim's, fleet-tested on both servers

JOBS = 10_000
STAMPEDE = 2_000
DEAD = ("UPDATE workhorse.jobs SET status = 'failed', finished_at = now(), attempts = 1, "
        "error = '{\"type\": \"Outage\", \"message\": \"down\", \"traceback\": null}' "
        "WHERE queue = %s")


def most_in_a_window(times: list[float], period: float) -> int:
    """The largest number of `times` in any half-open window (t - period, t]."""
    ordered = sorted(times)
    return max((i + 1 - bisect.bisect_right(ordered, t - period) for i, t in enumerate(ordered)),
               default=0)


def test_the_window_checker() -> None:
    assert most_in_a_window([0.0, 0.5, 0.99, 1.0, 1.5], 1.0) == 3
    assert most_in_a_window([0.0, 1.0, 2.0], 1.0) == 1


def _starts(conn, queue: str) -> list[float]:
    return [row[0] for row in conn.execute(
        "SELECT extract(epoch FROM started_at)::float8 FROM workhorse.jobs WHERE queue = %s",
        (queue,)).fetchall()]


def test_a_redrive_of_10k_dead_jobs_keeps_the_queues_rate(database_url, conn, tmp_path):
    q = Queue(conn)
    q.sync_concurrency_policies(redrive.app.name, redrive.app.policy_definitions())
    for queue, task, n in (("redrive-limited", redrive.limited, JOBS),
                           ("redrive-free", redrive.free, STAMPEDE)):
        for start in range(0, n, 5000):
            q.enqueue_many([(task.name, {"args": [i], "kwargs": {}},
                             EnqueueOptions(queue=queue, priority=i % 3, tags=["outage-7"]))
                            for i in range(start, min(start + 5000, n))])
        conn.execute(DEAD, (queue,))
    assert len(q.list_dead(queue="redrive-limited", error_type="Outage", limit=10_000)) == JOBS

    dry = q.redrive(queue="redrive-limited", dry_run=True)
    assert dry.count == JOBS and dry.audit_id is None
    assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'failed'") == (
        JOBS + STAMPEDE)  # the dry run wrote nothing
    assert scalar(conn, "SELECT count(*) FROM workhorse.audit_log") == 0

    workers = [Worker(database_url, "apps.redrive:app", tmp_path / f"w{i}.log",
                      "--slots", "2", "--concurrency", "32") for i in range(2)]
    try:
        # The queue's own rate (1,000/s) paces the release: 1 ms apart, 10 s in all.
        real = q.redrive(queue="redrive-limited", reason="the API is back")
        assert real.jobs == dry.jobs  # exactly what the dry run said, in its order
        spacing = [(b - a).total_seconds() for a, b in zip(real.releases, real.releases[1:],
                                                           strict=False)]
        assert all(abs(gap - 1 / redrive.RATE) < 1e-6 for gap in spacing)
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = %s"
                                      " AND status = 'succeeded'", "redrive-limited") == JOBS,
                 120, f"{JOBS} redriven jobs to succeed", *workers, interval=0.25)
        stampede = q.redrive(queue="redrive-free", reason="the broken variant: no pace")
        assert len(set(stampede.releases)) == 1  # all at once
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = %s"
                                      " AND status = 'succeeded'", "redrive-free") == STAMPEDE,
                 60, "the stampede to succeed", *workers, interval=0.25)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]

    assert most_in_a_window(_starts(conn, "redrive-limited"), 1.0) <= redrive.RATE
    # The checker fails on the stampede: the same window over the unpaced queue.
    assert most_in_a_window(_starts(conn, "redrive-free"), 1.0) > redrive.RATE

    # Admission order: priority first, then id, and each start no earlier than its release.
    order = [row[0] for row in conn.execute(
        "SELECT id FROM workhorse.jobs WHERE queue = 'redrive-limited' ORDER BY run_at, id"
    ).fetchall()]
    assert order == real.jobs
    early = scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = 'redrive-limited'"
                         " AND started_at < run_at")
    assert early == 0

    # Lineage on every job, and one audit row naming them all.
    [entry] = [e for e in q.audit_log() if e.id == real.audit_id]
    assert (entry.action, entry.count, sorted(entry.job_ids), entry.reason) == (
        "redrive", JOBS, sorted(real.jobs), "the API is back")
    assert entry.filters == {"queue": "redrive-limited"}
    assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = 'redrive-limited'"
                        " AND redrive_count = 1 AND redriven_at IS NOT NULL") == JOBS
    sample = real.jobs[:: JOBS // 20]
    for job_id in sample:
        attempts = _ops.execute(conn, _ops.job_attempts(job_id))
        assert attempts is not None
        [redriven] = [a for a in attempts if a.outcome == "redriven"]
        assert redriven.redrive is not None
        assert (redriven.redrive["from"], redriven.redrive["audit_id"],
                redriven.redrive["reason"]) == ("failed", real.audit_id, "the API is back")
        assert attempts[-1].outcome == "succeeded" and not redriven.failed
