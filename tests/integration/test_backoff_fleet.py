"""Back-pressure across a fleet (docs/design.md "Back-pressure", issue #41 item 1 done-when):
separate supervisor processes, real handlers, and a simulated downstream that says 429.

1. A budget: four supervisors serve queue bo-a (jobs of budget "api", which call a tiny HTTP
   server in this process) and bo-b (budget "other"). The server answers one request with 429 and
   `Retry-After: 2` once the fleet is busy; that handler raises `Backoff(retry_after=2)`. From
   the backoff's `set_at` to its `until` (the database's clock, as every claim's `started_at`),
   no job of budget "api" starts on any supervisor, while bo-b keeps starting jobs; bo-a resumes
   once it ends, and the job that raised succeeds with its attempt given back.
2. A key: three supervisors on a queue with max_active_per_key and 50 keys; one key backs itself
   off for 2 s: none of its jobs starts in the window, and the other keys keep their throughput.

Each run's start is read twice: the handler records its attempt's `started_at` (bo_runs), and
the job's row keeps its last one. Each check is also run on a deliberately broken claim (the
backoff's clause removed, installed in the test's database before the workers start): it must
fail there, or it could pass on a claim that never met the backoff.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import _backoff_app as bo
import psycopg
import pytest
from _backoff_harness import Supervisor, rows, scalar, stop_all, wait_for

from workhorse import Queue, _sql

pytestmark = pytest.mark.slow  # several supervisors: CI's first pass only

WINDOW = 2.0          # the downstream's Retry-After, and the key's backoff
RESUME_SLACK = 3.0    # the target's first start after the backoff ends comes within this
OPTIONS = ("--slots", "1", "--lease", "10s", "--dequeue-timeout", "1s", "--grace", "10s")


def _install_broken(conn: psycopg.Connection[Any], function: str, old: str, new: str) -> None:
    text = _sql.function_files()[_sql.function_name(function)]
    assert text.count(old) == 1, (function, old)
    conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                 .replace(old, new))


def _starts(conn: psycopg.Connection[Any], where: str, *params: Any) -> list[tuple[Any, ...]]:
    """Every start (job id, key, started_at) of the jobs `where` selects: each run the handlers
    recorded, and each job row's last start (a claim whose handler had not run yet)."""
    return rows(conn, f"""
        SELECT r.job_id, r.ckey, r.started_at FROM bo_runs r
        JOIN workhorse.jobs j ON j.id = r.job_id WHERE {where}
        UNION
        SELECT j.id, NULLIF(j.ckey, ''), j.started_at FROM workhorse.jobs j
        WHERE j.started_at IS NOT NULL AND {where}""", *params, *params)


def _in(starts: list[tuple[Any, ...]], begin: datetime, end: datetime) -> list[tuple[Any, ...]]:
    return sorted((s for s in starts if begin <= s[2] < end), key=lambda s: s[2])


# ---- 1. a budget behind a 429 ------------------------------------------------------------------


class Downstream:
    """An HTTP API that says 429 (Retry-After: 2) to the first request after it is armed."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.lock = threading.Lock()
        self.limited = 0
        self.requests = 0
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with downstream.lock:
                    downstream.requests += 1
                    limit = downstream.armed.is_set() and downstream.limited == 0
                    downstream.limited += limit
                if limit:
                    self.send_response(429)
                    self.send_header("Retry-After", f"{WINDOW:g}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Downstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def check_budget_backoff(conn: psycopg.Connection[Any]) -> str:
    """The done-when guarantee, read from the database after the run: raises AssertionError
    with what was wrong; returns a summary."""
    logged = rows(conn, "SELECT scope, name, set_at, until, by_job, retry_after FROM bo_backoffs"
                        " ORDER BY set_at")
    assert len(logged) == 1, f"expected one backoff, got {logged}"
    (scope, name, set_at, until, by_job, retry_after), = logged
    assert (scope, name, retry_after) == ("budget", "api", WINDOW), logged[0]
    assert abs((until - set_at).total_seconds() - WINDOW) < 0.1, logged[0]

    api = _starts(conn, "j.budget = %s", "api")
    other = _starts(conn, "j.budget = %s", "other")
    inside = _in(api, set_at, until)
    assert inside == [], (f"{len(inside)} jobs of budget api started inside the backoff "
                          f"[{set_at}, {until}): {inside[:5]}")
    other_inside = _in(other, set_at, until)
    assert len(other_inside) >= 10, (
        f"budget other started only {len(other_inside)} jobs during api's backoff")
    after = [s[2] for s in api if s[2] >= until]
    assert after and min(after) < until + timedelta(seconds=RESUME_SLACK), (
        f"api did not resume within {RESUME_SLACK}s of {until}: {min(after, default=None)}")

    # The job that raised: ready again with its attempt given back, then run and succeeded.
    job_runs = rows(conn, "SELECT attempt, started_at, note FROM bo_runs WHERE job_id = %s"
                          " ORDER BY wall", by_job)
    status, attempts = conn.execute("SELECT status, attempts FROM workhorse.jobs WHERE id = %s",
                                    (by_job,)).fetchone() or (None, None)
    assert status == "succeeded", (by_job, status)
    assert attempts == len(job_runs) - 1 == 1, (attempts, job_runs)
    assert [a for a, _, _ in job_runs] == [1, 1], job_runs
    pids = scalar(conn, "SELECT count(DISTINCT pid) FROM bo_runs WHERE budget = 'api'"
                        " AND started_at < %s", set_at)
    assert pids == 4, f"only {pids} supervisors ran jobs of budget api before the backoff"
    return (f"backoff [{set_at}, {until}): api started 0 inside, first after "
            f"+{(min(after) - until).total_seconds():.3f}s; other {len(other_inside)} inside")


@pytest.fixture
def fleet_tables(conn: psycopg.Connection[Any]) -> None:
    conn.execute(bo.SCHEMA)
    Queue(conn).sync_budgets(bo.fleet_app.name, bo.fleet_app.budget_definitions())


@pytest.mark.usefixtures("fleet_tables")
@pytest.mark.parametrize("claim", ["intact", "budget backoff ignored"])
def test_a_429_behind_a_budget_stops_its_starts_fleet_wide(
        database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, claim: str) -> None:
    if claim != "intact":  # the choice in units never joins the budget's backoff
        _install_broken(conn, "_choose_units",
                        "CASE WHEN bo.until > p_now THEN bo.until END AS off_until",
                        "NULL::timestamptz AS off_until")
    with bo.fleet_app.using(conn):
        bo.fleet_app.enqueue_many(bo.call_api.call((n,)) for n in range(400))
        bo.fleet_app.enqueue_many(bo.call_other.call((n,)) for n in range(600))

    with Downstream() as downstream:
        supervisors = [
            Supervisor(database_url, "_backoff_app:fleet_app", tmp_path / f"s{i}.log",
                       *OPTIONS, "--concurrency", "4", env={"BO_API_URL": downstream.url})
            for i in range(4)]
        try:
            # Every supervisor serves both queues before the downstream says 429.
            wait_for(lambda: scalar(conn, "SELECT count(DISTINCT pid) FROM bo_runs"
                                          " WHERE budget = 'api'") == 4,
                     60, "all four supervisors to run jobs of budget api", *supervisors)
            wait_for(lambda: scalar(conn, "SELECT count(*) FROM bo_runs WHERE budget = 'api'")
                     >= 40, 60, "the fleet to be busy", *supervisors)
            downstream.armed.set()
            until = wait_for(lambda: scalar(conn, "SELECT max(until) FROM bo_backoffs"), 30,
                             "the backoff", *supervisors)
            # Until the budget resumed and the job that raised ran again.
            wait_for(lambda: scalar(
                conn, "SELECT clock_timestamp() > %s + interval '1 s' AND EXISTS ("
                      " SELECT 1 FROM workhorse.jobs j JOIN bo_backoffs b ON b.by_job = j.id"
                      " WHERE j.status = 'succeeded')", until),
                     30, "the budget to resume", *supervisors)
        finally:
            codes = stop_all(supervisors)
    assert codes == [0, 0, 0, 0], [s.output()[-3000:] for s in supervisors]
    assert downstream.limited == 1

    if claim == "intact":
        print(check_budget_backoff(conn))
    else:
        with pytest.raises(AssertionError, match="started inside the backoff") as failure:
            check_budget_backoff(conn)
        print(str(failure.value).splitlines()[0][:300])


# ---- 2. one key of fifty -----------------------------------------------------------------------

KEYS = 50
PER_KEY_JOBS = 80


def check_key_backoff(conn: psycopg.Connection[Any]) -> str:
    logged = rows(conn, "SELECT scope, name, ckey, set_at, until, by_job FROM bo_backoffs")
    assert len(logged) == 1, f"expected one backoff, got {logged}"
    (scope, name, key, set_at, until, by_job), = logged
    assert (scope, name, key) == ("key", "bo-keys", "hot"), logged[0]

    starts = _starts(conn, "j.queue = %s", "bo-keys")
    hot = [s for s in starts if s[1] == "hot"]
    others = [s for s in starts if s[1] != "hot"]
    inside = _in(hot, set_at, until)
    assert inside == [], (f"{len(inside)} jobs of key hot started inside the backoff "
                          f"[{set_at}, {until}): {inside[:5]}")
    window = until - set_at
    before = len(_in(others, set_at - window, set_at))
    during = len(_in(others, set_at, until))
    assert before >= 20, f"the fleet was not busy before the backoff: {before} starts"
    assert during >= 0.5 * before, (
        f"the other keys slowed down during the backoff: {during} starts, {before} before")
    after = [s[2] for s in hot if s[2] >= until]
    assert after and min(after) < until + timedelta(seconds=RESUME_SLACK), (
        f"key hot did not resume within {RESUME_SLACK}s of {until}: {min(after, default=None)}")
    status, attempts = conn.execute("SELECT status, attempts FROM workhorse.jobs WHERE id = %s",
                                    (by_job,)).fetchone() or (None, None)
    assert (status, attempts) == ("succeeded", 1), (by_job, status, attempts)
    return (f"backoff [{set_at}, {until}); other keys' starts {before} before, {during} "
            f"during; hot's first after +{(min(after) - until).total_seconds():.3f}s")


@pytest.fixture
def keys_backlog(conn: psycopg.Connection[Any]) -> Iterator[None]:
    conn.execute(bo.SCHEMA)
    Queue(conn).sync_concurrency_policies(bo.keys_app.name, bo.keys_app.policy_definitions())
    names = ["hot", *(f"k{i}" for i in range(1, KEYS))]
    with bo.keys_app.using(conn):
        bo.keys_app.enqueue_many(bo.per_key.call((n, names[n % KEYS]))
                                 for n in range(KEYS * PER_KEY_JOBS))
    yield


@pytest.mark.usefixtures("keys_backlog")
@pytest.mark.parametrize("claim", ["intact", "key backoffs ignored"])
def test_a_backed_off_key_is_passed_over_by_the_fleet(
        database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, claim: str) -> None:
    if claim != "intact":  # no key is ever read as backed off
        _install_broken(conn, "claim",
                        "COALESCE(array_agg(b.ckey) FILTER (WHERE b.scope = 'key'), '{}')",
                        "'{}'::text[]")
    supervisors = [
        Supervisor(database_url, "_backoff_app:keys_app", tmp_path / f"k{i}.log",
                   *OPTIONS, "--concurrency", "8")
        for i in range(3)]
    try:
        wait_for(lambda: scalar(conn, "SELECT count(DISTINCT pid) FROM bo_runs") == 3,
                 60, "all three supervisors to run jobs", *supervisors)
        started = scalar(conn, "SELECT count(*) FROM bo_runs")
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM bo_runs") >= started + 100,
                 60, "the fleet to be busy", *supervisors)
        conn.execute("INSERT INTO bo_arm VALUES ('hot')")
        until = wait_for(lambda: scalar(conn, "SELECT max(until) FROM bo_backoffs"), 30,
                         "the backoff", *supervisors)
        wait_for(lambda: scalar(
            conn, "SELECT clock_timestamp() > %s + interval '1 s' AND EXISTS ("
                  " SELECT 1 FROM workhorse.jobs j JOIN bo_backoffs b ON b.by_job = j.id"
                  " WHERE j.status = 'succeeded')", until),
                 30, "the key to resume", *supervisors)
    finally:
        codes = stop_all(supervisors)
    assert codes == [0, 0, 0], [s.output()[-3000:] for s in supervisors]

    if claim == "intact":
        print(check_key_backoff(conn))
    else:
        with pytest.raises(AssertionError, match="started inside the backoff") as failure:
            check_key_backoff(conn)
        print(str(failure.value).splitlines()[0][:300])
