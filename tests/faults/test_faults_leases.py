"""A 1 s lease (the shortest allowed) is renewed in time under load: slots full of CPU-bound
sync handlers that hold the GIL, on a machine kept busy by other processes. Jobs last several
leases; not one may lose its lease (it would be claimed and run again)."""

from __future__ import annotations

import multiprocessing
import time

import _journal
import faults_app
import pytest
from _scenario import Scenario, assert_sound, limits

pytestmark = pytest.mark.slow

JOBS = 24
SECONDS = 2.5  # each job outlives two leases and a half


def _hog(until: float) -> None:
    while time.monotonic() < until:
        sum(range(10000))


def test_a_1s_lease_is_renewed_in_time_under_load(cluster, tmp_path):
    s = Scenario(cluster, tmp_path, "1 s lease under load (CPU-bound sync jobs + 2 hogs)")
    s.tokens = [f"j{n}" for n in range(JOBS)]
    import psycopg

    with psycopg.connect(s.url, autocommit=True) as conn, faults_app.app.using(conn):
        faults_app.app.enqueue_many(
            faults_app.blocking.call((token, f"k{n % faults_app.KEYS}", SECONDS))
            for n, token in enumerate(s.tokens))
    until = time.monotonic() + 60
    hogs = [multiprocessing.get_context("fork").Process(target=_hog, args=(until,))
            for _ in range(2)]
    for hog in hogs:
        hog.start()
    worker = s.worker("--slots", "3", "--concurrency", "4", "--lease", "1s",
                      "--dequeue-timeout", "1s", "--grace", "10s", "--queues", "blocking")
    try:
        s.wait_all_succeeded(timeout=90)
    finally:
        for hog in hogs:
            hog.terminate()
            hog.join(5)
        codes = s.stop()
    row, seen, found = s.check(limits())
    assert_sound(row, seen, found, s.logs())
    assert codes == [0], s.logs()
    assert found.duplicates == {}, f"leases ran out under running jobs: {found.duplicates}"
    assert "lease had been lost" not in worker.output()
    executions = _journal.read(s.journal)
    assert all(e.end is not None and e.end - e.start >= SECONDS for e in executions.values())
    assert row.peak == faults_app.LIMIT, "the slots were never full: no load"
