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
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
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
