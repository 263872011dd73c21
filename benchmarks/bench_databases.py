"""Several databases (issue #44): one ungoverned no-op backlog drained by one worker command,
from one PostgreSQL server, then split over two servers on this machine.

    .venv/bin/python benchmarks/bench_databases.py [--database-url URL] [--jobs N]
        [--slots S] [--concurrency C] [--repeat R]

(`bench_scale.py --databases 1,2` runs this.) The first server is `--database-url`'s (a scratch
database `wh_bench_databases` is made there and dropped after); the second is a private
cluster this benchmark initdb's in a temporary directory with the first one's durability
settings (fsync, synchronous_commit, full_page_writes, shared_buffers), started and removed
again. One database: N jobs on a queue of the first server, `workhorse worker` serving it.
Two databases: N/2 jobs on each server, one `workhorse worker` serving both, which forks one
database supervisor a database, each with `--slots S` (so the two-database run has twice the
slots: that is what adding a database to a fleet gives). Figures, from the jobs' rows and from
/proc: jobs/s (jobs / (last finished_at - first started_at) over both databases), the CPU of
every PostgreSQL process of both servers and of the worker's process tree per job, and the cores
they kept busy over the drain.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import Queue

HERE = Path(__file__).resolve().parent
SCRATCH = "wh_bench_databases"
TICK = os.sysconf("SC_CLK_TCK")


# ---- the second server ---------------------------------------------------------------------


class SecondServer:
    """A private PostgreSQL cluster in a temporary directory (as `postgres` when root)."""

    def __init__(self, settings: dict[str, str]) -> None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
                       key=lambda p: int(p.parent.parent.name))
        if not found:
            raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bindir = found[-1].parent
        self.root = Path(tempfile.mkdtemp(prefix="wh-bench-pg-"))
        self.root.chmod(0o755)
        self.data, self.sockets = self.root / "data", self.root / "run"
        self.sockets.mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.account = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if self.account is not None:
            for path in (self.root, self.sockets):
                os.chown(path, self.account.pw_uid, self.account.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--no-sync", "--no-instructions")
        conf = {"port": str(self.port), "unix_socket_directories": f"'{self.sockets}'",
                "listen_addresses": "''", "max_connections": "200", **settings}
        with (self.data / "postgresql.conf").open("a") as out:
            out.writelines(f"{name} = {value}\n" for name, value in conf.items())
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "start")

    def _run(self, *args: str) -> None:
        user: dict[str, Any] = {}
        if self.account is not None:
            user = {"user": self.account.pw_uid, "group": self.account.pw_gid,
                    "extra_groups": []}
        subprocess.run([str(self.bindir / args[0]), *args[1:]], check=True, cwd=self.root,
                       capture_output=True, stdin=subprocess.DEVNULL, **user)

    def url(self, dbname: str) -> str:
        return make_conninfo(user="postgres", dbname=dbname, port=str(self.port),
                             host=str(self.sockets))

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def durability(admin_url: str) -> dict[str, str]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, setting, unit FROM pg_settings WHERE name IN ('fsync', "
            "'synchronous_commit', 'full_page_writes', 'shared_buffers')").fetchall()
    out = {}
    for name, setting, unit in rows:
        out[name] = f"{int(setting) * 8}kB" if unit == "8kB" else setting
    return out


@contextlib.contextmanager
def scratch(admin_url: str) -> Iterator[str]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{SCRATCH}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{SCRATCH}"')
    url = make_conninfo(admin_url, dbname=SCRATCH)
    with psycopg.connect(url, autocommit=True) as conn:
        Queue(conn).install_schema()
    try:
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{SCRATCH}" WITH (FORCE)')


# ---- CPU from /proc --------------------------------------------------------------------------


def _ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
    return pids


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


class Meter:
    """Cumulative CPU ticks of PostgreSQL's processes and of the worker's tree, sampled."""

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self.seen: dict[int, int] = {}
        self.pg = self.wh = 0

    def sample(self) -> None:
        for group, pids in (("pg", _postgres_pids()), ("wh", _tree(self.worker))):
            for pid in pids:
                now = _ticks(pid)
                grown = max(0, now - self.seen.get(pid, now if group == "pg" else 0))
                self.seen[pid] = now
                setattr(self, group, getattr(self, group) + grown)


# ---- one run ---------------------------------------------------------------------------------


def fill(url: str, queue: str, task: str, count: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE workhorse.jobs CASCADE")
        _insert(conn, queue, task, count)
        conn.execute("VACUUM ANALYZE workhorse.jobs")
        conn.execute("CHECKPOINT")


def _insert(conn: psycopg.Connection[Any], queue: str, task: str, count: int) -> None:
    from workhorse import EnqueueOptions

    q = Queue(conn)
    for start in range(0, count, 5000):
        q.enqueue_many([(task, {"args": [], "kwargs": {}}, EnqueueOptions(queue=queue))
                        for _ in range(min(5000, count - start))])


def done(url: str) -> tuple[int, Any, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE status = 'succeeded'), "
                           "min(started_at), max(finished_at) FROM workhorse.jobs").fetchone()
    assert row is not None
    return int(row[0]), row[1], row[2]


def run(urls: dict[str, str], total: int, slots: int, concurrency: int,
        every: dict[str, str]) -> dict[str, float]:
    queues = {"default": ("bench-db-1", "bench.noop1"), "two": ("bench-db-2", "bench.noop2")}
    share = total // len(urls)
    for name, url in urls.items():
        fill(url, *queues[name], share)
    env = {**os.environ, "PYTHONPATH": str(HERE),
           # Both databases named (the app places a queue on each); --queues serves `urls`'.
           "WORKHORSE_DATABASES": ",".join(f"{n}={u}" for n, u in every.items())}
    env.pop("WORKHORSE_DATABASE_URL", None)
    served = ",".join(queues[name][0] for name in urls)
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed after the drain, below
    worker = subprocess.Popen(
        [sys.executable, "-m", "workhorse", "worker", "_databases_app:app", "--queues", served,
         "--slots", str(slots), "--concurrency", str(concurrency), "--log-level", "warning"],
        env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    meter = Meter(worker.pid)
    samples: list[tuple[float, int, int]] = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and worker.poll() is None:
            meter.sample()
            samples.append((time.time(), meter.pg, meter.wh))
            finished = [done(url) for url in urls.values()]
            if sum(f[0] for f in finished) >= share * len(urls):
                break
            time.sleep(0.05)
        else:
            log.seek(0)
            raise SystemExit("the drain did not finish (300 s, or the worker exited):\n"
                             + log.read().decode(errors="replace")[-2000:])
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(60)
        log.close()
    first = min(f[1] for f in finished).timestamp()
    last = max(f[2] for f in finished).timestamp()
    inside = [s for s in samples if first <= s[0] <= last] or samples
    span = last - first
    pg = (inside[-1][1] - inside[0][1]) / TICK
    wh = (inside[-1][2] - inside[0][2]) / TICK
    measured = max(inside[-1][0] - inside[0][0], 1e-9)
    jobs = share * len(urls)
    return {"jobs/s": jobs / span, "pg_us": pg / (jobs * measured / span) * 1e6,
            "wh_us": wh / (jobs * measured / span) * 1e6, "cores": (pg + wh) / measured,
            "span": span}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="an admin URL of the first server (a scratch database is made)")
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--slots", type=int, default=1, help="slots a database")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--databases", default="1,2", help="1, 2 or 1,2")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.databases.split(",")]
    if not set(counts) <= {1, 2}:
        parser.error("--databases takes 1, 2 or 1,2")
    host = conninfo_to_dict(args.database_url).get("host")
    print(f"load {Path('/proc/loadavg').read_text().split()[:3]}, first server {host}, "
          f"{args.jobs} no-op jobs, --slots {args.slots} a database, --concurrency "
          f"{args.concurrency}", flush=True)
    second = SecondServer(durability(args.database_url))
    try:
        with psycopg.connect(second.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{SCRATCH}"')
        with psycopg.connect(second.url(SCRATCH), autocommit=True) as conn:
            Queue(conn).install_schema()
        with scratch(args.database_url) as first_url:
            urls = {"default": first_url, "two": second.url(SCRATCH)}
            results: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
            for _ in range(args.repeat):
                for n in counts:  # alternating
                    chosen = dict(list(urls.items())[:n])
                    figures = run(chosen, args.jobs, args.slots, args.concurrency, urls)
                    results[n].append(figures)
                    print(f"  {n} database(s): {figures['jobs/s']:,.0f} jobs/s, PostgreSQL "
                          f"{figures['pg_us']:.0f} us/job, workhorse {figures['wh_us']:.0f} "
                          f"us/job, {figures['cores']:.2f} cores busy", flush=True)
    finally:
        second.destroy()
    print()
    print("| databases | jobs/s | PostgreSQL CPU/job | workhorse CPU/job | cores busy |")
    print("|--:|--:|--:|--:|--:|")
    for n in counts:
        def joined(key: str, form: str, runs: list[dict[str, float]] = results[n]) -> str:
            return ", ".join(format(r[key], form) for r in runs)
        print(f"| {n} | {joined('jobs/s', ',.0f')} | {joined('pg_us', '.0f')} µs | "
              f"{joined('wh_us', '.0f')} µs | {joined('cores', '.2f')} |")
    if counts == [1, 2]:
        ratios = [two["jobs/s"] / one["jobs/s"] for one, two in zip(results[1], results[2],
                                                                    strict=True)]
        print(f"\ntwo / one database: {', '.join(f'{r:.2f}' for r in ratios)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
