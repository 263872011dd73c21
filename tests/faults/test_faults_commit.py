"""A governed claim that queued for the admission lock commits asynchronously, so that the lock
is not held through its WAL flush, and the worker starts no job of it before a commit
barrier has flushed it (sql/claim/'s "The commit after the lock"; docs/architecture.md "The flush
under the lock").

The fault, three times a run: the WAL writer is stopped (SIGSTOP) for 2 s under a saturated
governed fleet, so that WAL no commit has flushed stays in the server's memory, then killed
(SIGKILL): the postmaster ends every backend, reinitializes, and recovers from the WAL on disk,
so the claims not yet flushed are gone. Meanwhile two pests take turns holding the queue's
admission lock 3 ms at a time, as more claimers would, writing nothing: every claim of the fleet
queues for the lock (more than 2 ms), so every claim commits asynchronously, and only the
barriers and the lease renewals flush. The checker: every execution was admitted by a claim the
database still has, that is, no job ran more times than its recorded `attempts` (every claim
adds one; this app never snoozes). The broken variant, the same worker without its barrier, runs
jobs on claims the crash took back, and the checker sees them."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter

import _journal
import psycopg
import pytest
from _cluster import query
from _scenario import WORKER_OPTIONS, Scenario, assert_sound, limits
from psycopg import sql
from sql_names import called_function, function_text

pytestmark = pytest.mark.slow

JOBS = 600
HOLD_S = 2.0
# Lease renewals commit synchronously and so flush every claim before them: one every 4 s a
# slot, so that the claims of the hold are mostly not flushed by one (the broken variant).
OPTIONS = tuple("12s" if o == "3s" else o for o in WORKER_OPTIONS)


class LockPest(threading.Thread):
    """Takes the queue's admission lock for 3 ms, again and again, in transactions that write
    nothing (so its commits flush nothing), reconnecting after a crash."""

    def __init__(self, url: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.queue = queue
        self.stop = threading.Event()
        self.holds = 0
        # The lock id function the claim calls, whatever its version.
        [lock_id] = re.findall(r"workhorse\.(_admission_lock_id_v\d+)\(",
                               function_text(called_function("claim")))[:1]
        self.statement = sql.SQL("SELECT pg_advisory_xact_lock(workhorse.{}(%s))").format(
            sql.Identifier(lock_id))

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.url, connect_timeout=3) as conn:
                    while not self.stop.is_set():
                        with conn.transaction():
                            conn.execute(self.statement, (self.queue,))
                            time.sleep(0.003)
                        self.holds += 1
            except psycopg.OperationalError:
                time.sleep(0.1)


def _crash_with_the_wal_writer_held(url: str) -> None:
    pid = query(url, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'")[0][0]
    os.kill(pid, signal.SIGSTOP)
    time.sleep(HOLD_S)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)  # the postmaster's crash restart; query() retries until it accepts again
    query(url, "SELECT 1", timeout=60)


def _unrecorded_runs(cluster, tmp_path, env: dict[str, str]) -> tuple[
        dict[str, tuple[int, int]], Scenario, list[int]]:
    s = Scenario(cluster, tmp_path, "WAL writer stopped 2 s, then killed (x3)")
    s.enqueue(JOBS)
    s.worker(*OPTIONS, env=env)
    # Two pests take turns, so the lock is never free: a claim always waits for it.
    pests = [LockPest(s.url, "work") for _ in range(2)]
    for pest in pests:
        pest.start()
    try:
        for fifths in (1, 2, 3):
            s.wait_finished(JOBS * fifths // 5)
            _crash_with_the_wal_writer_held(s.url)
        s.wait_all_succeeded()
    finally:
        for pest in pests:
            pest.stop.set()
        codes = s.stop()
    for pest in pests:
        pest.join()
        assert pest.holds > 100, "a pest never held the lock: no claim waited for it"
    runs = Counter(e.token for e in _journal.read(s.journal).values())
    attempts = dict(query(s.url, "SELECT payload->'args'->>0, attempts FROM workhorse.jobs"))
    unrecorded = {t: (n, attempts[t]) for t, n in runs.items() if n > attempts[t]}
    return unrecorded, s, codes


def test_no_job_runs_on_a_claim_the_crash_took_back(cluster, tmp_path):
    unrecorded, s, codes = _unrecorded_runs(cluster, tmp_path, {})
    assert unrecorded == {}, f"(runs, attempts) of jobs run on lost claims: {unrecorded}"
    row, seen, found = s.check(limits())
    assert_sound(row, seen, found, s.logs())
    assert codes == [0], s.logs()


def test_the_checker_sees_jobs_run_on_lost_claims_without_the_barrier(cluster, tmp_path):
    unrecorded, _, _ = _unrecorded_runs(cluster, tmp_path, {"FAULTS_NO_COMMIT_BARRIER": "1"})
    print(f"jobs run on lost claims without the barrier: {len(unrecorded)}")
    assert unrecorded, "the crashes took back no started claim: this fault proves nothing"
