"""Schedules fired by a fleet of real supervisors, with no beat process: three `workhorse
worker` processes against one database, one killed with kill -9 midway and another started.
Every occurrence in the span gets exactly one job, with no gap."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from apps import scheduled
from apps.harness import Worker, scalar, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.fleet]

RUN_FOR = 10.0
# How late an occurrence may be enqueued: generous (a busy machine is slow), and well inside the
# 60 s after which invariant 8 counts an occurrence as missed.
MAX_LAG = 30.0


def test_three_supervisors_fire_each_occurrence_exactly_once_through_a_kill_9(
    database_url, conn, tmp_path
):
    scheduled.app.database_url = database_url
    try:
        scheduled.app.sync()
    finally:
        scheduled.app.close()
    args = ("--slots", "1", "--grace", "5s")
    fleet = [Worker(database_url, "apps.scheduled:app", tmp_path / f"w{i}.log", *args)
             for i in range(3)]
    try:
        for worker in fleet:
            worker.wait_for_slots(1)
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs") >= 1, 120,
                 "the first occurrence to fire", *fleet)
        started = time.monotonic()
        time.sleep(RUN_FOR / 2)
        fleet[0].kill()  # kill -9 of a supervisor, perhaps inside a firing pass
        fleet.append(Worker(database_url, "apps.scheduled:app", tmp_path / "w3.log", *args))
        fleet[-1].wait_for_slots(1)
        time.sleep(max(0.0, RUN_FOR - (time.monotonic() - started)))
        # Repeat until met, with a deadline: every occurrence but the newest few has run.
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status <>"
                                " 'succeeded' AND scheduled_for < now() - interval '3 s'") == 0,
                 60, "the fired jobs to run", *fleet[1:])
        settled = scalar(conn, "SELECT now() - interval '3 s'")
    finally:
        codes = [worker.stop() for worker in fleet[1:]]
    assert codes == [0, 0, 0], "\n".join(w.output() for w in fleet)
    assert "1 stored in namespace scheduled" in fleet[1].output()

    rows = conn.execute(
        "SELECT scheduled_for, count(*), min(enqueued_at) "
        "FROM workhorse.jobs WHERE task = 'tick' GROUP BY scheduled_for "
        "ORDER BY scheduled_for").fetchall()
    check_one_job_per_occurrence(rows)
    # Each handler read its own occurrence through current_job(), as the job row has it.
    read = conn.execute(
        "SELECT scheduled_for, result #>> '{}' FROM workhorse.jobs "
        "WHERE task = 'tick' AND status = 'succeeded'").fetchall()
    assert len(read) >= RUN_FOR - 1
    assert all(datetime.fromisoformat(text) == at for at, text in read), read
    assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status <> 'succeeded'"
                        " AND scheduled_for < %s", settled) == 0
    # The schedule's queue is a queue like any other for the operator.
    listed = json.loads(subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "queues", "--json"],
        capture_output=True, text=True, check=True, timeout=60).stdout)
    assert [row["queue"] for row in listed] == ["ticks"], listed


def check_one_job_per_occurrence(rows: list[tuple[datetime, int, datetime]]) -> None:
    """rows: (occurrence, jobs, first enqueued_at) by occurrence, ascending."""
    occurrences = [row[0] for row in rows]
    assert all(n == 1 for _, n, _ in rows), [r for r in rows if r[1] != 1]
    span = occurrences[-1] - occurrences[0]
    assert span >= timedelta(seconds=RUN_FOR - 1), occurrences
    expected = [occurrences[0] + timedelta(seconds=k) for k in range(int(span.total_seconds()) + 1)]
    assert occurrences == expected  # every whole second in the span: no gap
    # Once the fleet was up (its first pass fired what fell due while it started), each one was
    # enqueued close to its instant, by PostgreSQL's clock, the kill -9 included.
    first_pass = min(enqueued for _, _, enqueued in rows)
    lags = [(enqueued - at).total_seconds() for at, _, enqueued in rows if at > first_pass]
    assert len(lags) >= RUN_FOR - 1 and max(lags) < MAX_LAG, lags


def test_the_occurrence_checker_fails_on_a_duplicate_a_gap_a_short_span_and_a_late_job() -> None:
    start = datetime(2026, 12, 1, 12, tzinfo=UTC)
    good = [(start + timedelta(seconds=k), 1, start + timedelta(seconds=k, milliseconds=30))
            for k in range(int(RUN_FOR) + 1)]
    check_one_job_per_occurrence(good)
    duplicate = [(at, 2 if k == 4 else n, e) for k, (at, n, e) in enumerate(good)]
    gap = good[:5] + good[6:]
    short = good[: int(RUN_FOR) - 2]
    late = [(at, n, e + timedelta(seconds=MAX_LAG + 1) if k == 6 else e)
            for k, (at, n, e) in enumerate(good)]
    for broken in (duplicate, gap, short, late):
        with pytest.raises(AssertionError):
            check_one_job_per_occurrence(broken)
