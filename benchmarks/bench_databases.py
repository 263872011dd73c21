"""Several databases (issue #44, item 4): the same fleet drains the same backlog from one
PostgreSQL server, then split over two servers on this machine.

    .venv/bin/python benchmarks/bench_scale.py --databases 1,2 [--database-url URL]
        [--supervisors 1,2] [--slots 1] [--limits 256] [--jobs N] [--quick] [--repeat R]
        [--no-equal-slots] [--log-level info] [--quiet-wait S] [--keep-db] [--format rich|plain]

(`bench_scale.py --databases ...` hands its whole command line to this module, which can also be
run by itself with the same flags.)

The two servers. The first is `--database-url`'s (default: as the other benchmarks choose it), with
a scratch database `--db-name` (default wh_bench_databases) made fresh and dropped at the end.
The second is a private cluster this benchmark initdb's into a temporary directory with the
machine's newest server binaries (_databases_server.py; as root it runs as `postgres`), given the
first server's settings that bear on a drain (fsync, synchronous_commit, full_page_writes, the
WAL's, shared_buffers, work_mem, max_connections, autovacuum, checkpoints, JIT: the setup table
prints both servers' values side by side), listening on 127.0.0.1 like the first, and stopped
and removed at the end. Its data directory is under /tmp, on whatever disk that is.

The fleet. N worker commands (each of `--supervisors`), every one
`python -m workhorse worker _databases_app:app --queues Q1[,Q2] --slots S --concurrency C`, as
bench_scale starts its supervisors, with WORKHORSE_DATABASES="default=<first>,two=<second>" (the
app places Q2 in `two`). With one database the command serves Q1 only and is one supervisor of S
slots. With two it serves Q1 and Q2, and so (docs/design.md "Several databases") its process
forks one database supervisor a database, each with its own S slots: the same command, twice the
slot processes. That is what the issue's "same fleet" measures. To tell the second database from
the second set of slots, each point also runs one database with `--slots 2S` (the two-database
run's slot count), unless `--no-equal-slots`.

The backlogs. (a) No-op async jobs on ungoverned queues (the issue's case): C = 256/N places a
command (bench_scale's ungoverned curve), a backlog of 60,000 by default. (b) For each L of
`--limits` (0: none), bench_scale's governed case: 20 ms async jobs, C = 2L/N, max(12,800,
100 x 2L) jobs; with one database its queue has max_active=L, with two each queue has
max_active=L/2, so that the budget in all (and the ideal, L / 20 ms) is the same. `--jobs` sets
every backlog, `--quick` halves them. With two databases, half the backlog is on each.

A run. The queues' tables are truncated, the backlog enqueued (`Queue.enqueue_many`), VACUUM
ANALYZEd and checkpointed on each database, and the queues paused. After the quiet gate
(bench_scale's: up to `--quiet-wait` s for the machine's CPU use to drop to 30%), the load average
is read and the N commands start; once every one has forked all its processes and each server's
count of the fleet's connections has held for a second, the queues are resumed and the drain
polled every 0.2 s. Each point runs `--repeat` times (default 2), the rounds alternating one and
two databases (the second round in reverse order).

The figures.
- jobs/s: all jobs / (the last finished_at - the first started_at), over both databases (one
  host: both servers' clocks are this machine's).
- PostgreSQL CPU/job, by server and summed: bench_scale's /proc/<pid>/stat sampler (every 50 ms,
  utime + stime), one a server, each finding its postmaster as the parent of the benchmark's own
  backend there, and counting the postmaster and its children: the scratch database's backends and
  the server's background processes (checkpointer, WAL writer, ...), not other databases'
  backends (other people's tests on a shared server, reported apart) nor the benchmark's own
  connections. Other PostgreSQL servers on the machine are not counted: only the two
  postmasters' trees are. The growth between the first job's start and the last job's end, over
  the jobs. The second server counts in the one-database runs too (it idles then).
- workhorse CPU/job: every process of the N commands' trees (top process, database supervisors,
  slots), the same way.
- cores busy: PostgreSQL (both servers) + workhorse, over the drain's span. "machine" is every
  CPU of the machine from /proc/stat over the same span (iowait counted busy), and "others" is
  the machine minus this run's processes: other people's work during the run, the benchmark's
  own polling and the other databases' backends.
- WAL syncs/s: pg_stat_wal's wal_sync (flushes of the WAL to disk) of both servers over the run
  (cluster-wide: the first server's other databases count too).
- handler peak (governed): the most handlers running at once in each database, from the jobs'
  [start, end] results (above max_active prints VIOLATION).
- two / one: the two-database run's jobs/s over the one-database run's of the same round and
  fleet, with the same command (2 x S slot processes against S) and with the same slots (2 x S
  against 2S).

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
import _databases_app as da
import _databases_server as ds
import bench_fleet as bf
import bench_scale as bs
import psycopg

from workhorse import Queue

HERE = Path(__file__).resolve().parent
APP_REF = "_databases_app:app"
HANDLER = 0.02
UNGOVERNED_PLACES = 256
NOOP_JOBS = 60_000


@dataclass(frozen=True)
class Case:
    """One drain: `limit` None is the ungoverned no-op backlog; `databases` 1 or 2."""

    limit: int | None
    databases: int
    supervisors: int
    slots: int  # --slots of each command (of each database supervisor, with two)
    concurrency: int
    jobs: int

    @property
    def kind(self) -> str:
        return "noop" if self.limit is None else "sleep"

    @property
    def backlog(self) -> str:
        return "no-op, ungoverned" if self.limit is None else \
            f"20 ms, max_active={self.limit} in all"

    @property
    def slot_processes(self) -> int:
        return self.supervisors * self.slots * self.databases

    @property
    def fleet(self) -> str:
        return f"{self.supervisors} x --slots {self.slots} -c {self.concurrency}"

    def max_active(self) -> int | None:
        """Each queue's max_active: the budget in all, split over the databases."""
        return None if self.limit is None else self.limit // self.databases

    @property
    def ideal(self) -> float:
        return math.inf if self.limit is None else self.limit / HANDLER


@dataclass
class Result:
    case: Case
    run: int
    succeeded: int
    span: float
    load: str
    servers: list[c.CpuWindow]  # one a server: the first, the second
    wal_syncs: int
    peaks: list[int] = field(default_factory=list)  # handler peak a database (governed)
    max_attempts: int = 1

    @property
    def rate(self) -> float:
        return self.succeeded / self.span if self.span > 0 else math.nan

    @property
    def seconds(self) -> float:
        return self.servers[0].seconds

    @property
    def postgres(self) -> float:
        return sum(w.server for w in self.servers)

    @property
    def workers(self) -> float:
        return self.servers[0].workers  # only the first sampler counts the fleet

    @property
    def machine(self) -> float:
        return self.servers[0].machine

    def per_job_us(self, seconds: float) -> float:
        return seconds / self.succeeded * 1e6 if self.succeeded else math.nan

    def cores(self, seconds: float) -> float:
        return seconds / self.seconds if self.seconds > 0 else math.nan


# ---- one drain ---------------------------------------------------------------------------------


@dataclass
class Server:
    name: str  # the database's name in the app: default, two
    url: str  # the scratch database, as a URI
    postmaster: int | None


def start_env(servers: Sequence[Server]) -> dict[str, str]:
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
           "WORKHORSE_DATABASES": ",".join(f"{s.name}={s.url}" for s in servers)}
    env.pop(c.ENV_URL, None)  # WORKHORSE_DATABASES's default wins alone
    return env


@contextlib.contextmanager
def fleet(case: Case, servers: Sequence[Server], log_level: str) -> Iterator[list[bf.Worker]]:
    """The case's N worker commands; SIGTERM and a wait for each on the way out."""
    queues = ",".join(da.QUEUES[case.kind][:case.databases])
    command = [sys.executable, "-m", "workhorse", "worker", APP_REF, "--queues", queues,
               "--slots", str(case.slots), "--concurrency", str(case.concurrency),
               "--log-level", log_level]
    env = start_env(servers)
    started: list[bf.Worker] = []
    with tempfile.TemporaryDirectory(prefix="bench_databases_") as logs:
        try:
            for n in range(case.supervisors):
                # Files, not pipes: at --log-level info a worker writes a line a job.
                out, err = Path(logs, f"{n}.out"), Path(logs, f"{n}.err")
                with out.open("ab") as stdout, err.open("ab") as stderr:
                    process = subprocess.Popen(command, cwd=HERE, env=env, stdout=stdout,
                                               stderr=stderr, stdin=subprocess.DEVNULL,
                                               start_new_session=True)
                started.append(bf.Worker(process, out, err))
            yield started
        finally:
            for worker in started:
                if worker.process.poll() is None:
                    worker.process.send_signal(signal.SIGTERM)
            for worker in started:
                try:
                    worker.process.wait(60)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(worker.process.pid, signal.SIGKILL)
                    worker.process.wait()


def expected_processes(case: Case) -> int:
    """The processes under one command: its slots, and with two databases a supervisor each."""
    return case.slots if case.databases == 1 else case.databases * (1 + case.slots)


def wait_ready(conns: Sequence[psycopg.Connection[Any]], procs: Sequence[bf.Worker], case: Case,
               timeout: float = 180.0) -> None:
    """Until every command has forked all its processes and each server's count of the fleet's
    connections has held for a second."""
    deadline = time.monotonic() + timeout
    steady_since: float | None = None
    last: tuple[int, ...] = ()
    while True:
        dead = [w for w in procs if w.process.poll() is not None]
        if dead or time.monotonic() > deadline:
            output = "\n".join(w.output()[-3000:] for w in dead or procs)
            raise SystemExit(f"the fleet did not come up:\n{output}")
        forked = all(len(c.descendants(w.process.pid)) >= expected_processes(case)
                     for w in procs)
        now = tuple(bs.other_backends(conn) for conn in conns)
        if forked and min(now) >= len(procs) and now == last:
            if steady_since is None:
                steady_since = time.monotonic()
            elif time.monotonic() - steady_since >= 1.0:
                return
        else:
            steady_since = None
        last = now
        time.sleep(0.2)


def wal_syncs(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
    return int(row[0]) if row is not None else 0


def prepare(conn: psycopg.Connection[Any], case: Case, queue: str, jobs: int) -> None:
    limit = case.max_active()
    bf.reset(conn, queue, bf.Policy(limit) if limit is not None else None)
    task, args = (da.NOOP, []) if case.limit is None else (da.SLEEP, [HANDLER])
    bf.fill(conn, task, queue, jobs, False, args)
    Queue(conn).pause(queue)


def measure(case: Case, run: int, servers: Sequence[Server], gate: c.QuietGate,
            log_level: str) -> Result:
    queues = da.QUEUES[case.kind][:case.databases]
    shares = [case.jobs // case.databases + (i < case.jobs % case.databases)
              for i in range(case.databases)]
    with contextlib.ExitStack() as stack:
        every = [stack.enter_context(c.monitor(s.url)) for s in servers]
        conns = every[:case.databases]
        for conn, queue, share in zip(conns, queues, shares, strict=True):
            prepare(conn, case, queue, share)
        gate.wait()
        load = "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
        syncs0 = sum(wal_syncs(conn) for conn in every)
        with fleet(case, servers, log_level) as procs:
            wait_ready(conns, procs, case)
            offset = bs.server_clock_offset(conns[0])
            # One sampler a server, each on its own postmaster; only the first counts the fleet.
            samplers = [c.CpuSampler(s.url, s.postmaster,
                                     (lambda: [w.process.pid for w in procs]) if i == 0
                                     else (lambda: []))
                        for i, s in enumerate(servers)]
            with contextlib.ExitStack() as sampling:
                for sampler in samplers:
                    sampling.enter_context(sampler)
                for conn, queue in zip(conns, queues, strict=True):
                    Queue(conn).resume(queue)
                deadline = time.monotonic() + max(120.0, case.jobs / 100)
                while True:
                    time.sleep(0.2)
                    left = sum(
                        conn.execute("SELECT count(*) FROM workhorse.jobs WHERE status IN "
                                     "('ready', 'active', 'scheduled')").fetchone()[0]  # type: ignore[index]
                        for conn in conns)
                    if left == 0:
                        break
                    dead = [w for w in procs if w.process.poll() is not None]
                    if dead or time.monotonic() > deadline:
                        output = "\n".join(w.output()[-3000:] for w in dead or procs)
                        raise SystemExit(f"{case.backlog}, {case.databases} database(s): the "
                                         f"fleet stopped or stalled ({left} left):\n{output}")
        syncs1 = sum(wal_syncs(conn) for conn in every)
        rows = []
        peaks = []
        for conn, queue in zip(conns, queues, strict=True):
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
                "extract(epoch FROM min(started_at))::float8, "
                "extract(epoch FROM max(finished_at))::float8, max(attempts) "
                "FROM workhorse.jobs WHERE queue = %s", (queue,)).fetchone()
            assert row is not None
            rows.append(row)
            if case.limit is not None:
                peaks.append(bf.handler_overlap(conn, queue).total)
        for conn in conns:
            bs.wait_gone(conn)
    first = min(float(r[1]) for r in rows)
    last = max(float(r[2]) for r in rows)
    windows = [s.window(first - offset, last - offset) for s in samplers]
    return Result(case=case, run=run, succeeded=sum(int(r[0]) for r in rows), span=last - first,
                  load=load, servers=windows, wal_syncs=syncs1 - syncs0, peaks=peaks,
                  max_attempts=max(int(r[3]) for r in rows))


# ---- the report --------------------------------------------------------------------------------


def us(value: float) -> str:
    return bs.us(value)


@dataclass
class Report:
    printer: c.Printer
    results: list[Result] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def add(self, r: Result) -> None:
        self.results.append(r)
        each = r.case.max_active()
        for database, peak in enumerate(r.peaks, 1):
            if each is not None and peak > each:
                message = (f"VIOLATION: {r.case.backlog}, {r.case.databases} database(s), run "
                           f"{r.run}: database {database} had {peak} handlers at once > {each}")
                self.violations.append(message)
                self.printer.line(message)
        self.printer.line(
            f"{r.case.backlog}, {r.case.databases} database(s), {r.case.fleet} "
            f"({r.case.slot_processes} slots), run {r.run}: {c.rate(r.rate)} jobs/s; CPU/job "
            f"PostgreSQL {self.postgres_cell(r)} us, workhorse {us(r.per_job_us(r.workers))} "
            f"us; cores {self.cores_cell(r)}; machine {r.cores(r.machine):.2f} (others "
            f"{self.others(r):.2f}); loadavg before {r.load}")

    @staticmethod
    def postgres_cell(r: Result) -> str:
        parts = [us(r.per_job_us(w.server)) for w in r.servers]
        return f"{' + '.join(parts)} = {us(r.per_job_us(r.postgres))}"

    @staticmethod
    def cores_cell(r: Result) -> str:
        return (f"{r.cores(r.postgres):.2f} + {r.cores(r.workers):.2f} = "
                f"{r.cores(r.postgres + r.workers):.2f}")

    @staticmethod
    def others(r: Result) -> float:
        return r.cores(r.machine - r.postgres - r.workers)

    def table(self) -> c.Table:
        table = c.Table(
            "one database against two: the same fleet, the same backlog",
            ["backlog", "fleet (commands x flags)", "databases", "slot processes", "run",
             "jobs", "jobs/s", "PostgreSQL CPU/job us (first + second = both)",
             "workhorse CPU/job us", "cores busy PG + wh", "machine cores busy (others)",
             "WAL syncs/s", "handler peak", "loadavg before"],
        )
        for r in self.results:
            each = r.case.max_active()
            peak = "-" if not r.peaks else \
                " / ".join(str(p) for p in r.peaks) + f" <= {each}"
            table.add(
                r.case.backlog, r.case.fleet, r.case.databases, r.case.slot_processes, r.run,
                f"{r.succeeded:,}" + ("" if r.succeeded == r.case.jobs else f" of {r.case.jobs:,}"),
                c.rate(r.rate) + ("" if r.case.limit is None else
                                  f" ({r.rate / r.case.ideal:.0%})"),
                self.postgres_cell(r), us(r.per_job_us(r.workers)), self.cores_cell(r),
                f"{r.cores(r.machine):.2f} ({self.others(r):.2f})",
                f"{r.wal_syncs / r.seconds:,.0f}" if r.seconds > 0 else "-", peak, r.load,
            )
            if r.max_attempts > 1:
                table.notes.append(f"{r.case.backlog}, {r.case.databases} database(s), run "
                                   f"{r.run}: max attempts {r.max_attempts}")
        return table

    def ratios(self) -> c.Table:
        """Two databases over one, a round and fleet at a time."""
        table = c.Table(
            "two databases / one (jobs/s of the same round and fleet)",
            ["backlog", "commands", "run", "one: jobs/s (slots)", "two: jobs/s (slots)",
             "two / one, the same command", "one, equal slots: jobs/s (slots)",
             "two / one, equal slots"],
        )
        keys = sorted({(r.case.limit or 0, r.case.supervisors, r.case.slots, r.run)
                       for r in self.results if r.case.databases == 2})
        for limit, supervisors, slots, run in keys:
            def find(databases: int, slots_each: int, limit: int = limit,
                     supervisors: int = supervisors, run: int = run) -> Result | None:
                return next((r for r in self.results if (r.case.limit or 0) == limit
                             and r.case.supervisors == supervisors and r.run == run
                             and r.case.databases == databases and r.case.slots == slots_each),
                            None)
            two, one, equal = find(2, slots), find(1, slots), find(1, 2 * slots)
            assert two is not None
            table.add(
                two.case.backlog, supervisors, run,
                f"{c.rate(one.rate)} ({one.case.slot_processes})" if one else "-",
                f"{c.rate(two.rate)} ({two.case.slot_processes})",
                f"{two.rate / one.rate:.2f}" if one else "-",
                f"{c.rate(equal.rate)} ({equal.case.slot_processes})" if equal else "-",
                f"{two.rate / equal.rate:.2f}" if equal else "-",
            )
        return table


# ---- the command line --------------------------------------------------------------------------


def plan(args: argparse.Namespace) -> list[Case]:
    """One round's drains, in order: for each backlog and fleet, one database, two, and one with
    the two-database run's slot count."""
    counts = bs.parse_ints(args.databases, "--databases")
    if not set(counts) <= {1, 2}:
        raise SystemExit("--databases: 1, 2 or 1,2")
    supervisors = bs.parse_ints(args.supervisors, "--supervisors")
    limits = [int(x) for x in args.limits.split(",") if x.strip() and int(x) > 0] \
        if args.limits else []
    cases: list[Case] = []
    kinds: list[int | None] = [None, *limits]
    for limit in kinds:
        places = UNGOVERNED_PLACES if limit is None else 2 * limit
        default = NOOP_JOBS if limit is None else max(12_800, 100 * places)
        jobs = args.jobs if args.jobs is not None else default
        jobs = jobs // 2 if args.quick else jobs
        for n in supervisors:
            concurrency = max(1, places // n)
            for databases in counts:
                cases.append(Case(limit, databases, n, args.slots, concurrency, jobs))
            if 2 in counts and 1 in counts and not args.no_equal_slots:
                cases.append(Case(limit, 1, n, 2 * args.slots, concurrency, jobs))
    return cases


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    c.add_common_args(p, default_db="wh_bench_databases")
    p.add_argument("--databases", default="1,2", metavar="1,2",
                   help="one server, two, or both alternately (default %(default)s)")
    p.add_argument("--supervisors", default="1,2", metavar="N[,N]",
                   help="worker commands in the fleet (default %(default)s)")
    p.add_argument("--slots", type=int, default=1,
                   help="--slots of each command (each database's, with two; default "
                   "%(default)s)")
    p.add_argument("--limits", default="256", metavar="L[,L]",
                   help="governed 20 ms backlogs: max_active in all; 0 for none (default "
                   "%(default)s)")
    p.add_argument("--jobs", type=int, default=None,
                   help=f"every backlog (default {NOOP_JOBS:,} no-op jobs, max(12,800, 100 x "
                   "2L) governed)")
    p.add_argument("--quick", action="store_true", help="half the backlogs")
    p.add_argument("--repeat", type=int, default=2, help="rounds (default %(default)s)")
    p.add_argument("--no-equal-slots", action="store_true",
                   help="skip the one-database run with the two-database run's slot count")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"),
                   help="the workers' (default %(default)s, the worker's own default, as "
                   "bench_scale runs them: a line a job)")
    p.add_argument("--quiet-wait", type=float, default=3.0, metavar="S",
                   help="wait up to S seconds before each drain for a quiet machine (default "
                   "%(default)s)")
    # bench_scale's flags that mean nothing here are accepted, so that its command line passes.
    for flag in ("--ungoverned-places", "--py-spy-seconds", "--window"):
        p.add_argument(flag, help=argparse.SUPPRESS)
    p.add_argument("--breakdown", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    planned = plan(args)
    server_url, source = c.resolve_server_url(args.database_url)
    printer = c.Printer(args.format)
    printer.heading(f"several databases: one server against two ({c.stamp()})")
    first_settings = ds.settings_of(server_url)
    with ds.SecondServer(first_settings) as second, \
            c.scratch_database(server_url, args.db_name, args.keep_db) as first_url, \
            c.scratch_database(second.url("postgres"), args.db_name) as second_url:
        urls = {"default": ds.as_uri(first_url), da.SECOND: ds.as_uri(second_url)}
        servers = []
        for name, url in urls.items():
            with c.monitor(url) as conn:
                servers.append(Server(name, url, c.postmaster_pid(conn)))
        second_settings = ds.settings_of(second.url("postgres"))
        with c.monitor(urls["default"]) as conn:
            facts = c.server_facts(conn)
        facts["first server"] = f"{c.describe_url(first_url)} ({source}), postmaster " \
            f"{servers[0].postmaster or 'not on this host'}"
        facts["second server"] = (
            f"{c.describe_url(second_url)}: initdb by {second.bindir}, data in "
            f"{second.data}, postmaster {servers[1].postmaster}")
        settings = c.Table("the servers' settings (the second is given the first's)",
                           ["setting", "first", "second"])
        for name, value in first_settings.items():
            there = second_settings.get(name, "?")
            settings.add(name, value, there if there == value else f"{there} (DIFFERENT)")
        facts.update(bf.code_facts(urls["default"]))
        facts["fleet"] = (
            f"{args.supervisors} command(s) of `workhorse worker {APP_REF} --slots "
            f"{args.slots}` (each database's, with two), --log-level {args.log_level}; "
            f"{len(planned)} drains x {args.repeat} rounds")
        facts["CPU measured"] = (
            "/proc/<pid>/stat of both postmasters and their children (each server's scratch "
            "database and background processes) and of every command's process tree"
            if all(s.postmaster for s in servers) else
            "the workers', and the servers' on this host only")
        printer.facts("setup", facts)
        printer.table(settings)
        report = Report(printer)
        gate = c.QuietGate(args.quiet_wait)
        started = time.monotonic()
        for run in range(1, max(1, args.repeat) + 1):
            for case in planned if run % 2 else list(reversed(planned)):
                report.add(measure(case, run, servers, gate, args.log_level))
        table = report.table()
        table.notes.append(gate.summary())
        with c.monitor(urls["default"]) as conn:
            table.notes.append(f"machine load at the end: {c.machine_load(conn)}")
        table.notes.append(f"total time {time.monotonic() - started:.0f} s")
        if any(r.case.limit is not None for r in report.results):
            table.notes.extend(report.violations or [
                "budget: no handler-recorded overlap exceeded its database's max_active"])
        printer.table(table)
        if {r.case.databases for r in report.results} == {1, 2}:
            printer.table(report.ratios())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
