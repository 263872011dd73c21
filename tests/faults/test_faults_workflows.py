"""A chord of 200 on a real fleet of two supervisors while one supervisor's process group is
killed -9 and PostgreSQL restarts once (issue #28): the callback is released exactly once (the
database's release counts), gets all 200 results, and runs once; no member is released twice."""

from __future__ import annotations

import os
import signal
import time

import _journal
import faults_app
import psycopg
import pytest
from _cluster import query
from _scenario import Scenario

from workhorse import chord, group

pytestmark = pytest.mark.slow

MEMBERS = 200


def _callback_done(url: str, workflow_id: int) -> bool:
    rows = query(url, "SELECT status FROM workhorse.jobs WHERE workflow_id = %s "
                      "AND task = 'faults_app.gather'", workflow_id)
    return bool(rows) and rows[0][0] == "succeeded"


def test_chord_released_once_through_kill_9_and_a_restart(cluster, tmp_path):
    s = Scenario(cluster, tmp_path, "chord of 200: kill -9 of a supervisor, then a restart")
    with psycopg.connect(s.url, autocommit=True) as conn, faults_app.app.using(conn):
        h = chord(group(faults_app.work.s(f"j{n}", f"k{n % faults_app.KEYS}", 0.02)
                        for n in range(MEMBERS)), faults_app.gather.s()).delay()
    victim = s.worker(new_session=True)
    survivor = s.worker(new_session=True)
    try:
        slots = set(victim.wait_for_slots(2))
        survivor.wait_for_slots(2)
        s.wait_finished(MEMBERS // 4)
        s.wait_busy(slots)  # it holds capacity when it dies
        os.killpg(victim.pid, signal.SIGKILL)
        victim.proc.wait(10)
        s.wait_finished(MEMBERS // 2)
        cluster.restart("immediate")
        deadline = time.monotonic() + 180
        while True:
            try:
                if _callback_done(s.url, h.id):
                    break
            except psycopg.OperationalError:
                pass  # the server is coming back
            assert time.monotonic() < deadline, s.logs()
            time.sleep(0.25)
    finally:
        s.stop()
        s.kill_all()
    releases = dict(query(s.url, "SELECT m.job_id, m.releases FROM workhorse.workflow_members m "
                                 "WHERE m.workflow_id = %s", h.id))
    assert all(n <= 1 for n in releases.values()), releases
    [(callback_id, payload, result)] = query(
        s.url, "SELECT id, payload, result FROM workhorse.jobs WHERE workflow_id = %s "
               "AND task = 'faults_app.gather'", h.id)
    assert releases[callback_id] == 1
    assert sum(releases.values()) == 1
    assert len(payload["args"][0]) == MEMBERS and result == MEMBERS
    statuses = dict(query(s.url, "SELECT status, count(*) FROM workhorse.jobs "
                                 "WHERE workflow_id = %s GROUP BY status", h.id))
    assert statuses == {"succeeded": MEMBERS + 1}, statuses
    # The callback ran after both faults, so exactly once.
    runs = [e for e in _journal.read(s.journal).values() if e.token == "gather"]
    assert len(runs) == 1, runs
