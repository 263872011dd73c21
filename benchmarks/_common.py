"""Shared plumbing for the database benchmarks: which server, a scratch database, statistics and
tables.

Which server, as the product chooses it: `--database-url`, then `WORKHORSE_DATABASE_URL`, then the
embedded server (`workhorse.embedded.ensure_running()`). Each benchmark then works in its own
scratch database on that server (`wh_bench_<name>`), created fresh with the workhorse schema and
dropped at the end unless `--keep-db` is given. Nothing else on the server is touched.

Benchmarks measure and print; they assert nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ENV_URL = "WORKHORSE_DATABASE_URL"
SCRATCH_PREFIX = "wh_bench_"


# ---- command line ----


def add_common_args(parser: argparse.ArgumentParser, default_db: str) -> None:
    parser.add_argument(
        "--database-url",
        default=None,
        help=f"server to benchmark on (default: ${ENV_URL}, else the embedded server); "
        "a scratch database is created on it",
    )
    parser.add_argument(
        "--db-name",
        default=default_db,
        help=f"scratch database name (must start with {SCRATCH_PREFIX!r}; default %(default)s)",
    )
    parser.add_argument(
        "--keep-db", action="store_true", help="leave the scratch database behind for inspection"
    )
    parser.add_argument(
        "--format",
        choices=("rich", "plain"),
        default=None,
        help="table style (default: rich on a terminal, plain Markdown otherwise)",
    )


# ---- which server, and a scratch database on it ----


def resolve_server_url(explicit: str | None) -> tuple[str, str]:
    """(url, where it came from): explicit, then $WORKHORSE_DATABASE_URL, then embedded."""
    if explicit:
        return explicit, "--database-url"
    from_env = os.environ.get(ENV_URL)
    if from_env:
        return from_env, f"${ENV_URL}"
    try:
        from workhorse import embedded
    except ImportError as exc:  # pragma: no cover - only while the embedded server is unbuilt
        sys.exit(f"no --database-url or ${ENV_URL}, and no embedded server ({exc})")
    return embedded.ensure_running(), "embedded server"


def with_dbname(url: str, dbname: str) -> str:
    params: dict[str, Any] = dict(conninfo_to_dict(url))
    params["dbname"] = dbname
    return make_conninfo("", **params)


def describe_url(url: str) -> str:
    params = conninfo_to_dict(url)
    host = params.get("host") or "(default socket)"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname') or ''}"


@contextlib.contextmanager
def scratch_database(server_url: str, name: str, keep: bool = False) -> Iterator[str]:
    """A fresh database `name` with the workhorse schema; yields its URL."""
    if not name.startswith(SCRATCH_PREFIX):
        sys.exit(
            f"refusing to use database {name!r}: scratch names must start with {SCRATCH_PREFIX}"
        )
    ident = sql.Identifier(name)
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    url = with_dbname(server_url, name)
    try:
        from workhorse.queue import Queue

        with psycopg.connect(url, autocommit=True) as conn:
            Queue(conn).install_schema()
        yield url
    finally:
        if keep:
            print(f"\nkept scratch database {name} ({describe_url(url)})")
        else:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


def stop_worker(process: subprocess.Popen[bytes], grace: float = 60.0) -> None:
    """SIGTERM a `workhorse worker` the benchmark started, and kill it if it has not drained
    and exited within `grace` seconds."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def try_checkpoint(conn: psycopg.Connection[Any]) -> None:
    """Flush dirty buffers between measurements when allowed, so no run pays another's writes."""
    with contextlib.suppress(psycopg.Error):
        conn.execute("CHECKPOINT")


# ---- context printed above the figures ----


def server_facts(conn: psycopg.Connection[Any]) -> dict[str, str]:
    facts: dict[str, str] = {}
    facts["server"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    for setting in ("fsync", "synchronous_commit", "shared_buffers", "work_mem", "autovacuum"):
        facts[setting] = conn.execute(
            sql.SQL("SHOW {}").format(sql.Identifier(setting))
        ).fetchone()[0]  # type: ignore[index]
    # Round trips the figures below are made of: a no-op statement, and one committed row (fsync).
    conn.execute("CREATE TABLE IF NOT EXISTS public._bench_commit (x int)")
    select_1 = []
    commit = []
    for _ in range(200):
        t0 = time.perf_counter()
        conn.execute("SELECT 1")
        select_1.append(time.perf_counter() - t0)
    for i in range(200):
        t0 = time.perf_counter()
        conn.execute("INSERT INTO public._bench_commit VALUES (%s)", (i,))
        commit.append(time.perf_counter() - t0)
    conn.execute("DROP TABLE public._bench_commit")
    facts["SELECT 1 round trip"] = f"{ms(statistics.median(select_1))} ms"
    facts["1-row autocommit INSERT"] = f"{ms(statistics.median(commit))} ms"
    facts["machine load"] = machine_load(conn)
    facts["client"] = (
        f"Python {platform.python_version()}, psycopg {psycopg.__version__}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}"
    )
    return facts


def machine_load(conn: psycopg.Connection[Any]) -> str:
    """Load average, and other busy sessions on the server: anything else running skews figures."""
    one, five, _ = os.getloadavg()
    busy = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE state <> 'idle' "
        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    ).fetchone()[0]  # type: ignore[index]
    return (
        f"loadavg {one:.2f} (1 min), {five:.2f} (5 min); {busy} other busy sessions on the server"
    )


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3]  # iowait (fields[4]) counts as busy: someone else's fsyncs contend with ours
    return idle, sum(fields[:8])


def cpu_busy(interval: float = 0.25) -> float:
    """Fraction of all CPUs busy over `interval` seconds (NaN where /proc/stat is missing)."""
    try:
        idle0, total0 = _cpu_times()
        time.sleep(interval)
        idle1, total1 = _cpu_times()
    except OSError:
        return math.nan
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


@dataclass
class QuietGate:
    """Waits, before each measurement, until the machine is quiet (our own processes are idle
    then), for at most `max_wait` seconds; counts the measurements that started under load.
    Other work on a 2-core machine otherwise lands in the figures at random."""

    max_wait: float
    threshold: float = 0.30
    waited: float = 0.0
    loud_starts: int = 0
    starts: int = 0

    def wait(self) -> float:
        self.starts += 1
        deadline = time.monotonic() + self.max_wait
        t0 = time.monotonic()
        busy = cpu_busy()
        while not busy <= self.threshold and time.monotonic() < deadline:
            busy = cpu_busy()
        self.waited += time.monotonic() - t0
        if not busy <= self.threshold:
            self.loud_starts += 1
        return busy

    def summary(self) -> str:
        return (
            f"quiet gate: waited {self.waited:.0f} s in all for CPU use <= "
            f"{self.threshold:.0%} (max {self.max_wait:g} s each); {self.loud_starts} of "
            f"{self.starts} measurements started with the machine busier than that"
        )


# ---- statistics ----


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def timed_calls(action: Callable[[], Any], n: int) -> list[float]:
    """The wall time of each of `n` calls of `action`, in seconds."""
    out = []
    for _ in range(n):
        start = time.perf_counter()
        action()
        out.append(time.perf_counter() - start)
    return out


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def ms(seconds: float, digits: int = 2) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.{digits}f}"


def rate(value: float) -> str:
    """A jobs/s figure, compact: 29.5k, 812."""
    if math.isnan(value):
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    if value >= 1000:
        return f"{value / 1000:.2f}k"
    return f"{value:.0f}"


def count(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return f"{n:,}"


# ---- tables ----


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.rows.append([str(c) for c in cells])


class Printer:
    def __init__(self, style: str | None) -> None:
        self.style = style or ("rich" if sys.stdout.isatty() else "plain")
        self._console: Any = None
        if self.style == "rich":
            from rich.console import Console

            self._console = Console(width=None if sys.stdout.isatty() else 160)

    def heading(self, text: str) -> None:
        if self._console is not None:
            self._console.rule(f"[bold]{text}")
        else:
            print(f"\n## {text}\n", flush=True)

    def line(self, text: str = "") -> None:
        if self._console is not None:
            self._console.print(text, highlight=False, markup=False)
        else:
            print(text, flush=True)

    def facts(self, title: str, facts: dict[str, str]) -> None:
        table = Table(title, ["", ""])
        for key, value in facts.items():
            table.add(key, value)
        self.table(table)

    def table(self, table: Table) -> None:
        if self._console is not None:
            from rich.table import Table as RichTable

            rich_table = RichTable(title=table.title, title_justify="left")
            for i, column in enumerate(table.columns):
                rich_table.add_column(column, justify="left" if i == 0 else "right")
            for row in table.rows:
                rich_table.add_row(*row)
            self._console.print(rich_table)
            for note in table.notes:
                self._console.print(f"  {note}", highlight=False, markup=False)
            return
        print(f"\n**{table.title}**\n")
        widths = [
            max(len(table.columns[i]), *(len(r[i]) for r in table.rows))
            if table.rows
            else len(table.columns[i])
            for i in range(len(table.columns))
        ]

        def fmt(cells: Sequence[str]) -> str:
            out = []
            for i, cell in enumerate(cells):
                out.append(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]))
            return "| " + " | ".join(out) + " |"

        print(fmt(table.columns))
        print(
            "|"
            + "|".join(
                ("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)
            )
            + "|"
        )
        for row in table.rows:
            print(fmt(row))
        for note in table.notes:
            print(f"\n{note}")
        print(flush=True)


def stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def asyncpg_params(url: str) -> dict[str, Any]:
    """asyncpg wants keywords (or a URL), not a libpq key=value string (for pgqueuer beside us)."""
    info = conninfo_to_dict(url)
    params: dict[str, Any] = {
        "host": info.get("host"),
        "user": info.get("user"),
        "password": info.get("password"),
        "database": info.get("dbname"),
    }
    if info.get("port"):
        params["port"] = int(str(info["port"]))
    return {k: v for k, v in params.items() if v is not None}


# ---- where the CPU goes: /proc/<pid>/stat of the server's and the workers' processes ----

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcStat:
    ppid: int
    ticks: int  # utime + stime: the process's own CPU
    reaped: int  # cutime + cstime: its waited-for children's, exited


def parse_proc_stat(text: str) -> ProcStat:
    """/proc/<pid>/stat's parent and CPU times, in clock ticks. The command name (field 2) is in
    parentheses and may hold spaces and parentheses itself, so the fields are counted after the
    last ')': state is field 3, ppid 4, utime 14, stime 15, cutime 16, cstime 17."""
    rest = text[text.rindex(")") + 2:].split()
    return ProcStat(ppid=int(rest[1]), ticks=int(rest[11]) + int(rest[12]),
                    reaped=int(rest[13]) + int(rest[14]))


def proc_stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return parse_proc_stat(f.read())
    except (OSError, ValueError, IndexError):
        return None


def child_pids(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(x) for x in f.read().split())
    return found


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        found.extend(kids := child_pids(todo.pop()))
        todo.extend(kids)
    return found


def postmaster_pid(conn: psycopg.Connection[Any]) -> int | None:
    """The server's postmaster, when it runs on this host: the parent of this connection's
    backend (whose command name says postgres). None for a server elsewhere."""
    backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    try:
        with open(f"/proc/{backend}/cmdline", "rb") as f:
            if b"postgres" not in f.read():
                return None
    except OSError:
        return None
    stat = proc_stat(int(backend))
    return stat.ppid if stat is not None else None


# The benchmark's own connections (samplers, the polling of the drain) say so, so that their
# backends' CPU is not counted as the server's work for the workers.
MONITOR_APP = "workhorse-bench-monitor"


def monitor(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection of the benchmark itself (see MONITOR_APP)."""
    return psycopg.connect(url, autocommit=True, application_name=MONITOR_APP)


@dataclass(frozen=True)
class CpuWindow:
    """CPU seconds spent in a window, by group, and the window's length."""

    seconds: float
    server: float  # the benchmark database's backends and the server's background processes
    workers: float  # the worker processes (supervisors and their slots)
    other_databases: float  # backends of other databases on the same server
    machine: float  # every CPU of the machine (/proc/stat), whoever used it

    def per_job_us(self, group: float, jobs: int) -> float:
        return group / jobs * 1e6 if jobs else math.nan

    def cores(self, group: float) -> float:
        return group / self.seconds if self.seconds > 0 else math.nan


class CpuSampler:
    """Every `interval` s, the CPU ticks of the server's processes (the postmaster and its
    children, the ones serving another database kept apart) and of the worker processes (each
    root pid of `roots()` and its descendants), summed into cumulative series stamped with
    time.time(). A process's ticks count from its first sample (from 0 when it was born after
    the first sample); a process that exits between two samples loses its ticks since the last
    one (at most `interval`). The benchmark's own backends (application_name MONITOR_APP, see
    `monitor`) are not counted."""

    def __init__(self, url: str, postmaster: int | None, roots: Callable[[], Sequence[int]],
                 interval: float = 0.05) -> None:
        self.url = url
        self.postmaster = postmaster
        self.roots = roots
        self.interval = interval
        self.series: list[tuple[float, float, float, float, float]] = []
        self._last: dict[int, int] = {}
        self._group: dict[int, str] = {}  # a backend's database: ours, other, or background
        self._misses: dict[int, int] = {}
        self._totals = {"server": 0, "workers": 0, "other": 0, "bench": 0}
        self._machine0: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _classify(self, conn: psycopg.Connection[Any] | None) -> None:
        if conn is None:
            return
        rows = conn.execute(
            "SELECT pid, CASE WHEN application_name = %s THEN 'bench' "
            "WHEN datname IS NULL OR datname = current_database() THEN 'server' "
            "ELSE 'other' END FROM pg_stat_activity",
            (MONITOR_APP,),
        ).fetchall()
        for pid, group in rows:
            self._group.setdefault(int(pid), str(group))

    def _sample(self, conn: psycopg.Connection[Any] | None) -> None:
        seen: dict[int, tuple[str, int]] = {}
        if self.postmaster is not None:
            kids = child_pids(self.postmaster)
            unknown = [p for p in kids if p not in self._group]
            if unknown:
                self._classify(conn)
                # A child never listed in pg_stat_activity (a logger, say) is the server's; a
                # backend not listed yet (just forked) is given a few samples to show up.
                for pid in unknown:
                    self._misses[pid] = self._misses.get(pid, 0) + 1
                    if self._misses[pid] >= 5:
                        self._group.setdefault(pid, "server")
            for pid in [self.postmaster, *kids]:
                stat = proc_stat(pid)
                if stat is not None:
                    seen[pid] = (self._group.get(pid, "server"), stat.ticks)
        for root in self.roots():
            for pid in [root, *descendants(root)]:
                stat = proc_stat(pid)
                if stat is not None:
                    seen[pid] = ("workers", stat.ticks)
        first = not self.series
        for pid, (group, ticks) in seen.items():
            before = self._last.get(pid, ticks if first else 0)
            self._totals[group] += ticks - before
            self._last[pid] = ticks
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
            machine = sum(fields[:8]) - fields[3]
        except OSError:
            machine = 0
        if self._machine0 is None:
            self._machine0 = machine
        self.series.append((time.time(), self._totals["server"] / CLOCK_TICKS,
                            self._totals["workers"] / CLOCK_TICKS,
                            self._totals["other"] / CLOCK_TICKS,
                            (machine - self._machine0) / CLOCK_TICKS))

    def _run(self) -> None:
        conn = monitor(self.url) if self.postmaster is not None else None
        try:
            while True:
                self._sample(conn)
                if self._stop.wait(self.interval):
                    self._sample(conn)
                    return
        finally:
            if conn is not None:
                conn.close()

    def at(self, moment: float) -> tuple[float, ...]:
        """The cumulative series at `moment`, interpolated between the samples around it."""
        series = self.series
        if not series:
            return (0.0, 0.0, 0.0, 0.0)
        if moment <= series[0][0]:
            return series[0][1:]
        for before, after in itertools.pairwise(series):
            if before[0] <= moment <= after[0]:
                share = (moment - before[0]) / (after[0] - before[0]) if after[0] > before[0] \
                    else 1.0
                pairs = zip(before[1:], after[1:], strict=True)
                return tuple(b + (a - b) * share for b, a in pairs)
        return series[-1][1:]

    def window(self, start: float, end: float) -> CpuWindow:
        a, b = self.at(start), self.at(end)
        server, workers, other, machine = (y - x for x, y in zip(a, b, strict=True))
        if self.postmaster is None:
            server = other = math.nan
        return CpuWindow(end - start, server, workers, other, machine)


# ---- the top functions and statements, and the top Python frames ----


def function_snapshot(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, float, float]]:
    """pg_stat_user_functions of this database: name -> (calls, total ms, self ms)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT schemaname || '.' || funcname, sum(calls)::bigint, sum(total_time)::float8, "
        "sum(self_time)::float8 FROM pg_stat_user_functions GROUP BY 1"
    ).fetchall()
    return {str(r[0]): (int(r[1]), float(r[2]), float(r[3])) for r in rows}


def top_changes(
    before: dict[str, tuple[int, float, float]], after: dict[str, tuple[int, float, float]],
    n: int = 8, by: int = 2,
) -> list[tuple[str, int, float, float]]:
    """The `n` names whose field `by` (of calls, total, self) grew most between two snapshots:
    (name, calls, total ms, self ms) of the difference."""
    grown = []
    for name, (calls, total, own) in after.items():
        c0, t0, s0 = before.get(name, (0, 0.0, 0.0))
        grown.append((name, calls - c0, total - t0, own - s0))
    grown = [g for g in grown if g[1] > 0]
    grown.sort(key=lambda g: g[by + 1], reverse=True)
    return grown[:n]


def statements_available(conn: psycopg.Connection[Any]) -> str | None:
    """None when pg_stat_statements can be read in this database (the extension is created
    here if the server preloads its library), else why not."""
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]
    return None


def statement_snapshot(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, float, float]]:
    """pg_stat_statements of this database: query text -> (calls, total ms, total ms)."""
    rows = conn.execute(
        "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 160), sum(calls)::bigint, "
        "sum(total_exec_time)::float8 FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "GROUP BY 1"
    ).fetchall()
    return {str(r[0]): (int(r[1]), float(r[2]), float(r[2])) for r in rows}


def py_spy_path() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


def top_frames(raw: str, n: int = 10) -> list[tuple[str, int]]:
    """The `n` frames with the most own samples (the innermost frame of each stack) in py-spy's
    raw (collapsed) output: one stack a line, frames outermost first, separated by ';', then a
    space and the stack's sample count."""
    own: dict[str, int] = {}
    for line in raw.splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack or not samples.isdigit():
            continue
        leaf = stack.split(";")[-1].strip()
        own[leaf] = own.get(leaf, 0) + int(samples)
    return sorted(own.items(), key=lambda item: (-item[1], item[0]))[:n]


class PySpy:
    """`py-spy record --format raw` of one process for `seconds`, in the background. With `gil`,
    only the samples of the thread holding the GIL are taken: the process's Python CPU, not its
    waits."""

    def __init__(self, pid: int, seconds: float, rate: int = 100, gil: bool = False) -> None:
        self.pid = pid
        handle, self.path = tempfile.mkstemp(prefix="bench_pyspy_", suffix=".txt")
        os.close(handle)
        exe = py_spy_path()
        assert exe is not None
        self.process = subprocess.Popen(
            [exe, "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", str(rate),
             "-f", "raw", "-F", "--nonblocking", *(["--gil"] if gil else []), "-o", self.path],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )

    def raw(self) -> tuple[str, str]:
        """(the collapsed stacks, py-spy's last words), once it has finished."""
        try:
            out, _ = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        try:
            with open(self.path) as f:
                raw = f.read()
        finally:
            os.unlink(self.path)
        said = out.decode(errors="replace").strip().splitlines()
        return raw, said[-1] if said else "no samples"

    def frames(self, n: int = 10) -> tuple[list[tuple[str, int]], int, str]:
        """(top frames, samples in all, py-spy's last words when it failed)."""
        raw, said = self.raw()
        every = top_frames(raw, n=10**9)
        return every[:n], sum(s for _, s in every), "" if every else said


def merged_frames(spies: Sequence[PySpy], n: int = 10) -> tuple[list[tuple[str, int]], int, str]:
    """`PySpy.frames` over several processes' samples together."""
    raws = [spy.raw() for spy in spies]
    every = top_frames("\n".join(raw for raw, _ in raws), n=10**9)
    failure = "" if every else (raws[-1][1] if raws else "no process")
    return every[:n], sum(s for _, s in every), failure
