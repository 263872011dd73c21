"""History (issue #43, docs/design.md "History") on a real PostgreSQL: jobs that ended
`succeeded` or `expired` move, `after` seconds after they finished, from `jobs` to `job_history`
(one partition per UTC day, `job_history_pYYYYMMDD`, made on demand), and every read by id or by
list still finds them with the same fields; failed, held and canceled jobs, workflow members,
jobs with dependents and jobs with an idempotency, unique or job key stay where `jobs` enforces
or reads them. Retention prunes a day of history as a partition drop once its latest expiry
passed (a day holding a job kept for ever loses only its expired rows, one by one), with no dead
row on `jobs`; `prune_jobs(older_than=)` drops whole days that ended before the cutoff (only the
named statuses' rows otherwise) and keeps the day the cutoff falls in. `export_history` and
`workhorse history export` return exactly the jobs that finished in [since, until), live or
moved, in (finished_at, id) order, over several pages, also while another process moves jobs
between the pages. The mover and the pruner share one try-lock; `job_history` keeps the columns
of `jobs` in order (the move is an `INSERT ... SELECT *`). Bad input raises InvalidOptionsError
before any SQL.

Each checker is shown to fail on a broken variant of the SQL (a copy put in place by CREATE OR
REPLACE in a transaction that is then rolled back), or of the export's paging:
`test_the_reads_checker_fails_on_a_move_that_leaves_the_tag_rows_behind`,
`test_the_kept_checker_fails_on_a_mover_that_ignores_idempotency_keys` (the job moves, and a
repeat enqueue then makes a second job), `test_the_day_checker_fails_on_days_of_the_sessions_
time_zone`, `test_the_retention_checker_fails_on_a_prune_by_the_earliest_expiry`,
`test_the_dead_row_checker_sees_a_delete_on_jobs`,
`test_the_older_than_checker_fails_on_a_prune_by_the_days_start` (the day the cutoff falls in
dropped), `test_the_export_checker_fails_on_exports_paged_without_the_full_key` (paged by
finished_at alone, and by id alone), `test_the_concurrent_export_checker_fails_on_an_export_of_
two_walks` (one table's pages, then the other's, while the mover runs: duplicates one way,
misses the other), `test_the_lock_checker_fails_on_a_mover_without_the_lock` and
`test_the_parity_checker_fails_when_jobs_gains_a_column` (and the move then fails).

`test_an_age_too_large_for_postgresql_raises_invalid_options`: an age PostgreSQL cannot hold is
refused before SQL (it once reached the server and failed there as an overflow)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from _integration import REPO
from click.testing import CliRunner

from workhorse import (
    App,
    AsyncQueue,
    Attempt,
    EnqueueOptions,
    InvalidOptionsError,
    JobHandle,
    JobStatus,
    Queue,
    Unique,
    WorkhorseError,
    _ops,
    _sql,
)
from workhorse.cli import main
from workhorse.testing import drain
from workhorse.types import Job
from workhorse.worker._registry import Registry

PAYLOAD: dict[str, Any] = {"args": [], "kwargs": {}}
# The try-lock the mover shares with the pruner (sql/housekeeping: the mover and the prune).
MOVE_LOCK = (2003, 7048)
PAGE = _ops.EXPORT_PAGE


# ---- reading what the database holds ------------------------------------------------------------


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def live_ids(conn: psycopg.Connection[Any]) -> set[int]:
    return {row[0] for row in conn.execute("SELECT id FROM workhorse.jobs").fetchall()}


def history(conn: psycopg.Connection[Any]) -> dict[int, tuple[str, str, datetime | None]]:
    """Each job of history: id -> (the partition that holds it, status, expires_at)."""
    return {row[0]: (row[1], row[2], row[3]) for row in conn.execute(
        "SELECT id, tableoid::regclass::text, status, expires_at FROM workhorse.job_history"
    ).fetchall()}


def partitions(conn: psycopg.Connection[Any], parent: str = "job_history") -> set[str]:
    """The names of `parent`'s partitions (schema-qualified as regclass prints them)."""
    return {row[0] for row in conn.execute(
        "SELECT c.oid::regclass::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass", (f"workhorse.{parent}",)).fetchall()}


def day_name(day: date, parent: str = "job_history") -> str:
    return f"workhorse.{parent}_p{day:%Y%m%d}"


def history_tags(conn: psycopg.Connection[Any]) -> set[tuple[str, int]]:
    return {(row[0], row[1]) for row in conn.execute(
        "SELECT tag, job_id FROM workhorse.job_history_tags").fetchall()}


def live_tags(conn: psycopg.Connection[Any]) -> set[tuple[str, int]]:
    return {(row[0], row[1]) for row in conn.execute(
        "SELECT tag, job_id FROM workhorse.job_tags").fetchall()}


def finish(conn: psycopg.Connection[Any], ids: Iterable[int], *, status: str = "succeeded",
           at: datetime | None = None, ago: float = 0.0,
           expires: datetime | str | None = "default") -> None:
    """End jobs as an outcome would: `status`, finished at `at` (or `ago` seconds ago), with
    `expires` as their expiry ("default": a day after they finished, the default retention of
    a success; None: kept for ever)."""
    conn.execute(
        "UPDATE workhorse.jobs SET status = %(status)s, attempts = 1,"
        " started_at = f.at - interval '1 second', finished_at = f.at,"
        " expires_at = CASE WHEN %(default)s THEN f.at + interval '1 day' ELSE %(expires)s END"
        " FROM (SELECT COALESCE(%(at)s, now() - make_interval(secs => %(ago)s)) AS at) f"
        " WHERE id = ANY(%(ids)s)",
        {"status": status, "at": at, "ago": ago, "ids": list(ids),
         "default": expires == "default", "expires": None if expires == "default" else expires})


def enqueue(queue: Queue, n: int, **options: Any) -> list[int]:
    return queue.enqueue_many([("h.t", PAYLOAD, EnqueueOptions(queue="hq", **options))] * n)


# ---- 1. a moved job is found by every read ------------------------------------------------------


@dataclasses.dataclass
class Ran:
    """Jobs a real drain ran, and what every read returned for them before any moved."""

    app: App
    handles: dict[int, JobHandle]
    retried: int
    expired: int
    before: dict[int, Job | None]
    attempts: dict[int, list[Attempt]]
    lists: dict[str, list[Job]]


@pytest.fixture
def ran(database_url: str, conn: Any, queue: Queue) -> Iterator[Ran]:
    """Through a real drain (the claim and the worker's executor): a job that succeeded after a
    retry, one that succeeded at once, one that expired before it started (the claim ended
    it), and a job of another queue that stays ready. The retried one is made to have finished
    two hours ago."""
    app = App("hist", database_url=database_url)
    calls: list[int] = []

    @app.task(name="hist.add", queue="hq", tags=["billing"], budget="gpu", retry_backoff=0)
    def add(a: int, b: int) -> int:
        calls.append(a)
        if len(calls) == 1:
            raise ConnectionError("flaky once")
        return a + b

    try:
        retried = add.apply_async((2, 3), tags=["order-1"])
        plain = add.delay(4, 5)
        late = add.apply_async((6, 7), expires=0.05)
        queue.enqueue("h.other", PAYLOAD, EnqueueOptions(queue="elsewhere"))
        time.sleep(0.1)
        report = drain(app, ["hq"], with_scheduled=True)
        assert (report.succeeded, report.retried) == (2, 1) and calls == [2, 2, 4]
        conn.execute("UPDATE workhorse.jobs SET finished_at = finished_at - interval '2 hours',"
                     " started_at = started_at - interval '2 hours' WHERE id = %s", (retried.id,))
        handles = {h.id: h for h in (retried, plain, late)}
        ran = Ran(app, handles, retried.id, late.id,
                  before={i: h.job() for i, h in handles.items()},
                  attempts={i: h.attempts() for i, h in handles.items()},
                  lists=_every_list(queue))
        assert ran.before[late.id].status is JobStatus.EXPIRED  # type: ignore[union-attr]
        assert [(a.attempt, a.outcome) for a in ran.attempts[retried.id]] == [
            (1, "retried"), (2, "succeeded")]
        assert {j.id for j in ran.lists["tag=billing"]} == set(handles)
        yield ran
    finally:
        app.close()


def _every_list(queue: Queue) -> dict[str, list[Job]]:
    """Queue.list_jobs with each filter a moved job matches."""
    return {
        "all": queue.list_jobs(),
        "succeeded": queue.list_jobs(status="succeeded"),
        "expired": queue.list_jobs(status="expired"),
        "queue+task": queue.list_jobs(queue="hq", task="hist.add"),
        "tag=billing": queue.list_jobs(tag="billing"),
        "tag=order-1": queue.list_jobs(tag="order-1"),
        "tag+status+queue": queue.list_jobs(tag="billing", status="succeeded", queue="hq"),
        "limit": queue.list_jobs(limit=2),
    }


def assert_found_as_before(queue: Queue, ran: Ran) -> None:
    """Every read by id (the handle's job, status, attempts and result; Queue.get_job) and by
    list (every filter of `_every_list`) returns what it did before the jobs moved."""
    for i, handle in ran.handles.items():
        assert handle.job() == ran.before[i], f"job {i} reads differently"
        assert queue.get_job(i) == ran.before[i], f"job {i} reads differently"
        assert handle.status() is ran.before[i].status  # type: ignore[union-attr]
        assert handle.attempts() == ran.attempts[i], f"job {i}'s attempts read differently"
    assert ran.handles[ran.retried].get(timeout=5) == 5
    lists = _every_list(queue)
    for name, listed in ran.lists.items():
        assert lists[name] == listed, f"list_jobs {name} reads differently"
    assert queue.list_jobs(status="failed") == []
    assert queue.list_jobs(tag="billing", status="failed") == []


def test_a_job_a_worker_ran_moves_and_every_read_still_finds_it(
        database_url: str, conn: Any, queue: Queue, ran: Ran) -> None:
    """The jobs move once `after` seconds passed since they finished (the default hour first
    takes only the one that finished two hours ago), with their tag rows, and then every read
    finds them as before (`assert_found_as_before`), the budget and tags included; so do the
    CLI's `jobs show` and the dashboard's job page and search by id."""
    assert queue.move_to_history() == 1
    assert set(history(conn)) == {ran.retried}
    assert queue.move_to_history(after=0) == 2
    assert set(history(conn)) == set(ran.handles)
    assert {j.task for j in queue.list_jobs() if j.id in live_ids(conn)} == {"h.other"}
    # The tag rows moved with the jobs: history's lookup has them, the live one none.
    assert history_tags(conn) == {("billing", i) for i in ran.handles} | {
        ("order-1", ran.retried)}
    assert live_tags(conn) == set()

    assert_found_as_before(queue, ran)
    retried = ran.before[ran.retried]
    assert retried is not None and retried.budget == "gpu"
    assert retried.tags == ["billing", "order-1"] and retried.result == 5
    assert queue.get_job(ran.expired).status is JobStatus.EXPIRED  # type: ignore[union-attr]
    # The owners the CLI's retry and cancel report read every job, live or moved.
    assert _ops.execute(conn, _ops.job_owners(list(ran.handles))) == [("hq", None, 3)]

    shown = CliRunner().invoke(main, ["--database-url", database_url, "jobs", "show",
                                      str(ran.retried)])
    assert shown.exit_code == 0, shown.output
    assert "hist.add" in shown.output and "succeeded" in shown.output
    assert "ConnectionError" in shown.output  # its first attempt's error, from history
    _dashboard_finds(database_url, ran.retried)


def test_the_reads_checker_fails_on_a_move_that_leaves_the_tag_rows_behind(
        conn: Any, queue: Queue, ran: Ran) -> None:
    """A copy of the mover that deletes the moved jobs' tag rows but writes none to history's
    lookup loses them from `list_jobs(tag=)`; replaced in a rolled-back transaction, it is
    caught by `assert_found_as_before`."""
    broken = _broken("move_to_history", {
        "        INSERT INTO workhorse.job_history_tags (tag, job_id, finished_at)\n"
        "        SELECT d.tag, d.id, d.finished_at FROM tagged d\n": "        SELECT 1\n"})
    with conn.transaction():
        conn.execute(broken)
        assert queue.move_to_history(after=0) == 3
        with pytest.raises(AssertionError, match="list_jobs tag"):
            assert_found_as_before(queue, ran)
        raise psycopg.Rollback()
    assert queue.move_to_history(after=0) == 3
    assert_found_as_before(queue, ran)


def _broken(base: str, changes: dict[str, str], times: int = 1) -> str:
    """The newest live SQL function `base`'s file with `changes` (each found `times` times), as
    a CREATE OR REPLACE of that function: run in a transaction that is rolled back, it stands
    in for the real one."""
    name = _sql.function_name(base)
    text = _sql.function_files()[name]
    assert text.count(f"CREATE FUNCTION workhorse.{name}(") == 1
    text = text.replace(f"CREATE FUNCTION workhorse.{name}(",
                        f"CREATE OR REPLACE FUNCTION workhorse.{name}(")
    for old, new in changes.items():
        assert text.count(old) == times, old
        text = text.replace(old, new)
    return text


def _dashboard_finds(database_url: str, job_id: int) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("jinja2")
    from starlette.testclient import TestClient

    from workhorse.dashboard import create_app

    with TestClient(create_app(database_url)) as client:
        for path in (f"/jobs/{job_id}", f"/jobs?id={job_id}"):
            page = client.get(path)
            assert page.status_code == 200, path
            assert "hist.add" in page.text and "order-1" in page.text, path


def test_a_supervisor_tick_moves_then_prunes(conn: Any, queue: Queue) -> None:
    """What a supervisor does each tick (Registry._prune): the jobs that finished more than an
    hour ago move, the last hour's stay, and a day of history whose expiry passed is dropped."""
    old, recent, expired_day = (enqueue(queue, 1)[0] for _ in range(3))
    finish(conn, [old], ago=7200)
    finish(conn, [recent], ago=600)
    day = (db_now(conn) - timedelta(days=5)).date()
    finish(conn, [expired_day], at=datetime(day.year, day.month, day.day, 12, tzinfo=UTC),
           expires=db_now(conn) - timedelta(days=1))
    assert queue.move_to_history(limit=1) == 1  # the oldest first: the expired day's job
    assert set(history(conn)) == {expired_day}

    Registry(app="hist", host="h", pid=1, slots=1, queues=["hq"], stats=dict).tick(conn)
    assert set(history(conn)) == {old} and live_ids(conn) == {recent}
    assert day_name(day) not in partitions(conn)


# ---- 2. what is not moved ----------------------------------------------------------------------


UNIQUE = EnqueueOptions(queue="hq", unique=Unique(states=("ready", "active", "succeeded")))
REPEATS = [("h.idem", PAYLOAD, EnqueueOptions(queue="hq", idempotency_key="k-1")),
           ("h.unique", {"args": [7], "kwargs": {}}, UNIQUE)]


@pytest.fixture
def keepers(conn: Any, queue: Queue) -> dict[str, int]:
    """A month-old job of each kind `jobs` must keep, and a plain succeeded and a plain expired
    one of the same age."""
    failed, held, canceled, done, expired = enqueue(queue, 5)
    ids = {"failed": failed, "held": held, "canceled": canceled, "done": done,
           "expired": expired}
    ids["parent"] = queue.enqueue("h.parent", PAYLOAD, EnqueueOptions(queue="hq"))
    ids["member"] = queue.enqueue("h.member", PAYLOAD,
                                  EnqueueOptions(queue="hq", depends_on=(ids["parent"],)))
    ids["idempotent"] = queue.enqueue(*REPEATS[0])
    ids["unique"] = queue.enqueue(*REPEATS[1])
    ids["job_key"] = queue.enqueue("h.jobkey", PAYLOAD,
                                   EnqueueOptions(queue="hq", job_key="jk-1"))
    for status in ("failed", "held", "canceled", "expired"):
        finish(conn, [ids[status]], status=status, ago=30 * 86400)
    finish(conn, [ids[k] for k in ("done", "parent", "member", "idempotent", "unique",
                                   "job_key")], ago=30 * 86400)
    stored = conn.execute(
        "SELECT workflow_id IS NOT NULL, has_dependents, idempotency_key IS NOT NULL,"
        " unique_key IS NOT NULL, job_key IS NOT NULL FROM workhorse.jobs WHERE id = ANY(%s)"
        " ORDER BY id", ([ids[k] for k in ("parent", "member", "idempotent", "unique",
                                           "job_key")],)).fetchall()
    # What makes each of them stay is really set on its row (the job another depends on is no
    # workflow member: it has dependents).
    assert [tuple(row) for row in stored] == [
        (False, True, False, False, False), (True, False, False, False, False),
        (False, False, True, False, False), (False, False, False, True, False),
        (False, False, False, False, True)]
    return ids


KEPT = ("failed", "held", "canceled", "parent", "member", "idempotent", "unique", "job_key")


def assert_not_moved(conn: psycopg.Connection[Any], ids: dict[str, int]) -> None:
    """Every job `jobs` must keep is still there, none of them in history."""
    moved = {k for k in KEPT if ids[k] in history(conn)}
    assert not moved, f"moved, though jobs must keep them: {sorted(moved)}"
    assert {ids[k] for k in KEPT} <= live_ids(conn)


def assert_repeats_find_their_jobs(queue: Queue, ids: dict[str, int]) -> None:
    """A repeat enqueue with the idempotency key, or with the unique arguments, finds its job
    (inserts no new one)."""
    again = queue.enqueue_outcomes(REPEATS)
    assert again == [(ids["idempotent"], True), (ids["unique"], True)], (
        f"a repeat enqueue made a new job: {again}")


def assert_kept(conn: psycopg.Connection[Any], queue: Queue, ids: dict[str, int]) -> None:
    assert_not_moved(conn, ids)
    assert_repeats_find_their_jobs(queue, ids)


def test_jobs_that_jobs_must_keep_are_not_moved(conn: Any, queue: Queue,
                                               keepers: dict[str, int]) -> None:
    """Failed, held and canceled jobs, a workflow's member, a job with dependents, and jobs
    with an idempotency, unique or job key stay in `jobs`, however old, and a repeat enqueue
    still finds the keyed ones (`assert_kept`); the plain succeeded and expired jobs of the
    same age move."""
    ids = keepers
    assert queue.move_to_history(after=0) == 2
    assert set(history(conn)) == {ids["done"], ids["expired"]}
    assert live_ids(conn) == {ids[k] for k in KEPT}
    assert queue.move_to_history(after=0) == 0  # the kept ones are never counted as moved
    assert_kept(conn, queue, ids)

    # A finished job frees its job key (docs/job-keys.md): the repeat is a new job, and the
    # old one, which holds the key no more, may move now.
    [(taken_over, duplicate)] = queue.enqueue_outcomes([
        ("h.jobkey", PAYLOAD, EnqueueOptions(queue="hq", job_key="jk-1"))])
    assert taken_over != ids["job_key"] and not duplicate
    assert queue.get_job(ids["job_key"]).job_key is None  # type: ignore[union-attr]
    assert queue.move_to_history(after=0) == 1
    assert set(history(conn)) == {ids["done"], ids["expired"], ids["job_key"]}


def test_the_kept_checker_fails_on_a_mover_that_ignores_idempotency_keys(
        conn: Any, queue: Queue, keepers: dict[str, int]) -> None:
    """A copy of the mover without its idempotency-key condition moves that job; then a repeat
    enqueue with the key, which `jobs`' unique index no longer finds, makes a second job. Each
    half of `assert_kept` catches its part (in a transaction rolled back after each)."""
    broken = _broken("move_to_history", {" AND j.idempotency_key IS NULL": ""}, times=2)
    for check, complaint in ((lambda: assert_not_moved(conn, keepers), "moved, though"),
                             (lambda: assert_repeats_find_their_jobs(queue, keepers),
                              "made a new job")):
        with conn.transaction():
            conn.execute(broken)
            assert queue.move_to_history(after=0) == 3
            with pytest.raises(AssertionError, match=complaint):
                check()
            raise psycopg.Rollback()
    assert queue.move_to_history(after=0) == 2
    assert_kept(conn, queue, keepers)


# ---- 3. one partition per UTC day --------------------------------------------------------------


DAYS = [date(2026, 1, 1), date(2026, 1, 2), date(2026, 1, 5)]


@pytest.fixture
def three_days(conn: Any, queue: Queue) -> dict[int, str]:
    """Four jobs that finished on three UTC days (the last microsecond of Jan 1, the first of
    Jan 2, 02:00 on Jan 2, which is still Jan 1 in New York, and Jan 5), each with the name of
    the partition its UTC day must have."""
    late, midnight, evening, later = enqueue(queue, 4, tags=["d"])
    finish(conn, [late], at=datetime(2026, 1, 1, 23, 59, 59, 999999, tzinfo=UTC))
    finish(conn, [midnight], at=datetime(2026, 1, 2, tzinfo=UTC))
    finish(conn, [evening], at=datetime(2026, 1, 2, 2, tzinfo=UTC))
    finish(conn, [later], at=datetime(2026, 1, 5, 12, tzinfo=UTC))
    assert partitions(conn) == set()
    return {late: day_name(DAYS[0]), midnight: day_name(DAYS[1]),
            evening: day_name(DAYS[1]), later: day_name(DAYS[2])}


def assert_in_their_days(conn: psycopg.Connection[Any], expected: dict[int, str]) -> None:
    """Each job is in the partition named by its UTC day, and there is exactly one partition
    (and one of the tags' lookup) per such day."""
    where = {i: name for i, (name, _, _) in history(conn).items()}
    assert where == expected, f"jobs in the partitions {where}, their UTC days say {expected}"
    assert partitions(conn) == set(expected.values())
    assert partitions(conn, "job_history_tags") == {
        name.replace("job_history_p", "job_history_tags_p") for name in expected.values()}


def test_jobs_land_in_the_partition_of_their_utc_day(
        database_url: str, conn: Any, three_days: dict[int, str]) -> None:
    """Jobs that finished on three UTC days land in three partitions named by the day, made on
    demand with their tags' partitions; the day is the UTC one, whatever the session's time
    zone (the mover runs in New York's)."""
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute("SET TimeZone = 'America/New_York'")
        assert Queue(other).move_to_history(after=0) == 4
    assert_in_their_days(conn, three_days)


def test_the_day_checker_fails_on_days_of_the_sessions_time_zone(
        database_url: str, conn: Any, three_days: dict[int, str]) -> None:
    """Copies of the mover and the partition maker that take the day (its name and bounds) in
    the session's time zone put the New York evening's jobs in Jan 1's partition; caught by
    `assert_in_their_days`."""
    mover = _broken("move_to_history", {"SELECT DISTINCT (j.finished_at AT TIME ZONE 'UTC')::date":
                                        "SELECT DISTINCT j.finished_at::date"})
    maker = _broken("_history_partition", {"p_day::timestamp AT TIME ZONE 'UTC',":
                                           "p_day::timestamptz,",
                                           "(p_day + 1)::timestamp AT TIME ZONE 'UTC'":
                                           "(p_day + 1)::timestamptz"})
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute("SET TimeZone = 'America/New_York'")
        with other.transaction():
            other.execute(mover)
            other.execute(maker)
            assert Queue(other).move_to_history(after=0) == 4
            with pytest.raises(AssertionError, match="their UTC days say"):
                assert_in_their_days(other, three_days)
            raise psycopg.Rollback()
        assert Queue(other).move_to_history(after=0) == 4
    assert_in_their_days(conn, three_days)


# ---- 4. retention prunes a day at a time --------------------------------------------------------


def retention_days(conn: psycopg.Connection[Any], queue: Queue) -> dict[str, Any]:
    """History on four past days: `dropped` (every expiry passed), `waiting` (one job not yet
    expired), `forever` (a job kept for ever beside two expired ones), `empty` (no job), and a
    live job finished an hour ago (not expired)."""
    now = db_now(conn)
    past, future = now - timedelta(hours=3), now + timedelta(days=2)
    today = now.astimezone(UTC).date()
    days = {name: today - timedelta(days=n) for name, n in
            (("dropped", 10), ("waiting", 9), ("forever", 8), ("empty", 7))}
    ids = {name: enqueue(queue, 3, tags=[name]) for name in ("dropped", "waiting", "forever")}
    for name, expiries in (("dropped", [past, past - timedelta(days=1), past]),
                           ("waiting", [past, future, past]),
                           ("forever", [past, None, past])):
        day = days[name]
        for job_id, expires in zip(ids[name], expiries, strict=True):
            finish(conn, [job_id], at=datetime(day.year, day.month, day.day, 6, tzinfo=UTC)
                   + timedelta(hours=job_id % 7), expires=expires)
    assert queue.move_to_history(after=0) == 9
    conn.execute(f"SELECT workhorse.{_sql.function_name('_history_partition')}(%s)",
                 (days["empty"],))
    ids["live"] = enqueue(queue, 1)
    finish(conn, ids["live"], ago=3600)  # expires tomorrow
    return {"days": days, "ids": ids}


def expected_after_retention(before: dict[int, tuple[str, str, datetime | None]],
                             days: set[str], today: date, now: datetime
                             ) -> tuple[set[int], set[str]]:
    """What the retention prune must leave of history: the ids and the partitions. A day goes
    when its latest expiry passed (an empty day, when it is before today); a day with a job kept
    for ever (expiry NULL) stays and loses only its expired jobs; any other day stays whole."""
    kept_ids: set[int] = set()
    kept_days: set[str] = set()
    for name in days:
        rows = {i: expires for i, (where, _, expires) in before.items() if where == name}
        day = datetime.strptime(name.rsplit("_p", 1)[1], "%Y%m%d").date()
        if not rows:
            if day >= today:
                kept_days.add(name)
        elif None in rows.values():
            kept_days.add(name)
            kept_ids |= {i for i, e in rows.items() if e is None or e > now}
        elif max(e for e in rows.values() if e is not None) > now:
            kept_days.add(name)
            kept_ids |= set(rows)
    return kept_ids, kept_days


def assert_retention(conn: psycopg.Connection[Any],
                     before: dict[int, tuple[str, str, datetime | None]],
                     days_before: set[str]) -> None:
    """History after a retention prune is what `expected_after_retention` says, tag rows
    included (a tag row only for a job still there)."""
    now = db_now(conn)
    ids, days = expected_after_retention(before, days_before, now.astimezone(UTC).date(), now)
    after = history(conn)
    assert set(after) == ids, f"history kept {sorted(after)}, retention keeps {sorted(ids)}"
    assert partitions(conn) == days
    assert partitions(conn, "job_history_tags") == {
        d.replace("job_history_p", "job_history_tags_p") for d in days}
    assert {i for _, i in history_tags(conn)} == ids


def test_retention_drops_a_day_once_its_latest_expiry_passed(conn: Any, queue: Queue) -> None:
    """prune_jobs() drops the day whose every expiry passed and the empty past day (their
    partitions and tags' partitions gone, their jobs counted), keeps the day with a job not yet
    expired whole, and on the day with a job kept for ever deletes only the expired rows; the
    live job (not expired) stays."""
    setup = retention_days(conn, queue)
    days, ids = setup["days"], setup["ids"]
    before, days_before = history(conn), partitions(conn)
    assert days_before == {day_name(d) for d in days.values()}

    assert queue.prune_jobs() == 3 + 2
    assert_retention(conn, before, days_before)
    assert set(history(conn)) == {*ids["waiting"], ids["forever"][1]}
    assert day_name(days["dropped"]) not in partitions(conn)
    assert day_name(days["empty"]) not in partitions(conn)
    assert live_ids(conn) == set(ids["live"])
    assert queue.prune_jobs() == 0  # nothing more is due


def test_the_retention_checker_fails_on_a_prune_by_the_earliest_expiry(
        conn: Any, queue: Queue) -> None:
    """A copy of the day pruner that reads a day's EARLIEST expiry (ascending, NULLs last) drops
    the day with a job not yet expired and the day with a job kept for ever; replaced in a
    transaction that is rolled back, it is caught by `assert_retention`."""
    retention_days(conn, queue)
    before, days_before = history(conn), partitions(conn)
    broken = _broken("_prune_history", {"' ORDER BY expires_at DESC NULLS FIRST LIMIT 1'":
                                    "' ORDER BY expires_at ASC NULLS LAST LIMIT 1'"})
    with conn.transaction():
        conn.execute(broken)
        assert queue.prune_jobs() == 9  # every day went
        with pytest.raises(AssertionError, match="history kept"):
            assert_retention(conn, before, days_before)
        raise psycopg.Rollback()
    # The real one, after the rollback, passes on the same data.
    assert queue.prune_jobs() == 5
    assert_retention(conn, before, days_before)


def deleted_rows(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Rows deleted from each table of the schema, as this backend counts them before it
    reports them (pg_stat_xact_user_tables). Inside one transaction the backend reports
    nothing, so the difference of two reads there is exactly what happened in between (the
    cumulative view, pg_stat_user_tables, lags by up to a second and by other backends)."""
    return {row[0]: int(row[1]) for row in conn.execute(
        "SELECT 'workhorse.' || relname, n_tup_del FROM pg_stat_xact_user_tables"
        " WHERE schemaname = 'workhorse'").fetchall()}


def deleted_since(conn: psycopg.Connection[Any], before: dict[str, int]) -> dict[str, int]:
    """The tables with rows deleted since `before` was read, and how many."""
    return {name: n - before.get(name, 0) for name, n in deleted_rows(conn).items()
            if n > before.get(name, 0)}


def test_a_history_prune_leaves_no_dead_row_on_jobs(conn: Any, queue: Queue) -> None:
    """The retention prune of history, whole days and row by row, deletes nothing from `jobs`
    (no dead tuple there for vacuum): only the day that holds a job kept for ever loses rows,
    one by one (its two expired jobs and their two tag rows); the others go as drops."""
    setup = retention_days(conn, queue)
    forever = setup["days"]["forever"]
    with conn.transaction():
        before = deleted_rows(conn)
        assert queue.prune_jobs() == 5
        assert deleted_since(conn, before) == {day_name(forever): 2,
                                               day_name(forever, "job_history_tags"): 2}


def test_the_dead_row_checker_sees_a_delete_on_jobs(conn: Any, queue: Queue) -> None:
    """The same count, when the prune does delete from `jobs` (an expired live job), says so:
    the checker measures the table, it does not read zero whatever happens."""
    setup = retention_days(conn, queue)
    forever = setup["days"]["forever"]
    stale = enqueue(queue, 1)
    finish(conn, stale, status="failed", ago=60, expires=db_now(conn) - timedelta(seconds=1))
    with conn.transaction():
        before = deleted_rows(conn)
        assert queue.prune_jobs() == 5 + 1
        assert deleted_since(conn, before) == {"workhorse.jobs": 1,
                                               day_name(forever): 2,
                                               day_name(forever, "job_history_tags"): 2}
        raise psycopg.Rollback()


# ---- 5. prune_jobs(older_than=) --------------------------------------------------------------


def older_than_days(conn: psycopg.Connection[Any], queue: Queue) -> dict[str, Any]:
    """Three past UTC days of history (succeeded and expired jobs), a cutoff at noon of the
    last one, and a failed job (live) of the middle day."""
    now = db_now(conn)
    today = now.astimezone(UTC).date()
    days = [today - timedelta(days=n) for n in (5, 4, 3)]
    cutoff = datetime(days[2].year, days[2].month, days[2].day, 12, tzinfo=UTC)
    plan = [(days[0], 1, "succeeded"), (days[0], 2, "succeeded"), (days[0], 3, "expired"),
            (days[1], 1, "succeeded"), (days[1], 23, "expired"),
            # Before the cutoff, in the day it falls in, and after it.
            (days[2], 1, "succeeded"), (days[2], 2, "expired"), (days[2], 20, "succeeded")]
    ids = enqueue(queue, len(plan), tags=["old"])
    for job_id, (day, hour, status) in zip(ids, plan, strict=True):
        finish(conn, [job_id], status=status,
               at=datetime(day.year, day.month, day.day, hour, tzinfo=UTC))
    assert queue.move_to_history(after=0) == len(plan)
    failed = enqueue(queue, 1)
    finish(conn, failed, status="failed",
           at=datetime(days[1].year, days[1].month, days[1].day, 5, tzinfo=UTC))
    return {"days": days, "ids": ids, "plan": plan, "failed": failed[0],
            "older_than": (db_now(conn) - cutoff).total_seconds(), "cutoff": cutoff}


def assert_older_than(conn: psycopg.Connection[Any],
                      before: dict[int, tuple[str, str, datetime | None]], cutoff: datetime,
                      statuses: set[str]) -> None:
    """History after `prune_jobs(older_than=)`: of each day that ended at or before the cutoff,
    the jobs of `statuses` are gone (the whole partition when they cover both statuses history
    holds); every job of a later day, the day the cutoff falls in included, stays."""
    expected_ids = set()
    expected_days = set()
    for job_id, (where, status, _) in before.items():
        day = datetime.strptime(where.rsplit("_p", 1)[1], "%Y%m%d").date()
        ended = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        if ended > cutoff or status not in statuses:
            expected_ids.add(job_id)
        if ended > cutoff or not {"succeeded", "expired"} <= statuses:
            expected_days.add(where)
    after = history(conn)
    assert set(after) == expected_ids, (
        f"history kept {sorted(after)}, the cutoff keeps {sorted(expected_ids)}")
    assert partitions(conn) == expected_days


def test_older_than_drops_whole_days_before_the_cutoff_and_keeps_its_day(
        conn: Any, queue: Queue) -> None:
    """prune_jobs(older_than=S) with the default statuses drops the two days that ended before
    now - S (and deletes the live failed job of one), and keeps the day the cutoff falls in
    whole, its jobs that finished before the cutoff included."""
    setup = older_than_days(conn, queue)
    before = history(conn)
    assert queue.prune_jobs(older_than=setup["older_than"]) == 5 + 1
    assert_older_than(conn, before, setup["cutoff"], {"succeeded", "failed", "canceled",
                                                      "expired"})
    assert set(history(conn)) == set(setup["ids"][5:])
    assert setup["failed"] not in live_ids(conn)


def test_older_than_with_one_status_deletes_only_that_status(conn: Any, queue: Queue) -> None:
    """statuses=["succeeded"]: the days before the cutoff lose their succeeded jobs (row by
    row, their partitions stay) and keep their expired ones; the live failed job stays."""
    setup = older_than_days(conn, queue)
    before = history(conn)
    assert queue.prune_jobs(older_than=setup["older_than"], statuses=["succeeded"]) == 3
    assert_older_than(conn, before, setup["cutoff"], {"succeeded"})
    plan = dict(zip(setup["ids"], setup["plan"], strict=True))
    assert {plan[i][2] for i in history(conn) if plan[i][0] < setup["days"][2]} == {"expired"}
    assert setup["failed"] in live_ids(conn)
    # The tag rows of the deleted jobs went with them.
    assert {i for _, i in history_tags(conn)} == set(history(conn))
    # And expired alone: the rest of those days.
    assert queue.prune_jobs(older_than=setup["older_than"], statuses=["expired"]) == 2
    assert set(history(conn)) == set(setup["ids"][5:])


def test_the_older_than_checker_fails_on_a_prune_by_the_days_start(
        conn: Any, queue: Queue) -> None:
    """A copy of the day pruner that compares a day's START with the cutoff drops the day the
    cutoff falls in, a job finished after the cutoff with it; `assert_older_than` catches it."""
    setup = older_than_days(conn, queue)
    before = history(conn)
    broken = _broken("_prune_history", {
        "ELSIF (v_day + 1)::timestamp AT TIME ZONE 'UTC' <= p_cutoff":
        "ELSIF v_day::timestamp AT TIME ZONE 'UTC' <= p_cutoff"})
    with conn.transaction():
        conn.execute(broken)
        assert queue.prune_jobs(older_than=setup["older_than"]) == 8 + 1
        with pytest.raises(AssertionError, match="the cutoff keeps"):
            assert_older_than(conn, before, setup["cutoff"], {"succeeded", "expired"})
        raise psycopg.Rollback()
    assert queue.prune_jobs(older_than=setup["older_than"]) == 6
    assert_older_than(conn, before, setup["cutoff"], {"succeeded", "expired"})


# ---- 6. export ----------------------------------------------------------------------------------

BASE = datetime(2026, 3, 1, tzinfo=UTC)
SINCE, UNTIL = BASE + timedelta(hours=1), BASE + timedelta(hours=50)
ROWS = 2600


def export_rows(conn: psycopg.Connection[Any]) -> list[tuple[int, str, str, datetime | None]]:
    """ROWS finished jobs over three UTC days, in groups of seven that finished at one instant
    (a page of 1,000 ends inside a tie), ids in the reverse of finish order; every tenth failed (it
    stays live), every tenth expired; queues a and b; and jobs not finished, which no export
    returns. Returns each job's (id, queue, status, finished_at)."""
    rows = conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, payload, status, attempts, started_at,"
        " finished_at, result, expires_at, tags)"
        " SELECT 'exp.t', CASE WHEN g %% 3 = 0 THEN 'b' ELSE 'a' END,"
        "  jsonb_build_object('args', jsonb_build_array(g), 'kwargs', '{}'::jsonb),"
        "  CASE g %% 10 WHEN 0 THEN 'failed' WHEN 1 THEN 'expired' ELSE 'succeeded' END, 1,"
        "  f.at - interval '1 second', f.at, to_jsonb(g), f.at + interval '100 years',"
        "  CASE WHEN g %% 7 = 0 THEN ARRAY['seven'] END"
        " FROM generate_series(1, %s) g"
        " CROSS JOIN LATERAL (SELECT %s::timestamptz"
        "   + ((%s - g) / 7) * interval '10 minutes' AS at) f"
        " RETURNING id, queue, status, finished_at", (ROWS, BASE, ROWS)).fetchall()
    # The lookup rows an enqueue would have written for those tags.
    conn.execute("INSERT INTO workhorse.job_tags (tag, job_id) SELECT 'seven', id"
                 " FROM workhorse.jobs WHERE tags IS NOT NULL")
    unfinished = enqueue(Queue(conn), 5)
    return [*((r[0], r[1], r[2], r[3]) for r in rows),
            *((i, "hq", "ready", None) for i in unfinished)]


def expected_export(rows: list[tuple[int, str, str, datetime | None]], since: datetime,
                    until: datetime, queue: str | None = None) -> list[int]:
    """The ids an export of [since, until) must give, in (finished_at, id) order."""
    return [i for at, i in sorted((at, i) for i, q, status, at in rows
                                  if at is not None and since <= at < until
                                  and (queue is None or q == queue))]


def assert_exported_once(got: list[int], expected: list[int]) -> None:
    """`got` is `expected`: every id exactly once (no duplicate, no miss, nothing else), in
    finish order."""
    seen: set[int] = set()
    duplicates = [i for i in got if i in seen or seen.add(i)]  # type: ignore[func-returns-value]
    missed = sorted(set(expected) - seen)
    extra = sorted(seen - set(expected))
    assert not duplicates, f"exported twice: {duplicates[:10]} ({len(duplicates)})"
    assert not missed, f"never exported: {missed[:10]} ({len(missed)})"
    assert not extra, f"exported but out of range: {extra[:10]} ({len(extra)})"
    assert got == expected, "exported out of (finished_at, id) order"


@pytest.fixture
def exported(conn: Any, queue: Queue) -> list[tuple[int, str, str, datetime | None]]:
    """export_rows, with the oldest 1,500 movable jobs moved: the range spans both tables."""
    rows = export_rows(conn)
    assert queue.move_to_history(1500, after=0) == 1500
    return rows


def test_an_export_gives_every_finished_job_of_the_range_once_in_finish_order(
        conn: Any, queue: Queue, exported: list[tuple[int, str, str, datetime | None]]) -> None:
    """export_history over [since, until) returns exactly the finished jobs of the range, live
    and moved, over three pages, in (finished_at, id) order: a job finished at `since` is in, one
    at `until` is out; `queue=` filters; each Job equals what get_job reads."""
    expected = expected_export(exported, SINCE, UNTIL)
    assert len(expected) > 2 * PAGE
    live, moved = live_ids(conn), set(history(conn))
    assert set(expected) & live and set(expected) & moved  # both tables in range
    jobs = list(queue.export_history(SINCE, UNTIL))
    assert_exported_once([j.id for j in jobs], expected)
    assert min(j.finished_at for j in jobs) == SINCE  # type: ignore[type-var]
    for job in (jobs[0], jobs[PAGE - 1], jobs[PAGE], jobs[-1]):
        assert job == queue.get_job(job.id)
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED, JobStatus.EXPIRED,
                                        JobStatus.FAILED}
    assert next(j for j in jobs if j.id in moved).tags in ([], ["seven"])

    assert_exported_once([j.id for j in queue.export_history(SINCE, UNTIL, queue="b")],
                         expected_export(exported, SINCE, UNTIL, "b"))
    # Bounds as text, dates and durations ago; an empty range and a queue with no jobs.
    assert [j.id for j in queue.export_history("2026-03-01T01:00:00+00:00",
                                               "2026-03-03T02:00")] == expected
    assert [j.id for j in queue.export_history(date(2026, 3, 2), date(2026, 3, 3))] == (
        expected_export(exported, datetime(2026, 3, 2, tzinfo=UTC),
                        datetime(2026, 3, 3, tzinfo=UTC)))
    assert list(queue.export_history(SINCE, SINCE)) == []
    assert list(queue.export_history(SINCE, UNTIL, queue="nobody")) == []
    assert list(queue.export_history("1d")) == []  # nothing finished in the last day


def test_the_async_export_and_move_are_the_same(
        database_url: str, exported: list[tuple[int, str, str, datetime | None]]) -> None:
    """AsyncQueue's twins: the same pages, and the same move."""
    import asyncio

    async def run() -> tuple[list[int], int]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
            aq = AsyncQueue(c)
            ids = [j.id async for j in aq.export_history(SINCE, UNTIL, queue="a")]
            return ids, await aq.move_to_history(after=0)

    ids, moved = asyncio.run(run())
    assert_exported_once(ids, expected_export(exported, SINCE, UNTIL, "a"))
    assert moved == sum(1 for _, _, s, _ in exported if s in ("succeeded", "expired")) - 1500


def test_the_cli_exports_json_lines_and_counts_on_stderr(
        database_url: str, queue: Queue,
        exported: list[tuple[int, str, str, datetime | None]]) -> None:
    """`workhorse history export` writes one JSON object a line on stdout, the Job's fields,
    exactly the jobs of the range and queue in finish order, and "N jobs" on stderr."""
    expected = expected_export(exported, SINCE, UNTIL, "a")
    result = CliRunner().invoke(main, [
        "--database-url", database_url, "history", "export", "--since", SINCE.isoformat(),
        "--until", "2026-03-03T02:00:00Z", "--queue", "a"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert_exported_once([line["id"] for line in lines], expected)
    assert result.stderr.strip() == f"{len(expected)} jobs"
    fields = {f.name for f in dataclasses.fields(Job)}
    for line in (lines[0], lines[PAGE], lines[-1]):
        assert set(line) == fields
        job = queue.get_job(line["id"])
        assert job is not None
        assert (line["queue"], line["status"], line["result"], line["payload"]) == (
            "a", job.status.value, job.result, job.payload)
        assert datetime.fromisoformat(line["finished_at"]) == job.finished_at


def test_the_export_checker_fails_on_exports_paged_without_the_full_key(
        conn: Any, exported: list[tuple[int, str, str, datetime | None]]) -> None:
    """The same statement paged by finished_at alone skips the rest of a tie at each page
    boundary, and paged by id alone returns the jobs out of finish order; both are caught."""
    expected = expected_export(exported, SINCE, UNTIL)
    text = _sql.statement("history_export").as_string(conn)
    cursor = "AND (j.finished_at, j.id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)"
    assert text.count(cursor) == 1 and text.count("ORDER BY j.finished_at, j.id") == 1
    by_time = text.replace(cursor, "AND j.finished_at > %(after_at)s::timestamptz").replace(
        "ORDER BY j.finished_at, j.id", "ORDER BY j.finished_at")
    by_id = text.replace(cursor, "AND j.id > %(after_id)s::bigint").replace(
        "ORDER BY j.finished_at, j.id", "ORDER BY j.id")
    for broken, complaint in ((by_time, "never exported"), (by_id, "out of .* order")):
        got = list(_paged(conn, broken))
        with pytest.raises(AssertionError, match=complaint):
            assert_exported_once(got, expected)
    # The shipped statement, driven the same way, passes.
    assert_exported_once(list(_paged(conn, text)), expected)


def _paged(conn: psycopg.Connection[Any], statement: str) -> Iterator[int]:
    """An export loop like Queue.export_history's, over `statement`; since's first page starts
    just before the range (after_at one microsecond earlier, for a cursor on time alone)."""
    after_at, after_id = SINCE - timedelta(microseconds=1), -1
    while True:
        page = conn.execute(statement, {"since": SINCE, "until": UNTIL, "queue": None,
                                        "after_at": after_at, "after_id": after_id,
                                        "limit": PAGE}).fetchall()
        yield from (row[0] for row in page)
        if len(page) < PAGE:
            return
        after_at, after_id = page[-1][14], page[-1][0]  # finished_at, id


# ---- 6b. an export while another process moves --------------------------------------------------

MOVER = """
import sys, time
import psycopg
from workhorse import Queue
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    queue = Queue(conn)
    print("ready", flush=True)
    sys.stdin.readline()
    moved, batches, idle, deadline = 0, 0, 0, time.monotonic() + 60
    while idle < 3 and time.monotonic() < deadline:
        n = queue.move_to_history(25, after=0)
        if n > 0:
            moved, batches, idle = moved + n, batches + 1, 0
        elif n == 0:
            idle += 1
        time.sleep(0.01)
    print(f"{moved} {batches}", flush=True)
"""


def export_while_moving(database_url: str, conn: psycopg.Connection[Any],
                        export: Callable[[], Iterator[int]]) -> tuple[list[int], list[int], int]:
    """Seed export_rows (nothing moved yet), then run `export` while a mover in another OS
    process moves jobs in batches of 25 (oldest first, every 10 ms). The mover starts once the
    first page is read; at the end of each page, the export waits until the mover has moved
    jobs of the range AHEAD of that page's last (finished_at, id) into history, so that moves
    fall between its pages on both sides of its cursor. Returns the ids exported, the ids
    expected, and how many page boundaries saw such moves."""
    rows = export_rows(conn)
    expected = expected_export(rows, SINCE, UNTIL)
    finished = {i: at for i, _, _, at in rows}
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}
    mover = subprocess.Popen([sys.executable, "-c", MOVER, database_url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert mover.stdout is not None and mover.stdin is not None
        ready = mover.stdout.readline().strip()
        assert ready == "ready", mover.communicate(timeout=10)[1]
        boundaries = 0
        got: list[int] = []
        for job_id in export():
            got.append(job_id)
            # The end of a page: the export reads the next one only when asked for its next
            # id, so a wait here falls between two of its statements.
            if len(got) % PAGE == 0:
                if len(got) == PAGE:
                    mover.stdin.write("go\n")
                    mover.stdin.flush()
                if _wait_for_moves_ahead(conn, mover, (finished[job_id], job_id)):
                    boundaries += 1
        out, err = mover.communicate(timeout=60)
        assert mover.returncode == 0, err
        assert int(out.split()[0]) > 0
        return got, expected, boundaries
    finally:
        if mover.poll() is None:
            mover.kill()
            mover.wait()


def _wait_for_moves_ahead(conn: psycopg.Connection[Any], mover: subprocess.Popen[str],
                          cursor: tuple[datetime | None, int], at_least: int = 25,
                          timeout: float = 20) -> bool:
    """Wait until `at_least` jobs of the range after `cursor` are in history; False if the
    mover ran out of jobs (or time) first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and mover.poll() is None:
        row = conn.execute(
            "SELECT count(*) FROM workhorse.job_history"
            " WHERE (finished_at, id) > (%s, %s) AND finished_at < %s",
            (*cursor, UNTIL)).fetchone()
        assert row is not None
        if row[0] >= at_least:
            return True
        time.sleep(0.005)
    return False


def test_an_export_while_another_process_moves_gives_every_job_once(
        database_url: str, conn: Any, queue: Queue) -> None:
    """While another OS process moves jobs to history in small batches, between and during the
    export's pages, export_history still yields every job of the range exactly once, in order:
    its pages are keyed by (finished_at, id), which a move does not change, and each page reads
    both tables in one snapshot."""
    got, expected, boundaries = export_while_moving(
        database_url, conn, lambda: (j.id for j in queue.export_history(SINCE, UNTIL)))
    assert boundaries == 2  # both page boundaries saw jobs move
    assert_exported_once(got, expected)
    assert live_ids(conn) and history(conn)


@pytest.mark.parametrize("tables, complaint", [
    (("jobs", "job_history"), "exported twice"),
    (("job_history", "jobs"), "never exported"),
])
def test_the_concurrent_export_checker_fails_on_an_export_of_two_walks(
        database_url: str, conn: Any, tables: tuple[str, str], complaint: str) -> None:
    """An export that walks one table and then the other, each in its own pages, is caught by
    the same checker under the same mover: live first, the jobs that moved after the live walk
    read them are read again from history; history first, the jobs that moved ahead of the
    live walk's cursor are read by neither walk."""
    text = _sql.statement("history_export").as_string(conn)
    assert text.count("FROM workhorse.all_jobs j") == 1

    def two_walks() -> Iterator[int]:
        for table in tables:
            yield from _paged(conn, text.replace("FROM workhorse.all_jobs j",
                                                 f"FROM workhorse.{table} j"))

    got, expected, boundaries = export_while_moving(database_url, conn, two_walks)
    assert boundaries >= 1
    with pytest.raises(AssertionError, match=complaint):
        assert_exported_once(got, expected)


# ---- 7. bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda q: list(q.export_history(datetime(2026, 1, 1))),  # naive
    lambda q: list(q.export_history(SINCE, datetime(2026, 3, 4))),  # naive until
    lambda q: list(q.export_history("yesterday")),
    lambda q: list(q.export_history("2026-13-45")),
    lambda q: list(q.export_history("-5s")),
    lambda q: list(q.export_history(-5)),
    lambda q: list(q.export_history(True)),
    lambda q: list(q.export_history(None)),
    lambda q: list(q.export_history([SINCE])),
    lambda q: list(q.export_history(UNTIL, SINCE)),  # until before since
    lambda q: list(q.export_history("2026-03-02", "2026-03-01")),
    lambda q: list(q.export_history(SINCE, queue=7)),
    lambda q: list(q.export_history(SINCE, queue="")),
    lambda q: list(q.export_history(SINCE, queue="x" * 256)),
    lambda q: q.move_to_history(-1),
    lambda q: q.move_to_history(limit=True),
    lambda q: q.move_to_history(1.5),
    lambda q: q.move_to_history(after=-1),
    lambda q: q.move_to_history(after=True),
    lambda q: q.move_to_history(after=float("nan")),
    lambda q: q.move_to_history(after="1h"),
    lambda q: q.move_to_history(after=None),
])
def test_bad_input_raises_before_any_sql(database_url: str, call: Any) -> None:
    """Each bad bound, queue, limit or age raises InvalidOptionsError (a WorkhorseError) before
    any SQL: on a closed connection too, which any statement would fail on with psycopg's
    own error instead."""
    closed = psycopg.connect(database_url, autocommit=True)
    closed.close()
    with pytest.raises(InvalidOptionsError) as raised:
        call(Queue(closed))
    assert isinstance(raised.value, WorkhorseError)


@pytest.mark.parametrize("call", [
    lambda q: list(q.export_history(SINCE, UNTIL, queue="a")),
    lambda q: q.move_to_history(after=0),
    lambda q: q.move_to_history(0, after=1e9),
])
def test_a_good_call_on_the_closed_connection_fails_otherwise(database_url: str,
                                                              call: Any) -> None:
    """The control of the test above: the same calls with good input do reach the connection,
    and fail on it with psycopg's error."""
    closed = psycopg.connect(database_url, autocommit=True)
    closed.close()
    with pytest.raises(psycopg.OperationalError, match="closed"):
        call(Queue(closed))


@pytest.mark.parametrize("after", [float("inf"), 1e15])
def test_an_age_too_large_for_postgresql_raises_invalid_options(database_url: str, conn: Any,
                                                                after: float) -> None:
    queue = Queue(conn)
    with pytest.raises(InvalidOptionsError):
        queue.move_to_history(after=after)


def test_the_async_twins_refuse_bad_input_before_any_sql(database_url: str) -> None:
    import asyncio

    async def run() -> None:
        closed = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        await closed.close()
        aq = AsyncQueue(closed)
        with pytest.raises(InvalidOptionsError):
            [j async for j in aq.export_history(datetime(2026, 1, 1))]
        with pytest.raises(InvalidOptionsError):
            await aq.move_to_history(after=-1)

    asyncio.run(run())


@pytest.mark.parametrize("args, words", [
    (["--since", "yesterday"], "since"),
    (["--since", "2026-03-02", "--until", "2026-03-01"], "before since"),
    (["--since", "2026-03-01", "--queue", ""], "queue"),
])
def test_the_cli_refuses_a_bad_range_with_a_clear_message(
        database_url: str, args: list[str], words: str) -> None:
    result = CliRunner().invoke(main, ["--database-url", database_url, "history", "export",
                                       *args])
    assert result.exit_code != 0
    assert words in result.stderr and "Traceback" not in result.output
    assert result.stdout == ""


# ---- 8. one mover or pruner at a time -----------------------------------------------------------


def assert_refused_while_locked(conn: psycopg.Connection[Any], queue: Queue,
                                ids: list[int]) -> None:
    """With the lock held elsewhere, the move returns -1 and moves nothing."""
    moved = queue.move_to_history(after=0)
    assert moved == -1, f"the mover ran under another's lock: {moved}"
    assert live_ids(conn) >= set(ids) and not set(ids) & set(history(conn))


def test_the_mover_and_the_pruner_share_one_try_lock(database_url: str, conn: Any,
                                                     queue: Queue) -> None:
    """While another transaction holds the pruner's lock, move_to_history returns -1 and moves
    nothing, as prune_jobs does; once it ends, the move goes on."""
    ids = enqueue(queue, 3)
    finish(conn, ids, ago=7200)
    with psycopg.connect(database_url) as holder:  # not autocommit: the lock lasts
        holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", MOVE_LOCK)
        assert_refused_while_locked(conn, queue, ids)
        assert queue.prune_jobs() == -1
        holder.rollback()
    assert queue.move_to_history(after=0) == 3


def test_the_lock_checker_fails_on_a_mover_without_the_lock(database_url: str, conn: Any,
                                                            queue: Queue) -> None:
    """A copy of the mover that skips the try-lock moves while another transaction holds it;
    `assert_refused_while_locked` catches it."""
    ids = enqueue(queue, 3)
    finish(conn, ids, ago=7200)
    broken = _broken("move_to_history", {"IF NOT pg_try_advisory_xact_lock(2003, 7048) THEN":
                                         "IF false THEN"})
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", MOVE_LOCK)
        with conn.transaction():
            conn.execute(broken)
            with pytest.raises(AssertionError, match="under another's lock"):
                assert_refused_while_locked(conn, queue, ids)
            raise psycopg.Rollback()
        assert_refused_while_locked(conn, queue, ids)
        holder.rollback()


# ---- 9. the columns of jobs and job_history -----------------------------------------------------


def columns(conn: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in conn.execute(
        "SELECT column_name, data_type, udt_name, character_maximum_length, numeric_precision,"
        " datetime_precision, is_nullable FROM information_schema.columns"
        " WHERE table_schema = 'workhorse' AND table_name = %s ORDER BY ordinal_position",
        (table,)).fetchall()]


def assert_same_columns(conn: psycopg.Connection[Any]) -> None:
    """jobs and job_history (and a day's partition) have the same columns, with the same types,
    in the same order: `INSERT INTO job_history SELECT * FROM jobs` stays right."""
    live = columns(conn, "jobs")
    assert columns(conn, "job_history") == live, "job_history's columns differ from jobs'"
    for name in partitions(conn):
        assert columns(conn, name.split(".")[1]) == live, name


def test_job_history_has_the_columns_of_jobs_in_order(conn: Any, queue: Queue) -> None:
    finish(conn, enqueue(queue, 1), ago=7200)
    assert queue.move_to_history(after=0) == 1
    assert len(columns(conn, "jobs")) > 30
    assert_same_columns(conn)


def test_the_parity_checker_fails_when_jobs_gains_a_column(conn: Any, queue: Queue) -> None:
    """A column added to jobs alone (the mistake the checker guards against) is caught, and the
    move it would break does fail."""
    finish(conn, enqueue(queue, 1), ago=7200)
    with conn.transaction():
        conn.execute("ALTER TABLE workhorse.jobs ADD COLUMN note text")
        with pytest.raises(AssertionError, match="differ"):
            assert_same_columns(conn)
        with pytest.raises(psycopg.Error), conn.transaction():
            queue.move_to_history(after=0)
        raise psycopg.Rollback()
    assert_same_columns(conn)
    assert queue.move_to_history(after=0) == 1
