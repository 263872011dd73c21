"""Schedules against a real PostgreSQL: desired-state sync and namespaces, firing passes with the
catch-up rule, exactly one job per occurrence by the unique key, and the firing plan."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import zoneinfo
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sql_names import released_statement

import workhorse
from workhorse import (
    App,
    InvalidScheduleError,
    PayloadError,
    PolicyConflictError,
    Queue,
    ScheduleConflictError,
    ScheduleDefinition,
    UnknownTaskError,
    _sql,
)
from workhorse._occurrences import CATCH_UP_ALL_LIMIT, MISSED_AFTER
from workhorse.worker.scheduler import Scheduler


def every(name: str, duration: str = "10s", **fields: Any) -> ScheduleDefinition:
    return ScheduleDefinition(name=name, task="tasks.tick", every=duration, **fields)


def rewind(conn: psycopg.Connection[Any], name: str, seconds: float) -> None:
    """As if every supervisor had been down: the schedule's pointer `seconds` in the past, on
    its grid (10 s)."""
    conn.execute(
        "UPDATE workhorse.schedules SET next_run_at = "
        "to_timestamp(floor(extract(epoch FROM now() - make_interval(secs => %s)) / 10) * 10) "
        "WHERE name = %s", (seconds, name))


def jobs_of(conn: psycopg.Connection[Any], name: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT scheduled_for, run_at, status, payload, queue FROM workhorse.jobs "
        "WHERE meta->>'schedule' = %s ORDER BY scheduled_for", (name,)).fetchall()


def count(conn: psycopg.Connection[Any], query: str, *params: Any) -> int:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


# ---- sync ---------------------------------------------------------------------------------------


def test_sync_stores_schedules_and_a_resync_moves_nothing(queue: Queue) -> None:
    stored = queue.sync_schedules("billing", [
        every("refresh-eu", "30s", args=["eu"]),
        ScheduleDefinition("nightly", "tasks.report", cron="0 3 * * *", tz="Europe/Oslo"),
    ])
    by_name = {s.name: s for s in stored}
    assert set(by_name) == {"refresh-eu", "nightly"}
    refresh = by_name["refresh-eu"]
    assert (refresh.every, refresh.args, refresh.queue, refresh.last_run_at) == (
        "30s", ["eu"], "tasks.tick", None)
    assert refresh.next_run_at.timestamp() % 30 == 0
    assert by_name["nightly"].next_run_at.astimezone(zoneinfo.ZoneInfo("Europe/Oslo")).hour == 3
    again = queue.sync_schedules_report("billing", [
        every("refresh-eu", "30s", args=["eu"]),
        ScheduleDefinition("nightly", "tasks.report", cron="0  3 * * *", tz="Europe/Oslo"),
    ])
    assert sorted(again.unchanged) == ["nightly", "refresh-eu"] and not again.updated
    assert queue.list_schedules("billing") == stored


def test_a_changed_expression_takes_effect_from_its_next_occurrence(queue: Queue) -> None:
    queue.sync_schedules("billing", [every("s", "1h")])
    far = queue.list_schedules()[0].next_run_at
    kept = queue.sync_schedules("billing", [every("s", "1h", args=[1])])[0]
    assert kept.next_run_at == far and kept.args == [1]  # not the expression: same place
    moved = queue.sync_schedules("billing", [every("s", "10s", args=[1])])[0]
    assert moved.next_run_at < far and moved.next_run_at.timestamp() % 10 == 0
    report = queue.sync_schedules_report("billing", [every("s", "10s", args=[2])])
    assert report.updated == ["s"]


def test_sync_prunes_the_namespace_and_only_it(queue: Queue) -> None:
    queue.sync_schedules("a", [every("a1"), every("a2")])
    queue.sync_schedules("b", [every("b1")])
    report = queue.sync_schedules_report("a", [every("a1")])
    assert report.pruned == ["a2"] and report.unchanged == ["a1"]
    assert queue.sync_schedules("a", [every("a3")], prune=False)
    assert sorted(s.name for s in queue.list_schedules()) == ["a1", "a3", "b1"]


def test_two_namespaces_cannot_take_each_others_schedule(queue: Queue) -> None:
    queue.sync_schedules("a", [every("shared", "10s")])
    before = queue.list_schedules()
    with pytest.raises(ScheduleConflictError, match="owned by namespace a"):
        queue.sync_schedules("b", [every("mine"), every("shared", "1m")])
    with pytest.raises(PolicyConflictError):  # the same refusal as for another's queue
        queue.sync_schedules("b", [every("shared")])
    assert queue.list_schedules() == before  # nothing written, "mine" included
    queue.sync_schedules("b", [])  # b's prune does not touch a's
    assert queue.list_schedules() == before


@pytest.mark.parametrize("definitions, error", [
    ([every("x"), every("x")], InvalidScheduleError),
    ([every("x"), every("y", args=[float("nan")])], PayloadError),
    (["not a definition"], InvalidScheduleError),
])
def test_bad_syncs_write_nothing(queue: Queue, definitions: list[Any], error: type) -> None:
    queue.sync_schedules("a", [every("kept")])
    with pytest.raises(error):
        queue.sync_schedules("a", definitions)
    assert [s.name for s in queue.list_schedules()] == ["kept"]


def test_the_async_queue_syncs_and_lists_too(database_url: str) -> None:
    import anyio

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            aqueue = workhorse.AsyncQueue(aconn)
            stored = await aqueue.sync_schedules("a", [every("x")])
            assert [s.name for s in stored] == ["x"]
            report = await aqueue.sync_schedules_report("a", [])
            assert report.pruned == ["x"] and await aqueue.list_schedules() == []

    anyio.run(main)


# ---- the app: declarations and sync ------------------------------------------------------------


def _app(database_url: str) -> App:
    app = App("sched-app", database_url)

    @app.periodic(every="10s", args=("eu",), name="refresh-eu", queue="refresh")
    def refresh(region: str) -> None: ...

    @app.task(max_attempts=5, priority=3, concurrency_key=lambda digest: digest)
    def send(digest: str) -> None: ...

    app.schedule(send, cron="0 9 * * mon-fri", tz="Europe/Oslo", kwargs={"digest": "d"},
                 name="weekday-digest")
    return app


def test_app_sync_pushes_schedules_with_the_policies(database_url: str, queue: Queue) -> None:
    app = _app(database_url)
    try:
        report = app.sync()
        assert report.schedules is not None
        assert sorted(report.schedules.created) == ["refresh-eu", "weekday-digest"]
        digest = {s.name: s for s in queue.list_schedules("sched-app")}["weekday-digest"]
        assert (digest.queue, digest.priority, digest.max_attempts, digest.concurrency_key) == (
            app.tasks[digest.task].queue.name, 3, 5, "d")
        assert sorted(app.sync().schedules.unchanged) == ["refresh-eu", "weekday-digest"]
        app.schedules.pop("weekday-digest")
        assert app.sync().schedules.pruned == ["weekday-digest"]
        app.schedules.clear()
        assert app.sync().schedules.pruned == ["refresh-eu"]
        assert app.sync().schedules is None  # the app has none
    finally:
        app.close()


def test_app_sync_async_pushes_schedules_too(database_url: str, queue: Queue) -> None:
    import anyio

    app = _app(database_url)

    async def main() -> None:
        try:
            report = await app.sync_async()
            assert report.schedules is not None
            assert sorted(report.schedules.created) == ["refresh-eu", "weekday-digest"]
        finally:
            await app.close_async()

    anyio.run(main)
    assert {s.namespace for s in queue.list_schedules()} == {"sched-app"}


def test_app_refuses_schedules_for_tasks_it_does_not_declare(database_url: str,
                                                             queue: Queue) -> None:
    app = _app(database_url)
    other = App("other")

    @other.task
    def elsewhere() -> None: ...

    with pytest.raises(UnknownTaskError):
        app.schedule("no.such.task", every="1m")
    with pytest.raises(UnknownTaskError):
        app.schedule(elsewhere, every="1m")
    # A definition whose task went missing: sync refuses before anything is written.
    app.schedules["ghost"] = ScheduleDefinition("ghost", "no.such.task", every="1m")
    try:
        with pytest.raises(UnknownTaskError):
            app.sync()
    finally:
        app.close()
    assert queue.list_schedules() == [] and queue.list_concurrency_policies() == []


@pytest.mark.parametrize("fields", [
    {"cron": "* * 32 * *"}, {"every": "0s"}, {"every": "1s", "tz": "Nowhere/City"},
    {"every": "1s", "catch_up": "sometimes"}, {"every": "1s", "args": ("a", "b", "c")},
    {"every": "1s", "args": ("eu",), "concurrency_key": lambda region: region["tenant"]},
    {"every": "1s", "args": "eu"},
])
def test_bad_declarations_raise_and_register_nothing(fields: dict[str, Any]) -> None:
    app = App("bad")
    with pytest.raises(InvalidScheduleError):
        app.periodic(name="t", **fields)(lambda region: None)
    assert app.tasks == {} and app.schedules == {}


# ---- firing ----------------------------------------------------------------------------------


def test_a_fired_job_runs_at_its_occurrence_with_its_arguments(conn: Any, queue: Queue) -> None:
    queue.sync_schedules("a", [every("s", args=["eu"], kwargs={"n": 1}, queue="refresh")])
    rewind(conn, "s", 25)
    firing = Scheduler("a").fire(conn)
    jobs = jobs_of(conn, "s")
    assert len(jobs) == len(firing.fired) >= 2
    for scheduled_for, run_at, status, payload, job_queue in jobs:
        assert scheduled_for == run_at and status == "ready" and job_queue == "refresh"
        assert payload == {"args": ["eu"], "kwargs": {"n": 1}}
        assert scheduled_for.timestamp() % 10 == 0 and scheduled_for <= firing.now
    stored = queue.list_schedules()[0]
    assert stored.last_run_at == jobs[-1][0]
    assert stored.next_run_at > firing.now >= stored.next_run_at - timedelta(seconds=10)
    # Nothing more is due: a second pass fires no occurrence already fired. Only one that fell
    # due since (the clock crossed a 10 s boundary between the passes on a slow machine) may.
    again = Scheduler("a").fire(conn)
    assert all(stored.next_run_at <= occurrence <= again.now
               for _, occurrence, _ in again.fired), again.fired


@pytest.mark.parametrize("policy", ["latest", "all", "skip"])
def test_catch_up_after_every_supervisor_was_down(conn: Any, queue: Queue, policy: str) -> None:
    queue.sync_schedules("a", [every("s", catch_up=policy)])
    rewind(conn, "s", 1800)  # half an hour: 180 occurrences, most over 60 s overdue
    firing = Scheduler("a").fire(conn)
    fired = [row[0] for row in jobs_of(conn, "s")]
    cutoff = firing.now - MISSED_AFTER
    missed = [o for o in fired if o < cutoff]
    on_time = [o for o in fired if o >= cutoff]
    # Every occurrence at most 60 s overdue fires, whatever the policy: 6 or 7 of them.
    assert on_time and on_time[-1] > firing.now - timedelta(seconds=10)
    assert all(b - a == timedelta(seconds=10) for a, b in itertools.pairwise(on_time))
    assert on_time[0] - timedelta(seconds=10) < cutoff
    expected = {"latest": 1, "all": CATCH_UP_ALL_LIMIT, "skip": 0}[policy]
    assert len(missed) == expected
    if missed:  # the most recent missed ones, contiguous with the on-time ones
        assert on_time[0] - missed[-1] == timedelta(seconds=10)
        assert all(b - a == timedelta(seconds=10) for a, b in itertools.pairwise(missed))
    assert len(set(fired)) == len(fired)


def test_a_schedule_removed_by_sync_stops_at_once(conn: Any, queue: Queue) -> None:
    queue.sync_schedules("a", [every("gone"), every("kept")])
    rewind(conn, "gone", 30)
    rewind(conn, "kept", 30)
    queue.sync_schedules("a", [every("kept")])  # due, and removed before any pass ran
    Scheduler("a").fire(conn)
    assert jobs_of(conn, "gone") == [] and jobs_of(conn, "kept")


def test_a_schedules_queue_is_listed_before_and_after_it_has_live_jobs(conn: Any,
                                                                       queue: Queue) -> None:
    queue.sync_schedules("a", [every("s", queue="reports")])
    assert [q.queue for q in queue.list_queues()] == ["reports"]  # nothing fired yet
    rewind(conn, "s", 20)
    Scheduler("a").fire(conn)
    assert [(q.queue, q.depth.get("ready")) for q in queue.list_queues()] == [
        ("reports", len(jobs_of(conn, "s")))]  # the occurrences of the last 20 s


def test_a_pass_fires_only_its_namespace(conn: Any, queue: Queue) -> None:
    queue.sync_schedules("a", [every("of-a")])
    queue.sync_schedules("b", [every("of-b")])
    rewind(conn, "of-a", 20)
    rewind(conn, "of-b", 20)
    Scheduler("a").fire(conn)
    assert jobs_of(conn, "of-a") and jobs_of(conn, "of-b") == []


def test_the_unique_key_not_the_read_decides_one_job_per_occurrence(conn: Any,
                                                                     queue: Queue) -> None:
    """Two passes that both believe an occurrence is due (a stale read): one job."""
    queue.sync_schedules("a", [every("s")])
    schedule_id, next_run_at = conn.execute(
        "SELECT id, next_run_at FROM workhorse.schedules").fetchone()
    occurrences = [next_run_at - timedelta(seconds=10 * k) for k in range(3)]
    statement = released_statement("fire_schedules")
    first = conn.execute(statement, ([schedule_id] * 3, occurrences, [schedule_id],
                                     [next_run_at])).fetchall()
    again = conn.execute(statement, ([schedule_id] * 3, occurrences, [schedule_id],
                                     [next_run_at])).fetchall()
    assert len(first) == 3 and again == []
    assert count(conn, "SELECT count(*) FROM workhorse.jobs") == 3


def test_concurrent_passes_make_one_job_per_occurrence(database_url: str, conn: Any,
                                                        queue: Queue) -> None:
    queue.sync_schedules("a", [every(f"s{i}", catch_up="all") for i in range(20)])
    for i in range(20):
        rewind(conn, f"s{i}", 900)
    errors: list[BaseException] = []

    def fire() -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as own:
                for _ in range(5):
                    Scheduler("a").fire(own)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=fire) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    rows = conn.execute(
        "SELECT meta->>'schedule', scheduled_for, count(*) FROM workhorse.jobs "
        "GROUP BY 1, 2").fetchall()
    assert rows and all(n == 1 for _, _, n in rows)
    per_schedule = {name for name, _, _ in rows}
    assert len(per_schedule) == 20


def test_the_firing_pass_reads_the_due_index(conn: Any, queue: Queue) -> None:
    for namespace in ("a", "b"):
        queue.sync_schedules(namespace, [every(f"{namespace}{i}", "1h") for i in range(2000)])
    conn.execute("ANALYZE workhorse.schedules")
    plan = "\n".join(row[0] for row in conn.execute(
        psycopg.sql.SQL("EXPLAIN ") + _sql.statement("schedules_due"),
        {"namespace": "a", "limit": 500}).fetchall())
    assert "schedules_due_idx" in plan, plan
    assert "Seq Scan" not in plan, plan


# ---- the CLI ------------------------------------------------------------------------------------


def test_workhorse_schedules_lists_next_and_last_run(database_url: str, conn: Any,
                                                     queue: Queue) -> None:
    import json

    from click.testing import CliRunner

    from workhorse.cli import main

    queue.sync_schedules("a", [
        every("s", args=["eu"]),
        ScheduleDefinition("n", "tasks.n", cron="0 3 * * *", tz="Europe/Oslo"),
    ])
    rewind(conn, "s", 15)
    Scheduler("a").fire(conn)
    runner = CliRunner()
    result = runner.invoke(main, ["--database-url", database_url, "schedules", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    listed = {s["name"]: s for s in json.loads(result.stdout)}
    assert listed["s"]["every"] == "10s" and listed["s"]["args"] == ["eu"]
    assert listed["s"]["last_run_at"] is not None and listed["n"]["last_run_at"] is None
    assert listed["n"]["next_run_at"].endswith("+00:00")
    table = subprocess.run(  # its own process, so that the table is as wide as COLUMNS says
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "schedules"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    assert "every 10s" in table.stdout and "0 3 * * * (Europe/Oslo)" in table.stdout


def test_the_worker_banner_warns_when_declared_schedules_are_not_stored(database_url: str,
                                                                        queue: Queue) -> None:
    from workhorse.worker.scheduler import schedules_banner

    app = _app(database_url)
    try:
        before = schedules_banner(app, queue.list_schedules(app.name))
        assert any("refresh-eu: declared, not stored" in line for line in before)
        app.sync()
        assert len(schedules_banner(app, queue.list_schedules(app.name))) == 1  # no warning
        app.schedules.pop("refresh-eu")
        after = schedules_banner(app, queue.list_schedules(app.name))
        assert any("refresh-eu: stored, no longer declared" in line for line in after)
    finally:
        app.close()
