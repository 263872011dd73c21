"""Supervisor and slot lifecycle with real processes: kill -9 of a slot and of the supervisor,
SIGTERM draining, retries with backoff, holding, and release."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from apps import lifecycle, probe
from apps.harness import HERE, Worker, alive, scalar, wait_for

from workhorse import EnqueueOptions, Queue


def _status(conn, job_id):
    return scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s", job_id)


def _enqueue(conn, call):
    with lifecycle.app.using(conn):
        return lifecycle.app.enqueue_many([call])[0].id


def test_kill_9_of_a_slot_reruns_its_job_after_the_lease(database_url, conn, tmp_path):
    probe.setup(conn)
    job = _enqueue(conn, lifecycle.slow.call(("victim", 60.0)))
    worker = Worker(database_url, "apps.lifecycle:app", tmp_path / "w.log",
                    "--slots", "2", "--lease", "2s", "--queues", "slow")
    try:
        slots = worker.wait_for_slots(2)
        pid = wait_for(lambda: scalar(conn, "SELECT pid FROM probe_runs WHERE token = 'victim'"),
                       20, "the job to start", worker)
        assert pid in slots
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: _status(conn, job) == "succeeded", 20, "the job to run again", worker)
        assert time.monotonic() - killed_at >= 1.0  # not before its lease ran out
        replaced = worker.wait_for_slots(2)
        assert pid not in replaced and len(set(replaced) & set(slots)) == 1
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    assert scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'victim'") == 2
    assert scalar(conn, "SELECT attempts FROM workhorse.jobs WHERE id = %s", job) == 2
    assert "was killed by SIGKILL; restarting" in worker.output()


def test_a_cancel_request_cancels_an_async_handler(database_url, conn, tmp_path):
    probe.setup(conn)
    job = _enqueue(conn, lifecycle.cancellable.call(("c1",)))
    worker = Worker(database_url, "apps.lifecycle:app", tmp_path / "w.log",
                    "--slots", "1", "--queues", "slow")
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'c1'"),
                 20, "the job to start", worker)
        canceled = subprocess.run(
            [sys.executable, "-m", "workhorse", "--database-url", database_url,
             "jobs", "cancel", str(job)],
            cwd=HERE, capture_output=True, text=True, timeout=30,
        )
        assert canceled.returncode == 0, canceled.stderr
        # The task's own lease (1s) sets the heartbeat pace: the request is seen within a
        # second, and the async handler is cancelled.
        wait_for(lambda: scalar(
            conn, "SELECT count(*) FROM probe_runs WHERE token = 'c1:cancelled'"),
            10, "the handler to be cancelled", worker)
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    assert _status(conn, job) == "canceled"
    assert "canceled on request" in worker.output()


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_refused_heartbeat_loses_the_lease_and_discards_the_attempt(
    database_url, conn, tmp_path, kind
):
    """The real path of a lost lease, no flag set by hand: the lease of a running first attempt
    runs out (moved into the past in the database), the slot's next heartbeat is refused, and
    the slot marks the job lost: an async handler is cancelled, a sync one's heartbeat() raises
    StaleLeaseError. Nothing of that attempt is recorded; the job is claimed again and its
    second attempt's result is the one stored."""
    probe.setup(conn)
    task = lifecycle.losable if kind == "async" else lifecycle.losable_sync
    job = _enqueue(conn, task.call(("l1",)))
    worker = Worker(database_url, "apps.lifecycle:app", tmp_path / "w.log",
                    "--slots", "1", "--queues", "slow", "--dequeue-timeout", "1s")
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'l1:1'"),
                 120, "the first attempt to start", worker)
        conn.execute("UPDATE workhorse.jobs SET lease_until = clock_timestamp() - interval '1 s'"
                     " WHERE id = %s AND attempts = 1", (job,))
        ended = "l1:cancelled" if kind == "async" else "l1:stale"
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = %s", ended),
                 120, "the first attempt to learn that its lease was lost", worker)
        wait_for(lambda: _status(conn, job) == "succeeded", 120, "the second attempt", worker)
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    row = conn.execute("SELECT attempts, result #>> '{}', error FROM workhorse.jobs"
                       " WHERE id = %s", (job,)).fetchone()
    assert row == (2, "l1:2", None), row
    assert f"job {job} (" in worker.output() and "lost its lease" in worker.output()


def test_sigterm_drains_running_jobs_and_exits_0(database_url, conn, tmp_path):
    probe.setup(conn)
    running = [_enqueue(conn, lifecycle.slow.call((f"r{n}", 1.5))) for n in range(4)]
    worker = Worker(database_url, "apps.lifecycle:app", tmp_path / "w.log",
                    "--slots", "2", "--concurrency", "2", "--queues", "slow", "--grace", "20s")
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM probe_runs") == 4, 20,
                 "4 jobs to start", worker)
        waiting = [_enqueue(conn, lifecycle.slow.call((f"w{n}", 0.0))) for n in range(3)]
        assert scalar(conn, "SELECT count(*) FROM workhorse.workers") == 1
        worker.signal(signal.SIGTERM)
        code = worker.proc.wait(20)
    finally:
        worker.kill()
    assert code == 0, worker.output()
    assert [_status(conn, j) for j in running] == ["succeeded"] * 4
    assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'active'") == 0
    # Nothing new was claimed once the drain began (the 4 slots were full until then).
    assert {_status(conn, j) for j in waiting} == {"ready"}
    assert scalar(conn, "SELECT count(*) FROM workhorse.workers") == 0


def test_retry_with_backoff_then_held_then_released(database_url, conn, tmp_path):
    probe.setup(conn)
    job = _enqueue(conn, lifecycle.flaky.call(("f1",)))
    unknown = Queue(conn).enqueue("apps.lifecycle.nobody", {"args": [], "kwargs": {}},
                                  EnqueueOptions(queue="flaky"))
    bad = _enqueue(conn, lifecycle.not_json.call(()))
    odd = _enqueue(conn, lifecycle.unstorable_error.call(()))
    worker = Worker(database_url, "apps.lifecycle:app", tmp_path / "w.log",
                    "--slots", "1", "--concurrency", "2", "--queues", "flaky")
    try:
        wait_for(lambda: _status(conn, job) == "held", 30, "the job to be held", worker)
        times = [t for (t,) in conn.execute(
            "SELECT at FROM probe_runs WHERE token = 'f1' ORDER BY at").fetchall()]
        assert len(times) == 3
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        assert min(gaps) >= 0.4, gaps  # retry_backoff=0.4 between attempts
        held = Queue(conn).get_job(job)
        assert held.attempts == 3 and held.error["type"] == "RuntimeError"
        assert "f1 is not ready yet" in held.error["message"]
        assert "Traceback" in held.error["traceback"] and "flaky" in held.error["traceback"]

        # Another app's job in the queue: passed over, never claimed (docs/design.md "Errors").
        left = Queue(conn).get_job(unknown)
        assert left.status == "ready" and left.attempts == 0 and left.error is None
        not_json = Queue(conn).get_job(bad)
        assert not_json.status == "failed" and not_json.error["type"] == "PayloadError"
        wait_for(lambda: _status(conn, odd) == "failed", 10, "the unstorable error", worker)
        assert "\\x00" in Queue(conn).get_job(odd).error["message"]

        conn.execute("INSERT INTO probe_flags VALUES ('f1')")
        released = subprocess.run(
            [sys.executable, "-m", "workhorse", "--database-url", database_url,
             "jobs", "retry", str(job), "--json"],
            cwd=HERE, capture_output=True, text=True, timeout=30,
        )
        assert released.returncode == 0, released.stderr
        assert json.loads(released.stdout) == {"released": [job]}
        wait_for(lambda: _status(conn, job) == "succeeded", 20, "the released job", worker)
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    assert Queue(conn).get_job(job).result == "f1 done"
    assert scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'f1'") == 4


def test_kill_9_of_the_supervisor_ends_its_slots(database_url, conn, tmp_path):
    probe.setup(conn)
    jobs = [_enqueue(conn, lifecycle.slow.call((f"s{n}", 1.0))) for n in range(2)]
    worker = Worker(database_url, "apps.lifecycle:app", tmp_path / "w.log",
                    "--slots", "2", "--queues", "slow")
    try:
        slots = worker.wait_for_slots(2)
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM probe_runs") == 2, 20,
                 "2 jobs to start", worker)
        worker.proc.kill()
        worker.proc.wait(10)
        wait_for(lambda: not any(alive(pid) for pid in slots), 8, "the slots to exit", worker)
    finally:
        worker.kill()
    # They finished what they were running before leaving: nothing was lost.
    assert [_status(conn, j) for j in jobs] == ["succeeded", "succeeded"]
