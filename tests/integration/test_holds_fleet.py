"""Budget holds across a real fleet (issue #41 item 3, its "done when"; docs/design.md "Holds",
invariant 13), and the kill -9 of a holder. One process on one database is test_holds.py.

1. One ledger. Budget `api` (max_active=6) is shared by queue `hf`, served by 8 supervisors
   (`workhorse worker`, --slots 1, --concurrency 2: 16 places), whose jobs (cost 1 or 2) each
   run 20-50 ms, and by 4 plain Python processes that loop taking `app.budget("api").hold()`
   (1 or 2 units) for 20-50 ms. The jobs arrive in 8 waves while the holders run, each
   enqueued by the test inside a hold of 2 units of its own, kept 150 ms, so that each wave
   meets units held. Each records when it really ran, by the database's clock: a handler reads
   clock_timestamp() as it starts and writes its row with clock_timestamp() as it ends; a
   holder (and the test) reads clock_timestamp() on a connection of its own right after its
   hold is granted and right before it is released. Each interval lies inside the time its
   units are counted in the ledger (claim to outcome, grant to release), so the most units the
   intervals overlap is at most what the ledger ever admitted. It never passes 6, and reaches 6
   at an instant when jobs and holds both run.
2. The same checker fails on the same fleet with a broken admission installed in the test's
   database: a hold whose free units ignore the other holds, and a claim whose free units ignore
   the holds (both report a peak above 6).
3. kill -9 of a holder of all 6 units (lease 2 s): `Queue.list_holds` shows it with its holder
   and pid; no job of the budget starts while the lease runs (renewed past its first end while
   the holder lives), and one starts within the lease + 2 s of the kill: the lease, then the
   worker's 1 s poll of a governed queue that came back short, then the claim. The supervisor
   (at its default --dequeue-timeout, 30 s) starts before any job has named the budget, so the
   queue becomes governed under it: a slot that slept the ungoverned poll through that change
   started the first job 28.9 s after the kill (fixed in the slot: the change wakes it).
4. A run of holds, one after the other, keeps one keeper thread (bench_holds.py found one
   started for nearly every hold: the keeper ended whenever it woke to find the hold over).

The fleet and kill tests are slow and not `fleet` (CI's first pass only, as the named-budget
fleet): the admission they rely on is the claim's and the hold's SQL, which test_holds.py runs on
both servers. The checker's own test and the keeper's run on both.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import psycopg
import pytest
from _integration import REPO, collect, spawn, start

from workhorse import App, Queue, _sql

T = TypeVar("T")
LIMIT = 6
SUPERVISORS = 8
HOLDERS = 4
OPTIONS = ("--slots", "1", "--concurrency", "2", "--lease", "10s", "--dequeue-timeout", "5s")
WAVES = 8  # of jobs, enqueued while the holders run, the holders alone between them
WAVE_HOLD = 0.15  # the hold of 2 units this process keeps around each wave's enqueue
KILL_LEASE = 2.0
# After the lease ends: the worker's poll of a governed queue that came back short (1 s), its
# claim, and a loaded machine's scheduling.
KILL_MARGIN = 2.0

SCHEMA = """
CREATE TABLE hold_spans (
    kind text NOT NULL CHECK (kind IN ('job', 'hold')), token text NOT NULL,
    units integer NOT NULL, pid integer NOT NULL,
    started timestamptz NOT NULL, ended timestamptz NOT NULL);
"""

# The supervisors' app: queue `hf`, its jobs naming budget `api`; the handler records its own
# start and end by the database's clock, on one connection per handler thread.
APP = '''
import os
import threading
import time

import psycopg

import workhorse

app = workhorse.App("holdfleet")
api = app.budget("api", max_active=6)
_local = threading.local()


def _conn():
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(
            os.environ["WORKHORSE_DATABASE_URL"], autocommit=True,
            options="-c synchronous_commit=off")
    return conn


def _run(token, units, seconds):
    conn = _conn()
    started = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    time.sleep(seconds)
    conn.execute(
        "INSERT INTO hold_spans (kind, token, units, pid, started, ended)"
        " VALUES ('job', %s, %s, %s, %s, clock_timestamp())",
        (token, units, os.getpid(), started))


@app.task(name="hf.one", queue="hf", budget=api)
def one(token, seconds):
    _run(token, 1, seconds)


@app.task(name="hf.two", queue="hf", budget=api, cost=2)
def two(token, seconds):
    _run(token, 2, seconds)
'''

# A plain Python process that holds units of `api` (`holder.py MODE URL OPTIONS`, as
# _integration.spawn runs it). `loop`: after "ready" and the start time on stdin, holds 1 or 2
# units for 20-50 ms, pauses 0-20 ms, again until `seconds` have passed; records each hold's
# clock_timestamp() right after the grant and right before the release, on its own connection;
# prints a JSON report. `kill`: holds `units` with `lease`, says "held ID", and sleeps.
HOLDER = '''
import json
import os
import random
import sys
import time

import psycopg

import workhorse
from workhorse import HoldTimeoutError

mode, url, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
app = workhorse.App("hf-holder", database_url=url)
budget = app.budget("api")
if mode == "kill":
    with budget.hold(units=options["units"], lease=options["lease"], timeout=10) as held:
        print(f"held {held.id}", flush=True)
        time.sleep(600)
    sys.exit(1)

rng = random.Random(options["seed"])
conn = psycopg.connect(url, autocommit=True)
with app.connection() as c:  # the app's pool open before the start
    c.execute("SELECT 1")
print("ready", flush=True)
start_at = float(sys.stdin.readline())
time.sleep(max(start_at - time.time(), 0))
deadline = start_at + options["seconds"]
spans, timeouts, waited = [], 0, 0.0
while time.time() < deadline:
    units = rng.choice(options["units"])
    asked = time.monotonic()
    try:
        with budget.hold(units=units, timeout=max(deadline - time.time(), 0.05), lease="10s"):
            started = conn.execute("SELECT clock_timestamp()").fetchone()[0]
            waited += time.monotonic() - asked
            time.sleep(rng.uniform(0.02, 0.05))
            ended = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    except HoldTimeoutError:
        timeouts += 1
        continue
    spans.append((f"h{os.getpid()}.{len(spans)}", units, os.getpid(), started, ended))
    time.sleep(rng.uniform(0, 0.02))
with conn.cursor() as cur:
    cur.executemany(
        "INSERT INTO hold_spans (kind, token, units, pid, started, ended)"
        " VALUES ('hold', %s, %s, %s, %s, %s)", spans)
print(json.dumps({"holds": len(spans), "timeouts": timeouts,
                  "mean_wait": waited / max(len(spans), 1)}))
'''

Span = tuple[str, int, datetime, datetime]  # kind, units, started, ended


def peaks(spans: list[Span]) -> tuple[int, int]:
    """(the most units running at one instant; the most at an instant when jobs and holds both
    run). At one instant an end counts before a start (the units were given back first)."""
    events = sorted([(s, units, kind) for kind, units, s, _ in spans]
                    + [(e, -units, kind) for kind, units, _, e in spans],
                    key=lambda event: (event[0], event[1]))
    running = {"job": 0, "hold": 0}
    peak = mixed = 0
    for _, delta, kind in events:
        running[kind] += delta
        total = running["job"] + running["hold"]
        peak = max(peak, total)
        if running["job"] and running["hold"]:
            mixed = max(mixed, total)
    return peak, mixed


# ---- the fleet ----------------------------------------------------------------------------------


def wait_for(check: Callable[[], T], timeout: float, what: str,
             logs: Callable[[], str] = str, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs()}")
        time.sleep(interval)


def scalar(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None


class Supervisor:
    """One `workhorse worker holdfleet_app:app` process; its output goes to a file."""

    def __init__(self, database_url: str, where: Path, n: int, *args: str) -> None:
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}
        env.pop("WORKHORSE_DEFAULT_CONCURRENCY_LIMIT", None)
        self.log = where / f"worker{n}.log"
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "worker", "holdfleet_app:app", *args],
            cwd=where, env=env, stdout=self._out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)

    def output(self) -> str:
        self._out.flush()
        return f"--- worker {self.proc.pid} ---\n{self.log.read_text(errors='replace')}"

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise
        finally:
            self._out.close()


@pytest.fixture
def fleet_app(database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
              ) -> Iterator[ModuleType]:
    """The app module written where the supervisors run, imported here too (its budget synced,
    its tasks enqueued from this process), and the holder script beside it."""
    (tmp_path / "holdfleet_app.py").write_text(APP)
    (tmp_path / "holder.py").write_text(HOLDER)
    spec = importlib.util.spec_from_file_location("holdfleet_app", tmp_path / "holdfleet_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.app.database_url = database_url
    conn.execute(SCHEMA)
    module.app.sync()
    assert [(b.name, b.max_active) for b in Queue(conn).list_budgets()] == [("api", LIMIT)]
    try:
        yield module
    finally:
        module.app.close()


def claiming(conn: psycopg.Connection[Any]) -> int:
    """Slots connected to claim (each slot's claim connection LISTENs for its queues)."""
    return int(scalar(conn, "SELECT count(*) FROM pg_stat_activity"
                            " WHERE datname = current_database()"
                            " AND application_name LIKE 'workhorse-slot%%-claim'"))


def succeeded(conn: psycopg.Connection[Any]) -> int:
    return int(scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'"))


def run_fleet(app: ModuleType, database_url: str, conn: psycopg.Connection[Any], where: Path,
              jobs: int, seconds: float) -> tuple[list[Span], list[dict[str, Any]]]:
    """8 supervisors and 4 holders on budget `api`, the holders holding for `seconds`, and
    `jobs` jobs (one in three of cost 2, 20-50 ms each) enqueued in WAVES waves while they do.
    Returns every recorded span and the holders' reports."""
    supervisors = [Supervisor(database_url, where, n, *OPTIONS) for n in range(SUPERVISORS)]
    holders = [spawn("loop", database_url, script=where / "holder.py", seed=n, seconds=seconds,
                     units=[1, 2]) for n in range(HOLDERS)]

    def logs() -> str:
        return "\n".join(s.output() for s in supervisors)

    try:
        wait_for(lambda: claiming(conn) == SUPERVISORS, 120, "every slot to claim", logs)
        calls = [(app.two if n % 3 == 0 else app.one).call((f"j{n}", 0.02 + (n * 7 % 31) / 1000))
                 for n in range(jobs)]
        # The holders first, and the jobs in waves between which the holders have the budget
        # to themselves. This process enqueues each wave inside a hold of 2 units of its own
        # (as a web request might), kept WAVE_HOLD s: each wave meets units held for longer
        # than the workers take to start its first jobs, so a claim that ignored the holds
        # would be seen to take the budget's every unit beside them.
        began = start(holders, delay=0.05)
        for wave in range(WAVES):
            time.sleep(max(began + (wave + 1) * seconds / (WAVES + 1) - time.time(), 0))
            with app.app.budget("api").hold(units=2, timeout=10):
                held_from = scalar(conn, "SELECT clock_timestamp()")
                app.app.enqueue_many(calls[wave::WAVES])
                time.sleep(WAVE_HOLD)
                held_to = scalar(conn, "SELECT clock_timestamp()")
            conn.execute("INSERT INTO hold_spans (kind, token, units, pid, started, ended)"
                         " VALUES ('hold', %s, 2, %s, %s, %s)",
                         (f"wave{wave}", os.getpid(), held_from, held_to))
        reports = collect(holders, timeout=seconds + 60)
        wait_for(lambda: succeeded(conn) == jobs, 90, f"{jobs} jobs to succeed", logs, 0.1)
    finally:
        for holder in holders:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        codes = [s.stop() for s in supervisors]
    assert codes == [0] * SUPERVISORS, logs()
    spans: list[Span] = conn.execute(
        "SELECT kind, units, started, ended FROM hold_spans").fetchall()
    assert all(s <= e for _, _, s, e in spans)
    assert sum(kind == "job" for kind, *_ in spans) == jobs
    return spans, reports


def describe(spans: list[Span], reports: list[dict[str, Any]]) -> str:
    jobs = [(s, e) for kind, _, s, e in spans if kind == "job"]
    beside = sum(kind == "hold" and any(a < e and s < b for a, b in jobs)
                 for kind, _, s, e in spans)
    return (f"{len(jobs)} jobs; holds {[r['holds'] for r in reports]}, {beside} of them beside "
            f"a job (timed out: "
            f"{[r['timeouts'] for r in reports]}; mean wait for a grant "
            f"{[round(r['mean_wait'] * 1000) for r in reports]} ms)")


@pytest.mark.slow
def test_jobs_and_holds_of_a_fleet_share_one_budget(fleet_app, database_url, conn, tmp_path):
    spans, reports = run_fleet(fleet_app, database_url, conn, tmp_path, jobs=160, seconds=4.5)
    peak, mixed = peaks(spans)
    assert all(r["holds"] > 0 for r in reports), describe(spans, reports)
    assert peak <= LIMIT, f"{peak} units of jobs and holds at once (budget {LIMIT})"
    assert mixed == LIMIT, (f"jobs and holds never filled the budget together (at most {mixed})"
                            f": the test proves nothing; {describe(spans, reports)}")
    print(f"max_active={LIMIT}: peak {peak}, {mixed} with jobs and holds both running; "
          f"{describe(spans, reports)}")


# A broken admission, each a copy of a live function installed in the test's database.
BROKEN: dict[str, tuple[str, str]] = {
    # The hold's free units less the active jobs' cost only.
    "a hold that ignores the holds": (
        "hold_budget", "WHERE h.budget = p_budget AND h.lease_until > v_now"),
    # The claim's free units (b_free) less the active jobs' cost only.
    "a claim that ignores the holds": (
        "_choose_units", "WHERE h.budget = v_row.budget AND h.lease_until > p_now"),
}


@pytest.mark.slow
@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_checker_fails_on_a_broken_ledger(fleet_app, database_url, conn, tmp_path, broken):
    base, where = BROKEN[broken]
    text = _sql.function_files()[_sql.function_name(base)]
    assert text.count(where) == 1, where
    conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                 .replace(where, "WHERE false"))
    spans, reports = run_fleet(fleet_app, database_url, conn, tmp_path, jobs=160, seconds=4.5)
    peak, _ = peaks(spans)
    assert peak > LIMIT, f"{broken}: peak {peak}, the checker is blind; {describe(spans, reports)}"
    print(f"{broken}: peak {peak} (budget {LIMIT}); {describe(spans, reports)}")


def test_the_peak_checker_on_doctored_spans():
    """Exact instants: an end counts before a start; `mixed` only where both kinds run."""
    t = [datetime.fromtimestamp(1_700_000_000 + n / 8) for n in range(8)]
    spans: list[Span] = [("job", 2, t[0], t[2]), ("hold", 2, t[1], t[3]), ("job", 2, t[2], t[4]),
                         ("hold", 1, t[1], t[2])]
    assert peaks(spans) == (5, 5)      # 2 + 2 + 1 at t1; at t2 two units end as two start
    assert peaks([*spans, ("hold", 2, t[3], t[5])]) == (5, 5)
    assert peaks([*spans, ("job", 2, t[1], t[4])]) == (7, 7)
    assert peaks([("job", 3, t[0], t[1]), ("hold", 3, t[1], t[2])]) == (3, 0)


# ---- kill -9 of a holder ------------------------------------------------------------------------


@pytest.mark.slow
def test_kill_9_of_a_holder_returns_its_units_when_the_lease_ends(fleet_app, database_url, conn,
                                                                  tmp_path):
    queue = Queue(conn)
    holder = spawn("kill", database_url, script=tmp_path / "holder.py", units=LIMIT,
                   lease=KILL_LEASE)
    supervisor = None
    try:
        assert holder.stdout is not None
        said = holder.stdout.readline().split()
        assert said[:1] == ["held"], (said, holder.stderr.read() if holder.stderr else "")
        [hold] = queue.list_holds("api")
        assert (hold.id, hold.units, hold.holder, hold.pid) == (
            int(said[1]), LIMIT, "workhorse-hold:hf-holder", holder.pid)
        first_lease = hold.lease_until

        supervisor = Supervisor(database_url, tmp_path, 0, *OPTIONS[:-2])  # default poll: 30 s
        wait_for(lambda: claiming(conn) == 1, 120, "the slot to claim", supervisor.output)
        fleet_app.app.enqueue_many(fleet_app.one.call((f"k{n}", 0.02)) for n in range(4))
        # Past the lease's first end: the holder's renewals keep the budget full.
        wait_for(lambda: scalar(conn, "SELECT clock_timestamp() > %s", first_lease), 10,
                 "the first lease to end")
        time.sleep(0.3)
        [renewed] = queue.list_holds("api")
        assert renewed.lease_until > first_lease
        assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE started_at IS NOT NULL"
                      ) == 0, "a job started while a hold of every unit was renewed"

        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = scalar(conn, "SELECT clock_timestamp()")
        lease_end = scalar(conn, "SELECT lease_until FROM workhorse.budget_holds WHERE id = %s",
                           hold.id)
        first_start = wait_for(
            lambda: scalar(conn, "SELECT min(started_at) FROM workhorse.jobs"), 30,
            "a job to start once the lease ends", supervisor.output, 0.02)
        wait_for(lambda: succeeded(conn) == 4, 30, "the jobs to succeed", supervisor.output)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if supervisor is not None:
            assert supervisor.stop() == 0, supervisor.output()
    assert queue.list_holds("api") == []
    after_kill = (first_start - killed_at).total_seconds()
    after_lease = (first_start - lease_end).total_seconds()
    assert first_start >= lease_end, f"a job started {-after_lease:.3f} s before the lease ended"
    assert after_kill <= KILL_LEASE + KILL_MARGIN, (
        f"the first job started {after_kill:.3f} s after the kill (lease {KILL_LEASE:g} s)")
    print(f"kill -9 of a holder of {LIMIT} units: lease ended "
          f"{(lease_end - killed_at).total_seconds():.3f} s after the kill; first job "
          f"{after_lease:.3f} s after that ({after_kill:.3f} s after the kill)")


# ---- one keeper thread ---------------------------------------------------------------------------


def test_a_run_of_holds_keeps_one_keeper_thread(database_url: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    app = App("keeper", database_url=database_url)
    app.budget("api", max_active=2)
    app.sync()
    try:
        for _ in range(50):
            with app.budget("api").hold():
                pass
    finally:
        app.close()
    assert started.count("workhorse-holds") == 1, (
        f"{started.count('workhorse-holds')} keeper threads for 50 holds")
