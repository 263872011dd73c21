"""CPU per job: what one drain of no-op jobs costs the worker's processes and the server's backends.

    .venv/bin/python benchmarks/bench_cpu.py [--database-url URL] [--jobs 30000] [--slots 2]
        [--concurrency 128] [--governed] [--functions] [-- extra worker flags]

Throughput on a shared machine moves with whatever else runs there; CPU per job is the work
itself, which other load hardly changes, so it is the figure to compare two trees with
(`PYTHONPATH=/other/tree` measures another tree, as in bench_fleet.py). One drain: the scratch
database `wh_bench_cpu` gets `--jobs` async no-op jobs (with `--governed`, in a queue with
max_active=64, max_active_per_key=4 over 100 keys), then `python -m workhorse worker
bench_worker:app` drains them and gets SIGTERM.

  worker    the supervisor and its slots: user + system CPU from wait4() (slots are its reaped
            children), over the jobs
  backends  user + system CPU of the database's backends (/proc/PID/stat, read just before the
            worker stops; the server must be on this host), over the jobs
  rate      jobs / (last finished_at - first started_at), as in bench_worker.py

`--functions` also sets `track_functions = 'pl'` on the scratch database and prints each
PL/pgSQL function's calls and total and self time per job (pg_stat_user_functions).

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as c  # noqa: E402
import bench_worker as bw  # noqa: E402

from workhorse import ConcurrencyPolicyDefinition, Queue  # noqa: E402


def backend_cpu(conn: psycopg.Connection[Any], dbname: str) -> float:
    """Seconds of CPU used so far by the database's other backends (those on this host)."""
    total = 0
    rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s "
                        "AND pid <> pg_backend_pid()", (dbname,)).fetchall()
    for (pid,) in rows:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def drain(url: str, dbname: str, args: argparse.Namespace) -> dict[str, float]:
    queue = bw.GOVERNED if args.governed else bw.UNGOVERNED
    with psycopg.connect(url, autocommit=True) as conn:
        if args.governed:
            Queue(conn).sync_concurrency_policies("bench", [ConcurrencyPolicyDefinition(
                queue=queue, max_active=bw.MAX_ACTIVE, max_active_per_key=bw.PER_KEY)])
        bw.fill(conn, queue, args.jobs, keyed=args.governed)
        if args.functions:
            conn.execute(sql.SQL("ALTER DATABASE {} SET track_functions = 'pl'").format(
                sql.Identifier(dbname)))
        conn.execute("SELECT pg_stat_reset()")
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
        worker = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "worker", "bench_worker:app", "--slots",
             str(args.slots), "--concurrency", str(args.concurrency), "--queues", queue,
             "--lease", "60s", *args.extra],
            cwd=HERE, env={**os.environ, "WORKHORSE_DATABASE_URL": url},
            stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + max(120.0, args.jobs / 200)
            while True:
                time.sleep(0.2)
                (left,) = conn.execute(
                    "SELECT count(*) FROM workhorse.jobs "
                    "WHERE status IN ('ready', 'active', 'scheduled')").fetchone()  # type: ignore[misc]
                if left == 0:
                    break
                if worker.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise SystemExit(f"the worker stopped or stalled ({left} left):\n"
                                     f"{log.read().decode(errors='replace')[-3000:]}")
            backends = backend_cpu(conn, dbname)
            worker.send_signal(signal.SIGTERM)
            _, _, usage = os.wait4(worker.pid, 0)
        finally:
            if worker.returncode is None and worker.poll() is None:
                worker.kill()
            log.close()
        (span,) = conn.execute("SELECT extract(epoch FROM max(finished_at) - min(started_at)) "
                               "FROM workhorse.jobs").fetchone()  # type: ignore[misc]
        result = {"rate": args.jobs / float(span),
                  "worker_us": (usage.ru_utime + usage.ru_stime) / args.jobs * 1e6,
                  "backends_us": backends / args.jobs * 1e6}
        if args.functions:
            time.sleep(1.0)  # backends report their function counters at exit, within a second
            table = c.Table("PL/pgSQL functions, per job",
                            ["function", "calls", "total µs/job", "self µs/job"])
            for name, calls, total, self_time in conn.execute(
                    "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions "
                    "ORDER BY self_time DESC LIMIT 12").fetchall():
                table.add(name, calls, f"{total * 1000 / args.jobs:.1f}",
                          f"{self_time * 1000 / args.jobs:.1f}")
            result["table"] = table  # type: ignore[assignment]
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    c.add_common_args(parser, "wh_bench_cpu")
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--governed", action="store_true")
    parser.add_argument("--functions", action="store_true")
    parser.add_argument("extra", nargs="*", help="more worker flags, after --")
    args = parser.parse_args()
    printer = c.Printer(args.format)
    server_url, _ = c.resolve_server_url(args.database_url)
    with c.scratch_database(server_url, args.db_name, args.keep_db) as url:
        figures = drain(url, args.db_name, args)
    kind = "governed (64 / per-key 4 x 100 keys)" if args.governed else "ungoverned"
    printer.line(f"{kind}, {args.jobs} no-op jobs, --slots {args.slots} --concurrency "
                 f"{args.concurrency} {' '.join(args.extra)}: {c.rate(figures['rate'])} jobs/s; "
                 f"worker {figures['worker_us']:.0f} µs/job, backends "
                 f"{figures['backends_us']:.0f} µs/job")
    if "table" in figures:
        printer.table(figures["table"])  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
