"""Several databases (issue #44, docs/design.md "Several databases"), the hard way: a real
`workhorse worker _databases_fleet_app:app` (its own OS process group: the top process, one
database supervisor a database, two slots each) serving queue `dbf-a` (max_active 2) in database
A, the test server's fixture database, and `dbf-b` (max_active 3) in database B, a private
PostgreSQL cluster (tests/faults/_cluster.py) that the test stops, starts and restarts (the shared
server is never restarted). WORKHORSE_DATABASES names both.

Each job records its own run in its database (`dbf_runs`: job, attempt, pid, process group,
time.time() at start and end); the databases record when each job was claimed and finished
(`started_at`, `finished_at`); a probe thread connects to B every 20 ms and records when it
could not. The checks read those records:

(a) each queue's peak concurrency equals its limit exactly, in the jobs' own record (when they
    really ran) and in the database's (when the claim counted them active): never above, and
    reached;
(b) B's server restarted a quarter of the way through (`pg_ctl restart -m fast`, `-m immediate`,
    and stopped for 2 s then started): A's jobs finished inside B's down window as the probe
    saw it, B's jobs started again after it, every job of both ends succeeded and ran once, the
    limits still exact, one worker (one process group) ran them all, and it exits 0 on SIGTERM;
(c) the worker started while B is stopped: A's jobs all complete, the worker says B is
    unreachable, and once B is started its jobs complete in the same worker (its process group,
    the top process never restarted);
(d) SIGTERM to the top process: the jobs running in both databases at that moment finish
    (succeeded, their records after the signal), nothing more is claimed, the rest stay ready,
    and it exits 0.

Every checker is shown to fail on a broken variant: the limit checker on a real run whose claim
in B ignores max_active (`install_broken` in B only: B ran 6 at once), and on the real records
checked against a limit one lower (above it) and one higher (never reached); on the same records
of (b), the "A kept completing" checker with A's finishes inside B's window moved after it (A
stalled), the "B resumed" checker with B's runs after the window removed, and the completeness
checker with one run recorded twice; the drain checker on a worker killed with SIGKILL (its
running jobs are left active).

Real processes and a server restart: CI's first pass only (marker `slow`), as the fault suite.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _databases_fleet_app as fa
import psycopg
import pytest
from _integration import install_broken
from ci_guard import skip_or_fail

from workhorse import App, _sql

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.append(str(HERE.parent / "faults"))
from _cluster import PrivateCluster, server_bindir  # noqa: E402

pytestmark = pytest.mark.slow

OPTIONS = ("--slots", "2", "--concurrency", "3", "--lease", "10s", "--dequeue-timeout", "1s",
           "--grace", "15s")
JOBS_A, JOBS_B = 300, 300
WAIT = 60.0  # s: the longest any wait below takes on a busy 2-core machine


# ---- records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run of a job, as its handler recorded it."""

    job_id: int
    attempt: int
    pid: int
    pgid: int
    start: float
    finish: float


@dataclass
class History:
    """What really happened in one database: its runs, and the jobs' rows."""

    runs: list[Run]
    jobs: dict[int, tuple[str, float | None, float | None]]  # id -> (status, claimed, finished)

    def intervals(self) -> list[tuple[float, float]]:
        return [(r.start, r.finish) for r in self.runs]

    def claimed(self) -> list[tuple[float, float]]:
        """The database's [started_at, finished_at) of each finished job."""
        return [(s, f) for _, s, f in self.jobs.values() if s is not None and f is not None]

    def finishes(self) -> list[float]:
        return sorted(f for status, _, f in self.jobs.values()
                      if status == "succeeded" and f is not None)


def query(url: str, sql: str, *params: Any, timeout: float = 30.0) -> list[tuple[Any, ...]]:
    """Rows of one query on a new connection, tried again while the server is away."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
                cursor = conn.execute(sql, params or None)
                return cursor.fetchall() if cursor.description is not None else []
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def scalar(url: str, sql: str, *params: Any) -> Any:
    return query(url, sql, *params)[0][0]


def history(url: str, queue: str) -> History:
    runs = [Run(*row) for row in query(
        url, "SELECT job_id, attempt, pid, pgid, start, finish FROM dbf_runs WHERE queue = %s "
             "ORDER BY start", queue)]
    jobs = {row[0]: (row[1], row[2], row[3]) for row in query(
        url, "SELECT id, status, extract(epoch FROM started_at)::float8, "
             "extract(epoch FROM finished_at)::float8 FROM workhorse.all_jobs WHERE queue = %s",
        queue)}
    return History(runs, jobs)


# ---- checkers --------------------------------------------------------------------------------


def peak(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals [start, end) that overlap at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = top = 0
    for _, change in events:  # at one instant, the ends (-1) before the starts
        running += change
        top = max(top, running)
    return top


def check_limit(h: History, limit: int, what: str) -> str:
    """The queue's peak concurrency is its limit exactly, in the jobs' own record and in the
    database's: AssertionError naming which passed it or never reached it."""
    ran, claimed = peak(h.intervals()), peak(h.claimed())
    assert ran <= limit and claimed <= limit, (
        f"{what} ran {ran} at once (the database counted {claimed} active), above its limit "
        f"{limit}")
    assert ran == limit and claimed == limit, (
        f"{what} never reached its limit {limit}: at most {ran} ran at once ({claimed} "
        "active)")
    return f"{what}: peak {ran} ran at once, {claimed} active, limit {limit}"


def check_complete(h: History, expected: int, what: str) -> None:
    """Every job succeeded, and ran once."""
    statuses: dict[str, int] = {}
    for status, _, _ in h.jobs.values():
        statuses[status] = statuses.get(status, 0) + 1
    assert statuses == {"succeeded": expected}, f"{what}: jobs by status {statuses}"
    ran = sorted(r.job_id for r in h.runs)
    assert ran == sorted(h.jobs), (
        f"{what}: {len(ran)} runs of {len(h.jobs)} jobs; run twice: "
        f"{sorted({j for j in ran if ran.count(j) > 1})[:10]}")


@dataclass
class Down:
    """B's down window, as the probe saw it: its first and last failed connection."""

    first: float
    last: float

    @property
    def seconds(self) -> float:
        return self.last - self.first


def check_kept_completing(a: History, down: Down, least: int = 3) -> str:
    """Jobs of A finished inside B's down window (at least `least` of them)."""
    inside = [f for f in a.finishes() if down.first < f < down.last]
    assert len(inside) >= least, (
        f"A stalled while B was down: {len(inside)} of A's jobs finished in B's "
        f"{down.seconds:.2f} s down window (at least {least} expected)")
    return f"{len(inside)} of A's jobs finished in B's {down.seconds:.2f} s down window"


def check_resumed(b: History, down: Down) -> str:
    """B's jobs started again after its down window."""
    after = [r for r in b.runs if r.start > down.last]
    assert after, f"B never resumed: no run of B started after {down.last:.3f}"
    return f"{len(after)} of B's runs started after it was back"


def check_drained(h: History, running: set[int], signaled: float, what: str) -> str:
    """The jobs running at the signal finished (succeeded, their records after it), none is
    left active, and none started after the signal."""
    left = {j: s for j, (s, _, _) in h.jobs.items() if j in running and s != "succeeded"}
    assert not left, f"{what}: jobs running at SIGTERM were not drained: {left}"
    active = [j for j, (s, _, _) in h.jobs.items() if s == "active"]
    assert not active, f"{what}: jobs left active: {active}"
    late = [j for j, (_, claimed, _) in h.jobs.items()
            if claimed is not None and claimed > signaled]
    assert not late, f"{what}: jobs claimed after SIGTERM: {late}"
    finished = [r for r in h.runs if r.job_id in running]
    assert finished and all(r.finish > signaled for r in finished), (
        f"{what}: the running jobs' records do not end after the signal: {finished}")
    return f"{what}: {len(running)} running jobs drained"


# ---- the worker ------------------------------------------------------------------------------


class Worker:
    """`python -m workhorse worker _databases_fleet_app:app` of this checkout, in a process group
    of its own; its output goes to a file that failures print."""

    def __init__(self, databases: dict[str, str], log: Path, *args: str,
                 env: dict[str, str] | None = None) -> None:
        path = os.environ.get("PYTHONPATH")
        self.log = log
        self._out = log.open("wb")
        environment = {**os.environ, "PYTHONUNBUFFERED": "1",
                       "WORKHORSE_DATABASES": ",".join(f"{n}={u}" for n, u in databases.items()),
                       "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO),
                       **(env or {})}
        for name in ("WORKHORSE_DATABASE_URL", "WORKHORSE_DEFAULT_CONCURRENCY_LIMIT"):
            environment.pop(name, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "worker", "_databases_fleet_app:app", *OPTIONS,
             *args], cwd=HERE, env=environment, stdout=self._out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(errors="replace")

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM to the top process (it relays it), then its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        """SIGKILL to the whole group (its database supervisors and slots too)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        else:  # the group may outlive its leader: a database supervisor or a slot
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        self._out.close()


def wait_for(check: Callable[[], Any], what: str, worker: Worker, timeout: float = WAIT
             ) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if worker.proc.poll() is not None:
            raise AssertionError(f"the worker exited {worker.proc.returncode} while waiting for "
                                 f"{what}\n{worker.output()[-6000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n"
                                 f"{worker.output()[-6000:]}")
        time.sleep(0.05)


class Probe:
    """Connects to B every 20 ms on a thread of its own; records the times it could not."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.failures: list[float] = []
        self.successes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=1) as conn:
                    conn.execute("SELECT 1")
                self.successes += 1
            except psycopg.OperationalError:
                self.failures.append(time.time())  # when B was seen refusing
            self._stop.wait(0.02)

    def down(self) -> Down:
        assert self.failures, "the probe never saw B down: the fault hit nothing"
        return Down(self.failures[0], self.failures[-1])


# ---- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    bindir = server_bindir()
    if bindir is None:
        skip_or_fail("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    private = PrivateCluster(bindir).init()
    try:
        private.start()
        private.create_database()
        yield private
    finally:
        private.destroy()


@dataclass
class Fleet:
    a_url: str
    b_url: str
    cluster: PrivateCluster
    tmp_path: Path
    app: App
    workers: list[Worker] = field(default_factory=list)

    @property
    def databases(self) -> dict[str, str]:
        return {"default": self.a_url, "b": self.b_url}

    def worker(self, *args: str, env: dict[str, str] | None = None) -> Worker:
        w = Worker(self.databases, self.tmp_path / f"worker{len(self.workers)}.log", *args,
                   env=env)
        self.workers.append(w)
        return w

    def enqueue(self, a: int, b: int) -> None:
        task_a, task_b = self.app.tasks[fa.TASK_A], self.app.tasks[fa.TASK_B]
        if a:
            self.app.enqueue_many(task_a.call((n,)) for n in range(a))
        if b:
            self.app.enqueue_many(task_b.call((n,)) for n in range(b))

    def finished(self, url: str, queue: str) -> int:
        return int(scalar(url, "SELECT count(*) FROM workhorse.all_jobs WHERE queue = %s "
                               "AND status = 'succeeded'", queue))

    def a(self) -> History:
        return history(self.a_url, fa.QUEUE_A)

    def b(self) -> History:
        return history(self.b_url, fa.QUEUE_B)


@pytest.fixture
def fleet(database_url: str, cluster: PrivateCluster, tmp_path: Path) -> Iterator[Fleet]:
    """Both databases with the runs table, the app's policies synced (as a deployment does)."""
    b_url = cluster.url()
    for url in (database_url, b_url):
        query(url, fa.SCHEMA)
    app = fa.fleet_app({"default": database_url, "b": b_url})
    app.sync()
    f = Fleet(database_url, b_url, cluster, tmp_path, app)
    try:
        yield f
    finally:
        for w in f.workers:
            w.close()
        app.close()
        query(database_url, "DROP TABLE IF EXISTS dbf_runs")  # the fixture's database is reused


# ---- (a) and (b): limits exact, and a restart of B -------------------------------------------

def _outage(cluster: PrivateCluster) -> None:
    """A longer outage than a restart's fraction of a second: stopped 2 s, then started."""
    cluster.stop("fast")
    time.sleep(2.0)
    cluster.start()


FAULTS: dict[str, Callable[[PrivateCluster], None]] = {
    "restart -m fast": lambda c: c.restart("fast"),
    "restart -m immediate": lambda c: c.restart("immediate"),
    "stopped 2 s": _outage,
}
# A's jobs finished inside B's down window at least this often (A runs about 50 a second: a
# restart's window holds 5-10, the 2 s outage's about 100).
LEAST_INSIDE = {"restart -m fast": 1, "restart -m immediate": 1, "stopped 2 s": 20}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_limits_hold_on_each_database_and_a_restart_of_b_stops_only_b(
        fleet: Fleet, fault: str) -> None:
    fleet.enqueue(JOBS_A, JOBS_B)
    worker = fleet.worker()
    with Probe(fleet.b_url) as probe:
        wait_for(lambda: fleet.finished(fleet.b_url, fa.QUEUE_B) >= JOBS_B // 4,
                 "a quarter of B's jobs", worker)
        a_before = fleet.finished(fleet.a_url, fa.QUEUE_A)
        fault_at = time.time()
        FAULTS[fault](fleet.cluster)
        back_at = time.time()
        wait_for(lambda: fleet.finished(fleet.b_url, fa.QUEUE_B) == JOBS_B
                 and fleet.finished(fleet.a_url, fa.QUEUE_A) == JOBS_A,
                 "every job of both databases", worker)
    down = probe.down()
    assert fault_at <= down.first <= down.last <= back_at + 1.0, (fault_at, down, back_at)
    assert a_before < JOBS_A, "A was done before the fault: the test proves nothing"
    code = worker.terminate()
    assert code == 0, worker.output()[-6000:]
    a, b = fleet.a(), fleet.b()
    print(f"{fault}: B down {down.seconds:.2f} s ({len(probe.failures)} failed probes); A had "
          f"finished {a_before} of {JOBS_A} before it")
    print(check_kept_completing(a, down, LEAST_INSIDE[fault]))
    print(check_resumed(b, down))
    check_complete(a, JOBS_A, "A")
    check_complete(b, JOBS_B, "B")
    print(check_limit(a, fa.MAX_A, "A"))
    print(check_limit(b, fa.MAX_B, "B"))
    # One worker ran them all: its process group (its database supervisors' slots); B's slots
    # and listener reconnected by themselves (the top process restarted no supervisor).
    assert {r.pgid for r in a.runs + b.runs} == {worker.pid}
    out = worker.output()
    assert "trying again" not in out and "exited with" not in out, out[-6000:]

    # The same records, broken: each checker fails on them.
    stalled = History([r for r in a.runs], {
        j: (s, c, (down.last + 1.0) if f is not None and down.first < f < down.last else f)
        for j, (s, c, f) in a.jobs.items()})  # A's finishes inside the window moved after it
    with pytest.raises(AssertionError, match="A stalled while B was down"):
        check_kept_completing(stalled, down, LEAST_INSIDE[fault])
    never_back = History([r for r in b.runs if r.start <= down.last], b.jobs)
    with pytest.raises(AssertionError, match="B never resumed"):
        check_resumed(never_back, down)
    twice = History([*b.runs, b.runs[0]], b.jobs)
    with pytest.raises(AssertionError, match="run twice"):
        check_complete(twice, JOBS_B, "B")
    with pytest.raises(AssertionError, match="above its limit"):
        check_limit(b, fa.MAX_B - 1, "B")
    with pytest.raises(AssertionError, match="never reached its limit"):
        check_limit(a, fa.MAX_A + 1, "A")


CLAIM = _sql.function_name("claim")
ROOM = "v_room := LEAST(p_limit, v_max - v_active);"


def test_the_limit_checker_fails_on_a_claim_in_b_that_ignores_max_active(fleet: Fleet) -> None:
    """B's claim function replaced, in B only, by one that takes as many jobs as the slot has
    room for (the plain queue's path, which `dbf-b` takes): B's peak passes its limit, and the
    checker says so; A, whose claim is intact, still holds its limit."""
    with psycopg.connect(fleet.b_url, autocommit=True) as conn:
        install_broken(conn, CLAIM, ROOM, "v_room := p_limit;")
    fleet.enqueue(100, 150)
    worker = fleet.worker()
    wait_for(lambda: fleet.finished(fleet.b_url, fa.QUEUE_B) == 150
             and fleet.finished(fleet.a_url, fa.QUEUE_A) == 100, "every job", worker)
    assert worker.terminate() == 0, worker.output()[-6000:]
    print(check_limit(fleet.a(), fa.MAX_A, "A"))
    with pytest.raises(AssertionError, match="above its limit 3") as failure:
        check_limit(fleet.b(), fa.MAX_B, "B")
    print(f"broken claim in B: {failure.value}".splitlines()[0])


# ---- (c): started while B is down ---------------------------------------------------------------


def test_a_worker_started_while_b_is_down_runs_a_and_then_b(fleet: Fleet) -> None:
    fleet.enqueue(200, 150)
    fleet.cluster.stop("fast")
    worker = fleet.worker()
    wait_for(lambda: fleet.finished(fleet.a_url, fa.QUEUE_A) == 200, "A's jobs, B down", worker)
    wait_for(lambda: "database b is unreachable" in worker.output(),
             "the worker to say B is unreachable", worker)
    assert "its queues (dbf-b) wait" in worker.output(), worker.output()[-6000:]
    started_at = time.time()
    fleet.cluster.start()
    wait_for(lambda: fleet.finished(fleet.b_url, fa.QUEUE_B) == 150,
             "B's jobs once B is started", worker)
    assert worker.proc.poll() is None, "the worker exited"
    code = worker.terminate()
    assert code == 0, worker.output()[-6000:]
    a, b = fleet.a(), fleet.b()
    check_complete(a, 200, "A")
    check_complete(b, 150, "B")
    assert max(r.finish for r in a.runs) < started_at, "A's jobs waited for B"
    assert min(r.start for r in b.runs) > started_at
    # The same worker: its process group, its top process never restarted.
    assert {r.pgid for r in a.runs + b.runs} == {worker.pid}
    print(check_limit(a, fa.MAX_A, "A"))
    print(check_limit(b, fa.MAX_B, "B"))
    print(f"B's first start {min(r.start for r in b.runs) - started_at:.2f} s after B was "
          "started")


# ---- (d): SIGTERM drains both -----------------------------------------------------------------


ACTIVE = "SELECT id FROM workhorse.jobs WHERE queue = %s AND status = 'active'"


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_sigterm_to_the_top_process_drains_both_databases(fleet: Fleet, stop: str) -> None:
    """SIGTERM: the jobs running in both databases finish, nothing more starts, exit 0.
    SIGKILL to the whole group is the broken variant: the checker finds them left active."""
    fleet.enqueue(20, 20)
    worker = fleet.worker(env={"DBF_WORK": "1.5"})
    wait_for(lambda: len(query(fleet.a_url, ACTIVE, fa.QUEUE_A)) == fa.MAX_A
             and len(query(fleet.b_url, ACTIVE, fa.QUEUE_B)) == fa.MAX_B,
             "both queues full", worker)
    signaled = time.time()
    if stop == "SIGTERM":
        code = worker.terminate()
    else:
        worker.kill()
        code = -9
    took = time.time() - signaled
    running_a = {r[0] for r in query(fleet.a_url, "SELECT id FROM workhorse.jobs WHERE "
                                     "queue = %s AND started_at IS NOT NULL", fa.QUEUE_A)}
    running_b = {r[0] for r in query(fleet.b_url, "SELECT id FROM workhorse.jobs WHERE "
                                     "queue = %s AND started_at IS NOT NULL", fa.QUEUE_B)}
    a, b = fleet.a(), fleet.b()
    if stop == "SIGKILL":
        with pytest.raises(AssertionError, match="were not drained"):
            check_drained(a, running_a, signaled, "A")
        with pytest.raises(AssertionError, match="were not drained"):
            check_drained(b, running_b, signaled, "B")
        return
    assert code == 0, worker.output()[-6000:]
    assert (len(running_a), len(running_b)) == (fa.MAX_A, fa.MAX_B), (running_a, running_b)
    print(check_drained(a, running_a, signaled, "A"))
    print(check_drained(b, running_b, signaled, "B"))
    assert took < 15.0, f"the drain took {took:.1f} s"
    left = {db: scalar(url, "SELECT count(*) FROM workhorse.jobs WHERE status = 'ready'")
            for db, url in fleet.databases.items()}
    assert left == {"default": 20 - fa.MAX_A, "b": 20 - fa.MAX_B}, left
    print(f"drained in {took:.2f} s")
