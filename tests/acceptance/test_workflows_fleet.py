"""Workflows on a real fleet (issue #28): two supervisors run a chord of 200 and a group of 100
on a max_active=5 queue; the handlers' own overlap counters never pass 5, and the database's
release counts say every member was released at most once, the callback exactly once, with
every result."""

from __future__ import annotations

import pytest
from apps import probe
from apps import workflows as wf
from apps.harness import Worker, scalar, wait_for

from workhorse import Queue, chord, group

pytestmark = [pytest.mark.slow, pytest.mark.fleet]


def _fleet(database_url, tmp_path):
    options = ["--slots", "2", "--concurrency", "8", "--lease", "10s", "--dequeue-timeout", "5s"]
    return [Worker(database_url, "apps.workflows:app", tmp_path / f"w{i}.log", *options)
            for i in range(2)]


def _released_once(conn, workflow_id):
    """Every member released at most once; returns {member id: releases}."""
    rows = conn.execute("SELECT job_id, releases FROM workhorse.workflow_members "
                        "WHERE workflow_id = %s", (workflow_id,)).fetchall()
    releases = dict(rows)
    assert all(n <= 1 for n in releases.values()), {k: n for k, n in releases.items() if n > 1}
    return releases


def test_chord_of_200_released_once_under_the_budget(database_url, conn, tmp_path):
    probe.setup(conn, {"queue": wf.MAX_ACTIVE})
    Queue(conn).sync_concurrency_policies(wf.app.name, wf.app.policy_definitions())
    workers = _fleet(database_url, tmp_path)
    try:
        for w in workers:
            w.wait_for_slots(2)
        with wf.app.using(conn):
            h = chord(group(wf.member.s(f"m{n}") for n in range(200)), wf.join.s()).delay()
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE workflow_id = %s AND status = 'succeeded'",
                                h.id) == 201,
                 180, "the chord to finish", *workers, interval=0.25)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    releases = _released_once(conn, h.id)
    callback = max(releases)
    assert releases[callback] == 1
    assert sum(releases.values()) == 1  # only the callback waits for anything
    with wf.app.using(conn):
        assert h.get(timeout=5) == 200
    assert scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'join'") == 1
    (violations, peak) = conn.execute(
        "SELECT violations, peak FROM probe_counters WHERE name = 'queue'").fetchone()
    assert violations == 0 and peak <= wf.MAX_ACTIVE


def test_group_of_100_never_runs_more_than_5(database_url, conn, tmp_path):
    probe.setup(conn, {"queue": wf.MAX_ACTIVE})
    Queue(conn).sync_concurrency_policies(wf.app.name, wf.app.policy_definitions())
    workers = _fleet(database_url, tmp_path)
    try:
        for w in workers:
            w.wait_for_slots(2)
        # Released all at once by one success: the head's.
        with wf.app.using(conn):
            h = (wf.member.s("head") | group(wf.member.si(f"g{n}") for n in range(100))).delay()
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE workflow_id = %s AND status = 'succeeded'",
                                h.id) == 101,
                 180, "the group to finish", *workers, interval=0.25)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    releases = _released_once(conn, h.id)
    assert sum(releases.values()) == 100
    (violations, peak) = conn.execute(
        "SELECT violations, peak FROM probe_counters WHERE name = 'queue'").fetchone()
    assert violations == 0 and peak <= wf.MAX_ACTIVE
    # Handler timestamps: at no start were more than 5 others running (peak from the probe);
    # the runs are one per member.
    assert scalar(conn, "SELECT count(DISTINCT token) FROM probe_runs") == 101
