"""Scale curves: one governed queue's throughput as the fleet grows (issue #25, item 3).

    .venv/bin/python benchmarks/bench_scale.py [--database-url URL] [--supervisors 1,2,4,8]
        [--limits 64,256] [--ungoverned-places 256] [--jobs N] [--quick] [--repeat R]
        [--quiet-wait S] [--breakdown] [--py-spy-seconds S] [--keep-db] [--format rich|plain]

What runs. For each limit L of `--limits` and each N of `--supervisors`, N separate supervisor
processes (`python -m workhorse worker _fleet_app:app --queues Q --slots 1 --concurrency C`, as
bench_fleet's workers start) drain one queue governed by `max_active=L` of 20 ms async jobs. The N
supervisors share twice as many places as the budget allows, C = 2*L/N, so the budget, not the
places, is what bounds them. Beside it, the ungoverned curve: the same N supervisors with 256
places in all (C = 256/N) on a queue with no policy. The backlog is max(12,800, 100*places) jobs
(`--jobs` sets it for every run; `--quick` halves it), enough for a steady state well past the
ramp-up.

How a run goes. The queue's tables are truncated, its policy synced, the backlog filled with
`Queue.enqueue_many`, VACUUM ANALYZEd and checkpointed, and the queue is paused. Then the N
supervisors start; once each has forked its slot and the database's connection count has been
steady for a second, the queue is resumed (which wakes every worker at once). So every supervisor
takes part from the first job on: start-up on a 2-core machine takes seconds, and an unpaused
queue would be drained partly by the first supervisors up.

What each figure means.
- jobs/s: jobs / (last finished_at - first started_at), from the jobs' own rows.
- utilization: jobs/s over the ideal, every place of the budget running a 20 ms handler all the
  time: L / 0.02 s for a governed run, 256 / 0.02 s for the ungoverned one.
- claims: calls of the claim SQL functions (the functions of schema workhorse whose name starts
  with "claim" that the product's statement files call, found in pg_proc and sql/statements/, so
  a redesign's new claim functions are counted too, and a claim that calls another claim function
  inside is counted once), read from
  pg_stat_user_functions before the supervisors start and after they have exited and their
  backends are gone (a backend flushes its function counters when it exits). The scratch database
  is set to `track_functions = 'pl'` (ALTER DATABASE) for this. Empty claims count: a claim that
  found no room is a claim paid for. The count includes the few claims of the paused start (about
  one per slot) and of the idle end (workers wait for a notification then, not poll).
- claims/s: claims / the drain's span; jobs/claim: jobs / claims.
- ms/claim: the claim functions' total_time / calls in pg_stat_user_functions: time inside the
  function, lock waits included, the client's round trip and the commit not.
- lock wait per claim (Little's law): a thread samples pg_stat_activity every ~5 ms during the
  drain and counts the scratch database's backends waiting on an advisory lock (wait_event_type
  'Lock', wait_event 'advisory'), which is the admission lock a governed claim takes. The mean
  number of waiters L over the samples taken inside the drain's span, times that span, is the
  total time spent waiting (Little's law: L = arrival rate x mean wait, so the summed wait is
  L x T); divided by the claims, it is the mean wait per claim. A sample is a snapshot, so waits
  much shorter than 5 ms are seen in proportion to their share of time, not one by one; the
  sampler's own queries are one more backend on the server.
- jobs/admitting claim and empty claims: counted by the workers, since pg_stat_user_functions
  counts a function's calls but not what each returned (and pg_stat_statements, when loaded,
  counts the claim statement's calls and rows, not its empty calls). The workers run with
  WORKHORSE_BENCH_CLAIM_COUNTS set, and _fleet_app then wraps psycopg's cursors: each statement
  that calls a workhorse.claim* function is a claim, and the rows it returned with an id and no
  status (a success row has a status, a marker row no id) are the jobs it admitted. Each process
  keeps (claims, claims that admitted a job, jobs) in a file of its own, rewritten after every
  claim (one pwrite, a few µs, in the measured code). Empty claims = claims - admitting claims.
  The table notes it when the workers' claim count differs from pg_stat_user_functions'.
- lock hold/claim (Little's law again): the same ~5 ms sampler counts the grants of the queue's
  admission lock in pg_locks (the advisory lock whose key the claim computes with the schema's
  admission-lock-id function: classid = its high 32 bits, objid = its low 32 bits, objsubid =
  1; exclusive for a governed queue, shared by the ungoverned claims); the mean number of
  holders times the span, over the claims, is the mean hold per claim. The lock is a
  transaction lock, so the hold runs from the grant to the claim's commit (the commit's WAL
  flush included), which is why it may exceed "ms/claim in the function" minus the wait (also
  printed by --breakdown): the function's time ends before the commit. Another statement
  holding the same lock (a policy change) would count too; none runs during a drain.
  --breakdown also says what part of the hold its holders spent waiting for the WAL (their
  pg_stat_activity.wait_event WALSync, WALWrite or WALInsert): a synchronous commit's flush
  under the lock, which the worker's asynchronous governed claims leave outside it (their
  commit barrier flushes after the lock is released).
- PostgreSQL CPU/job, workhorse CPU/job, cores busy: a thread reads /proc/<pid>/stat (utime +
  stime, in clock ticks) every 50 ms of (a) the postmaster and each of its children and (b) each
  supervisor and its descendants (its forked slot), from the queue's resume to the drain's end,
  and sums the growth of each process's ticks into cumulative series; the figures are those
  series' growth between the first job's start and the last job's end (interpolated between
  samples), over the jobs (µs) or over the span (cores). The postmaster is found as the parent
  of this benchmark's own backend (pg_backend_pid()), so the server must run on this host; when
  it does not, the PostgreSQL figure is "-". The server's side counts the scratch database's
  backends and the server's background processes (checkpointer, WAL writer, ...: they serve
  every database), not the backends of other databases (kept apart: --breakdown prints their
  cores) nor the benchmark's own connections (application_name workhorse-bench-monitor: the
  samplers and the drain's polling). A process born during the window counts from 0; one that
  exits between two samples loses its last <= 50 ms. "cores busy" is PostgreSQL + workhorse;
  --breakdown also prints the whole machine's busy cores (/proc/stat), whoever used them.
- handler peak: the largest number of handlers running at once, rebuilt from each timed
  handler's [start, end] result (bench_fleet's check). Above max_active prints VIOLATION.

--breakdown prints, under each point: the CPU figures above with the machine's and other
databases' cores; the workers' claim counts beside pg_stat_user_functions'; the lock wait and
hold per claim; the top 8 functions of the scratch database by self time in
pg_stat_user_functions (the growth over the point, track_functions = 'pl'); when the server
preloads pg_stat_statements (CREATE EXTENSION works only then; otherwise a line says it is
skipped), its top 8 statements of the scratch database by total time, with
pg_stat_statements.track = 'all' set on the database so the statements inside the claim
functions count too; and the top 10 Python frames of every slot together by own samples while
holding the GIL (the innermost frame of each sampled stack: the slots' Python CPU, not their
waits), from `py-spy record --format raw --function --nonblocking --gil` at 100 Hz of each slot
for --py-spy-seconds from the queue's resume
(`pip install py-spy`; skipped with a line when it is not there). py-spy runs beside the workers
on the same cores, so the point it profiles pays for it. At the end, a table "for the docs"
repeats the largest fleet's rows (e.g. 8 supervisors at max_active=256 beside the ungoverned
queue) with the figures issue #40 quotes.

`--databases 1,2` runs bench_databases.py instead (several databases, issue #44: the same fleet
draining the same backlog from one server, then split over it and a second server the benchmark
starts; its docstring has the method), with this command line handed over whole.

Separate hosts (network namespaces) are not built: every supervisor runs on this host and reaches
the server over loopback.

The code measured is whatever `import workhorse` resolves to, in this process and in the worker
subprocesses (cwd benchmarks/), so `PYTHONPATH=/other/tree` measures another tree; the setup facts
print which file and commit.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
import _fleet_app as fa
import bench_fleet as bf
import psycopg
from psycopg import sql

from workhorse import Queue, _sql

HANDLER = 0.02
UNGOVERNED_PLACES = 256


@dataclass(frozen=True)
class Case:
    """One point of a curve: `limit` None is the ungoverned curve, with `places` places in all."""

    limit: int | None
    places: int
    supervisors: int
    jobs: int

    @property
    def concurrency(self) -> int:
        return max(1, self.places // self.supervisors)

    @property
    def curve(self) -> str:
        return f"max_active={self.limit}" if self.limit is not None else \
            f"ungoverned, {self.places} places"

    @property
    def ideal(self) -> float:
        return (self.limit if self.limit is not None else self.places) / HANDLER

    @property
    def queue(self) -> str:
        return f"scale-{self.limit or 'free'}"


@dataclass
class Result:
    case: Case
    run: int
    rate: float
    span: float
    succeeded: int
    max_attempts: int
    claims: int
    claim_ms: float
    waiters_mean: float
    waiters_max: int
    samples: int
    handler_peak: int
    load: str
    holders_mean: float = math.nan
    # Of the holders, those waiting for the WAL (their commit's flush, or a WAL write): the part
    # of the hold a synchronous commit would spend under the lock (issue #40, eleventh reading).
    flushing_mean: float = math.nan
    cpu: c.CpuWindow | None = None
    worker_claims: tuple[int, int, int] | None = None  # claims, admitting, jobs (workers' count)
    # Of the claims that admitted nothing: only recorded successes, carried successes, bare.
    empty_kinds: tuple[int, int, int] | None = None
    top_functions: list[tuple[str, int, float, float]] = field(default_factory=list)
    top_statements: list[tuple[str, int, float, float]] = field(default_factory=list)
    # slots profiled, top frames, samples, why none
    frames: tuple[int, list[tuple[str, int]], int, str] | None = None
    # --window: the jobs finished in the window that `rate` and `cpu` were measured over
    window_jobs: int | None = None

    @property
    def wait_per_claim_ms(self) -> float:
        return self.waiters_mean * self.span / self.claims * 1000 if self.claims else math.nan

    @property
    def hold_per_claim_ms(self) -> float:
        return self.holders_mean * self.span / self.claims * 1000 if self.claims else math.nan

    def per_job_us(self, seconds: float) -> float:
        jobs = self.succeeded if self.window_jobs is None else self.window_jobs
        return seconds / jobs * 1e6 if jobs else math.nan


class LockSampler:
    """Counts, every ~5 ms, the scratch database's backends waiting on an advisory lock and the
    advisory locks granted there; keeps (server clock, waiters, holders) so the samples inside
    the drain's span can be picked afterwards."""

    def __init__(self, url: str, lock_key: int | None, interval: float = 0.005) -> None:
        self.url = url
        self.lock_key = lock_key
        self.interval = interval
        self.samples: list[tuple[float, int, int, int]] = []
        self.pid = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        # The server's clock, the one started_at and finished_at are written with.
        # Waiters: backends waiting on an advisory lock; holders: grants of the queue's
        # admission lock (a bigint advisory lock: classid its high 32 bits, objid its low ones,
        # objsubid 1), exclusive for a governed queue, shared otherwise; every advisory lock
        # granted in this database when the key is unknown.
        key = self.lock_key
        query = (
            "SELECT extract(epoch FROM clock_timestamp())::float8, (SELECT count(*) "
            "  FROM pg_stat_activity WHERE datname = current_database() "
            "  AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' "
            "  AND wait_event = 'advisory'), "
            "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "  AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "  AND (%(any)s OR (objsubid = 1 AND classid = %(high)s::bigint::oid "
            "                   AND objid = %(low)s::bigint::oid))), "
            "(SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "  WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
            "  (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "  AND (%(any)s OR (l.objsubid = 1 AND l.classid = %(high)s::bigint::oid "
            "                   AND l.objid = %(low)s::bigint::oid)) "
            "  AND a.wait_event IN ('WALSync', 'WALWrite', 'WALInsert'))"
        )
        params = {"any": key is None, "high": ((key or 0) >> 32) & 0xFFFFFFFF,
                  "low": (key or 0) & 0xFFFFFFFF}
        with c.monitor(self.url) as conn:
            while not self._stop.is_set():
                # A fresh snapshot of the activity view for every sample, not the cached one.
                conn.execute("SELECT pg_stat_clear_snapshot()")
                row = conn.execute(query, params).fetchone()
                assert row is not None
                self.samples.append((float(row[0]), int(row[1]), int(row[2]), int(row[3])))
                self._stop.wait(self.interval)

    def within(self, start: float, end: float) -> list[tuple[int, int, int]]:
        """(waiters, holders, holders waiting for the WAL) of the samples inside [start, end]."""
        return [(n, h, f) for t, n, h, f in self.samples if start <= t <= end]


def claim_functions(conn: psycopg.Connection[Any]) -> list[str]:
    """The claim functions the product's statements call: the functions of schema workhorse whose
    name starts with "claim" that a statement file names. Only those, because a claim function
    that calls another (an old version kept for a path, say) would otherwise count one claim
    twice: pg_stat_user_functions counts nested calls too. All of them if no statement names one."""
    rows = conn.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'workhorse' AND p.proname LIKE 'claim%' ORDER BY 1"
    ).fetchall()
    every = [str(r[0]) for r in rows]
    called = "\n".join(
        text.decode("utf-8", "replace") for path, text in _sql.files().items()
        if path.startswith("statements/")
    )
    named = [name for name in every if re.search(rf"workhorse\.{name}\s*\(", called)]
    return named or every


def function_stats(conn: psycopg.Connection[Any], names: Sequence[str]) -> tuple[int, float]:
    """(calls, total ms) of `names` in pg_stat_user_functions, from a fresh snapshot."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT COALESCE(sum(calls), 0)::bigint, COALESCE(sum(total_time), 0)::float8 "
        "FROM pg_stat_user_functions WHERE schemaname = 'workhorse' AND funcname = ANY(%s)",
        (list(names),),
    ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def other_backends(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
        "AND application_name <> %s", (c.MONITOR_APP,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text()
            found.extend(int(x) for x in text.split())
    return found


def wait_ready(
    conn: psycopg.Connection[Any], procs: Sequence[bf.Worker], timeout: float = 180.0
) -> None:
    """Until every supervisor has forked its slot and the connection count has held for 1 s."""
    deadline = time.monotonic() + timeout
    steady_since: float | None = None
    last = -1
    while True:
        dead = [w for w in procs if w.process.poll() is not None]
        if dead or time.monotonic() > deadline:
            output = "\n".join(w.output()[-3000:] for w in dead or procs)
            raise SystemExit(f"supervisors did not come up:\n{output}")
        forked = all(children(w.process.pid) for w in procs)
        now = other_backends(conn)
        if forked and now >= len(procs) and now == last:
            if steady_since is None:
                steady_since = time.monotonic()
            elif time.monotonic() - steady_since >= 1.0:
                return
        else:
            steady_since = None
        last = now
        time.sleep(0.2)


def wait_gone(conn: psycopg.Connection[Any], timeout: float = 30.0) -> None:
    """Until the supervisors' backends have exited (and so flushed their function counters)."""
    deadline = time.monotonic() + timeout
    while other_backends(conn) and time.monotonic() < deadline:
        time.sleep(0.1)


@dataclass(frozen=True)
class Probes:
    """What this server and machine let the benchmark measure besides throughput."""

    postmaster: int | None  # None: the server is not on this host, its CPU is not measured
    statements: bool  # pg_stat_statements is readable in the scratch database
    breakdown: bool  # profile a slot with py-spy (when it is there) and print the breakdown
    py_spy_seconds: float = 3.0
    window: float = 0.0  # > 0: rate and CPU over this many seconds in the middle of the drain


def measure(
    url: str, case: Case, run: int, names: Sequence[str], gate: c.QuietGate, probes: Probes
) -> Result:
    policy = bf.Policy(case.limit) if case.limit is not None else None
    flags = ["--slots", "1", "--concurrency", str(case.concurrency)]
    with c.monitor(url) as conn, tempfile.TemporaryDirectory(prefix="bench_scale_") as counts:
        bf.reset(conn, case.queue, policy)
        bf.fill(conn, fa.SLEEP_ASYNC, case.queue, case.jobs, False, [HANDLER])
        q = Queue(conn)
        q.pause(case.queue)
        gate.wait()
        load = "loadavg {:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
        calls0, ms0 = function_stats(conn, names)
        functions0 = c.function_snapshot(conn)
        statements0 = c.statement_snapshot(conn) if probes.statements else {}
        env = {fa.CLAIM_COUNTS_ENV: counts}
        spies: list[c.PySpy] = []
        with bf.workers(url, case.queue, flags, case.supervisors, env) as procs:
            wait_ready(conn, procs)
            clock_offset = server_clock_offset(conn)
            cpu = c.CpuSampler(url, probes.postmaster, lambda: [w.process.pid for w in procs])
            with LockSampler(url, admission_lock_key(conn, case.queue)) as sampler, cpu:
                q.resume(case.queue)
                if probes.breakdown and c.py_spy_path() is not None:
                    # Every supervisor's slots, only while holding the GIL: where the workers'
                    # Python CPU goes (a single slot's wall-clock samples are mostly its waits).
                    spies = [c.PySpy(slot, probes.py_spy_seconds, gil=True)
                             for w in procs for slot in children(w.process.pid)]
                deadline = time.monotonic() + max(120.0, case.jobs / 100)
                progress: list[tuple[float, int]] = []  # (time.time(), jobs not yet finished)
                while True:
                    time.sleep(0.2)
                    left = conn.execute(
                        "SELECT count(*) FROM workhorse.jobs "
                        "WHERE status IN ('ready', 'active', 'scheduled')"
                    ).fetchone()[0]  # type: ignore[index]
                    progress.append((time.time(), left))
                    if left == 0:
                        break
                    dead = [w for w in procs if w.process.poll() is not None]
                    if dead or time.monotonic() > deadline:
                        output = "\n".join(w.output()[-3000:] for w in dead or procs)
                        raise SystemExit(
                            f"{case.queue}: a worker stopped or stalled ({left} left):\n{output}"
                        )
            frames = None
            if spies:
                top, samples, why = c.merged_frames(spies, 10)
                frames = (len(spies), top, samples, why)
        wait_gone(conn)
        worker_claims = fa.read_claim_counts(counts)
        empty_kinds = fa.read_empty_claim_kinds(counts)
        calls1, ms1 = function_stats(conn, names)
        top_functions = c.top_changes(functions0, c.function_snapshot(conn))
        top_statements = (c.top_changes(statements0, c.statement_snapshot(conn), by=1)
                          if probes.statements else [])
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
            "extract(epoch FROM min(started_at))::float8, "
            "extract(epoch FROM max(finished_at))::float8, max(attempts) "
            "FROM workhorse.jobs WHERE queue = %s",
            (case.queue,),
        ).fetchone()
        assert row is not None
        succeeded, first, last, attempts = int(row[0]), float(row[1]), float(row[2]), int(row[3])
        peak = bf.handler_overlap(conn, case.queue)
    span = last - first
    inside = sampler.within(first, last)
    claims = calls1 - calls0
    rate = succeeded / span if span > 0 else math.nan
    cpu_window = cpu.window(first - clock_offset, last - clock_offset)
    window = middle_window(progress, case.jobs, probes.window) if probes.window > 0 else None
    if window is not None:
        (start, end), rate = window[0], window[1] / (window[0][1] - window[0][0])
        cpu_window = cpu.window(start, end)
    return Result(
        case=case, run=run, rate=rate, span=span,
        succeeded=succeeded, max_attempts=attempts, claims=claims,
        claim_ms=(ms1 - ms0) / claims if claims else math.nan,
        waiters_mean=sum(n for n, _, _ in inside) / len(inside) if inside else math.nan,
        waiters_max=max((n for n, _, _ in inside), default=0), samples=len(inside),
        handler_peak=peak.total, load=load,
        holders_mean=sum(h for _, h, _ in inside) / len(inside) if inside else math.nan,
        flushing_mean=sum(f for _, _, f in inside) / len(inside) if inside else math.nan,
        cpu=cpu_window, worker_claims=worker_claims, empty_kinds=empty_kinds,
        top_functions=top_functions, top_statements=top_statements, frames=frames,
        window_jobs=window[1] if window is not None else None,
    )


def middle_window(
    progress: Sequence[tuple[float, int]], jobs: int, seconds: float
) -> tuple[tuple[float, float], int] | None:
    """((start, end), jobs finished between them): about `seconds` from the first poll that
    found a quarter of the backlog finished, ending at the last poll within them that still
    found jobs left, so that neither the fleet's start nor the drain's tail is in it. None when
    the drain was too short for a window of at least a second."""
    start = next((i for i, (_, left) in enumerate(progress) if jobs - left >= jobs / 4), None)
    if start is None:
        return None
    t0, left0 = progress[start]
    inside = [(t, left) for t, left in progress[start + 1:] if t <= t0 + seconds and left > 0]
    if not inside or inside[-1][0] - t0 < 1.0:
        return None
    t1, left1 = inside[-1]
    return (t0, t1), left0 - left1


def admission_lock_key(conn: psycopg.Connection[Any], queue: str) -> int | None:
    """The queue's admission lock, as the claim computes it (None when that function is gone)."""
    try:
        name = _sql.function_name("_admission_lock_id")
        row = conn.execute(sql.SQL("SELECT workhorse.{}(%s)").format(sql.Identifier(name)),
                           (queue,)).fetchone()
    except (LookupError, psycopg.Error):
        return None
    return int(row[0]) if row is not None else None


def server_clock_offset(conn: psycopg.Connection[Any]) -> float:
    """The server's clock minus this host's (0 on one host, up to the round trip's error)."""
    before = time.time()
    server = conn.execute(
        "SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]  # type: ignore[index]
    after = time.time()
    return float(server) - (before + after) / 2


def parse_ints(value: str, what: str) -> list[int]:
    try:
        numbers = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"{what}: a comma-separated list of integers, not {value!r}") from None
    if not numbers or min(numbers) < 1:
        raise SystemExit(f"{what}: at least one positive integer")
    return numbers


def backlog(places: int, jobs: int | None, quick: bool) -> int:
    n = jobs if jobs is not None else max(12_800, 100 * places)
    return n // 2 if quick else n


def us(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"


def cpu_cells(r: Result) -> tuple[str, str, str]:
    """PostgreSQL µs/job, workhorse µs/job, cores busy (PostgreSQL + workhorse = both)."""
    cpu = r.cpu
    if cpu is None:
        return "-", "-", "-"
    server = us(r.per_job_us(cpu.server))
    cores = (f"{cpu.cores(cpu.server):.2f} + {cpu.cores(cpu.workers):.2f} = "
             f"{cpu.cores(cpu.server + cpu.workers):.2f}")
    return server, us(r.per_job_us(cpu.workers)), cores


def claim_cells(r: Result) -> tuple[str, str]:
    """(jobs per claim that admitted any, claims that admitted nothing), the workers' count."""
    if r.worker_claims is None:
        return "-", "-"
    claims, admitting, jobs = r.worker_claims
    return (f"{jobs / admitting:.1f}" if admitting else "-", f"{claims - admitting:,}")


def _empty_kinds(r: Result) -> str:
    if r.empty_kinds is None:
        return ""
    record_only, riding, bare = r.empty_kinds
    return (f" ({record_only:,} asked for none, only recording successes; {riding:,} carried "
            f"successes; {bare:,} bare)")


@dataclass
class Report:
    printer: c.Printer
    breakdown: bool = False
    results: list[Result] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def add(self, result: Result) -> None:
        self.results.append(result)
        r = result
        limit = r.case.limit
        if limit is not None and r.handler_peak > limit:
            message = (f"VIOLATION: {r.case.curve}, {r.case.supervisors} supervisors, run "
                       f"{r.run}: {r.handler_peak} handlers at once > {limit}")
            self.violations.append(message)
            self.printer.line("!" * 80)
            self.printer.line(message)
            self.printer.line("!" * 80)
        server, workers, cores = cpu_cells(r)
        self.printer.line(
            f"{r.case.curve}, {r.case.supervisors} x -c {r.case.concurrency}: "
            f"{c.rate(r.rate)} jobs/s ({r.rate / r.case.ideal:.0%}), {r.claims} claims, "
            f"lock waiters {r.waiters_mean:.2f}; CPU/job PostgreSQL {server} us, workhorse "
            f"{workers} us; cores {cores}; {r.load}"
        )
        if self.breakdown:
            for line in breakdown(r):
                self.printer.line(f"  {line}")

    def table(self) -> c.Table:
        table = c.Table(
            "scale curves: 20 ms async jobs, N supervisors x --slots 1",
            ["curve", "supervisors x -c", "run", "jobs", "jobs/s", "utilization", "claims/s",
             "jobs/claim", "jobs/admitting claim", "empty claims", "ms/claim in the function",
             "lock waiters (mean / max)", "lock wait/claim ms", "lock hold/claim ms",
             "PostgreSQL CPU/job us", "workhorse CPU/job us", "cores busy PG + wh",
             "handler peak", "load before"],
        )
        for r in self.results:
            peak = f"{r.handler_peak}" + (f" <= {r.case.limit}" if r.case.limit else "")
            per_admitting, empty = claim_cells(r)
            server, workers, cores = cpu_cells(r)
            table.add(
                r.case.curve, f"{r.case.supervisors} x {r.case.concurrency}", r.run,
                f"{r.succeeded:,}" + ("" if r.succeeded == r.case.jobs else f" of {r.case.jobs:,}"),
                c.rate(r.rate), f"{r.rate / r.case.ideal:.0%} of {c.rate(r.case.ideal)}",
                f"{r.claims / r.span:,.0f}" if r.span > 0 else "-",
                f"{r.succeeded / r.claims:.1f}" if r.claims else "-", per_admitting, empty,
                f"{r.claim_ms:.2f}", f"{r.waiters_mean:.2f} / {r.waiters_max}",
                f"{r.wait_per_claim_ms:.2f}", f"{r.hold_per_claim_ms:.2f}", server, workers,
                cores, peak, r.load.removeprefix("loadavg "),
            )
            if r.max_attempts > 1:
                table.notes.append(f"{r.case.curve}, {r.case.supervisors} supervisors, run "
                                   f"{r.run}: max attempts {r.max_attempts}")
            if r.worker_claims is not None and r.worker_claims[0] != r.claims:
                table.notes.append(
                    f"{r.case.curve}, {r.case.supervisors} supervisors, run {r.run}: the "
                    f"workers counted {r.worker_claims[0]:,} claims, pg_stat_user_functions "
                    f"{r.claims:,} (the empty-claim count is the workers')")
        return table

    def docs_table(self) -> c.Table:
        """The largest fleet's rows, in the shape the docs quote (issue #40's table)."""
        most = max(r.case.supervisors for r in self.results)
        table = c.Table(
            f"for the docs: {most} supervisors",
            ["curve", "supervisors x -c", "jobs/s", "PostgreSQL CPU/job", "workhorse CPU/job",
             "cores busy", "claims/job", "jobs/admitting claim", "empty claims",
             "lock wait/claim", "lock hold/claim"],
        )
        for r in self.results:
            if r.case.supervisors != most:
                continue
            server, workers, cores = cpu_cells(r)
            per_admitting, empty = claim_cells(r)
            table.add(
                f"`{r.case.curve}`", f"{r.case.supervisors} \u00d7 {r.case.concurrency}",
                c.rate(r.rate), f"{server} µs", f"{workers} µs", cores.split(" = ")[-1],
                f"{r.claims / r.succeeded:.3f}" if r.succeeded else "-", per_admitting, empty,
                f"{r.wait_per_claim_ms:.2f} ms", f"{r.hold_per_claim_ms:.2f} ms",
            )
        return table


def breakdown(r: Result) -> list[str]:
    """Where a point's time went: CPU by side, claims, the admission lock, the top functions
    and statements, and the top Python frames of one slot."""
    lines = []
    cpu = r.cpu
    if cpu is not None:
        server = (f"PostgreSQL {us(r.per_job_us(cpu.server))} us/job "
                  f"({cpu.cores(cpu.server):.2f} cores)" if not math.isnan(cpu.server)
                  else "PostgreSQL not measured (the server is not on this host)")
        lines.append(
            f"CPU over the drain's {cpu.seconds:.2f} s: {server}, workhorse "
            f"{us(r.per_job_us(cpu.workers))} us/job ({cpu.cores(cpu.workers):.2f} cores); the "
            f"whole machine {cpu.cores(cpu.machine):.2f} cores busy, other databases' backends "
            f"{cpu.cores(cpu.other_databases):.2f}")
    if r.worker_claims is not None:
        claims, admitting, jobs = r.worker_claims
        lines.append(
            f"claims (the workers' count): {claims:,}, {admitting:,} admitted {jobs:,} jobs, "
            f"{claims - admitting:,} admitted nothing{_empty_kinds(r)}; pg_stat_user_functions: "
            f"{r.claims:,} "
            f"claims ({r.claims / max(r.succeeded, 1):.3f} per job), {r.claim_ms:.2f} ms each "
            "in the function")
    lines.append(
        f"admission lock per claim: wait {r.wait_per_claim_ms:.2f} ms, hold "
        f"{r.hold_per_claim_ms:.2f} ms (sampled holders; ms in the function - wait = "
        f"{r.claim_ms - r.wait_per_claim_ms:.2f} ms), of it waiting for the WAL "
        f"{r.flushing_mean / r.holders_mean if r.holders_mean else math.nan:.0%}; "
        f"{r.samples} samples")
    if r.top_functions:
        lines.append("top functions by self time (calls, total ms, self ms):")
        lines.extend(f"  {name}: {calls:,}, {total:,.0f}, {own:,.0f}"
                     for name, calls, total, own in r.top_functions)
    if r.top_statements:
        lines.append("top statements by total time (pg_stat_statements; calls, total ms):")
        lines.extend(f"  {calls:,}, {total:,.0f}: {text}"
                     for text, calls, total, _ in r.top_statements)
    if r.frames is not None:
        slots, top, samples, why = r.frames
        if top:
            lines.append(f"top Python frames of the {slots} slots by own samples holding the GIL "
                         f"(their CPU; {samples} in all):")
            lines.extend(f"  {n:5d} {n / samples:4.0%} {frame}" for frame, n in top)
        else:
            lines.append(f"py-spy of the {slots} slots: {why}")
    return lines


def cases(limits: Sequence[int], places: int, supervisors: Sequence[int], jobs: int | None,
          quick: bool) -> Iterator[Case]:
    for limit in limits:
        for n in supervisors:
            yield Case(limit, 2 * limit, n, backlog(limit, jobs, quick))
    if places:
        for n in supervisors:
            yield Case(None, places, n, backlog(places, jobs, quick))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_scale")
    parser.add_argument("--supervisors", default="1,2,4,8", metavar="N[,N]",
                        help="supervisor counts (default %(default)s)")
    parser.add_argument("--limits", default="64,256", metavar="L[,L]",
                        help="max_active of the governed curves (default %(default)s)")
    parser.add_argument("--ungoverned-places", type=int, default=UNGOVERNED_PLACES, metavar="P",
                        help="places of the ungoverned curve; 0 skips it (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="backlog of every run (default max(12,800, 100 x places))")
    parser.add_argument("--quick", action="store_true", help="half the backlog")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each point; each is its own row (default %(default)s)")
    parser.add_argument("--quiet-wait", type=float, default=3.0, metavar="S",
                        help="wait up to S seconds before each run for a quiet machine "
                        "(default %(default)s)")
    parser.add_argument("--breakdown", action="store_true",
                        help="per point: where the time went (CPU by side, claims, the lock, "
                        "top functions and statements, the slots' top Python frames by py-spy)")
    parser.add_argument("--py-spy-seconds", type=float, default=3.0, metavar="S",
                        help="with --breakdown: seconds of py-spy sampling from the drain's "
                        "start (default %(default)s)")
    parser.add_argument("--window", type=float, default=0.0, metavar="S",
                        help="jobs/s and CPU per job over S seconds from a quarter of the drain "
                        "(its start and end left out: the steady state, for A/B comparisons); "
                        "claims and the lock stay over the whole drain (default: off)")
    parser.add_argument("--databases", default=None, metavar="1,2",
                        help="instead of the scale curves: the same fleet drains the same "
                        "backlog from one server and split over two (bench_databases.py, which "
                        "takes this whole command line: its own defaults and flags; issue #44)")
    argv = sys.argv[1:]
    if any(arg == "--databases" or arg.startswith("--databases=") for arg in argv) \
            and not any(arg in ("-h", "--help") for arg in argv):
        import bench_databases

        raise SystemExit(bench_databases.main(argv))
    args = parser.parse_args(argv)
    supervisors = parse_ints(args.supervisors, "--supervisors")
    limits = parse_ints(args.limits, "--limits")
    planned = list(cases(limits, args.ungoverned_places, supervisors, args.jobs, args.quick))

    server_url, source = c.resolve_server_url(args.database_url)
    printer = c.Printer(args.format)
    printer.heading(f"scale curves{' (quick)' if args.quick else ''} ({c.stamp()})")
    with c.scratch_database(server_url, args.db_name, args.keep_db) as url:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} SET track_functions = 'pl'").format(
                sql.Identifier(args.db_name)))
        with psycopg.connect(url, autocommit=True) as conn:
            why_no_statements = c.statements_available(conn)
            postmaster = c.postmaster_pid(conn)
        if why_no_statements is None:
            # Nested statements too (the claim function's own), for the workers' sessions.
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(sql.SQL("ALTER DATABASE {} SET pg_stat_statements.track = 'all'")
                              .format(sql.Identifier(args.db_name)))
        with psycopg.connect(url, autocommit=True) as conn:
            facts = c.server_facts(conn)
            names = claim_functions(conn)
            tracked = conn.execute("SHOW track_functions").fetchone()[0]  # type: ignore[index]
        facts["server url"] = f"{c.describe_url(url)} ({source})"
        facts.update(bf.code_facts(url))
        facts["claim functions counted"] = (
            f"{', '.join(names) or 'none found'} (the product's newest claim: "
            f"{_sql.function_name('claim')}); track_functions = {tracked}"
        )
        facts["runs"] = (
            f"limits {', '.join(map(str, limits))}; ungoverned {args.ungoverned_places or 'no'}; "
            f"supervisors {', '.join(map(str, supervisors))}; {len(planned)} points x "
            f"{args.repeat}"
        )
        facts["CPU measured"] = (
            f"/proc/<pid>/stat of the postmaster (pid {postmaster}) and its children, and of "
            "each supervisor's process tree" if postmaster is not None else
            "the workers' only: the server is not on this host")
        facts["pg_stat_statements"] = (
            "top 8 statements per point, track = all" if why_no_statements is None
            else f"skipped: {why_no_statements}")
        spy = c.py_spy_path()
        facts["py-spy"] = (
            (f"{spy}: the slots' top 10 frames holding the GIL for {args.py_spy_seconds:g} s "
             "per point" if spy
             else "skipped: py-spy is not installed (pip install py-spy)")
            if args.breakdown else "off (--breakdown)")
        printer.facts("setup", facts)
        if args.breakdown:
            for key in ("pg_stat_statements", "py-spy"):
                if facts[key].startswith("skipped"):
                    printer.line(f"{key} {facts[key]}")
        probes = Probes(postmaster, why_no_statements is None, args.breakdown,
                        args.py_spy_seconds, args.window)
        report = Report(printer, args.breakdown)
        gate = c.QuietGate(args.quiet_wait)
        started = time.monotonic()
        for run in range(1, max(1, args.repeat) + 1):
            for case in planned:
                report.add(measure(url, case, run, names, gate, probes))
        table = report.table()
        table.notes.append(gate.summary())
        with psycopg.connect(url, autocommit=True) as conn:
            table.notes.append(f"machine load at the end: {c.machine_load(conn)}")
        table.notes.append(f"total time {time.monotonic() - started:.0f} s")
        table.notes.extend(report.violations or [
            "budget: no handler-recorded overlap exceeded its max_active"])
        printer.table(table)
        printer.table(report.docs_table())


if __name__ == "__main__":
    main()
