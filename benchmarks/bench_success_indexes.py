"""What a success's index entries cost (issue #40, docs/architecture.md "Behind the lock, the
CPU").

    .venv/bin/python benchmarks/bench_success_indexes.py [--database-url URL] [--jobs 60000]

A success rewrites its job's row, and PostgreSQL adds an entry for the new row version to every
index whose predicate it matches: the primary key and four partial indexes that only finished
jobs enter, each serving an operator's read (the dashboard's task search, the history mover,
exports and `jobs prune --older-than`, retention). This drains the same backlog of no-op jobs
(an ungoverned queue, one `workhorse worker _fleet_app:app --slots 2 --concurrency 32`) from a
fresh scratch database as shipped and from one where those four indexes were dropped after the
schema was installed, the two alternating for `--rounds` rounds, and reports the rate and the CPU
a job of the server and of the worker between the first and the last tenth of the drain.

Dropping the indexes is an instrument, not a setting: the reads they serve become scans. Compare
two trees with `PYTHONPATH=/other/tree`. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as c
import psycopg

from workhorse import EnqueueOptions, Queue

HERE = Path(__file__).resolve().parent
TASK = "fleet.noop_async"  # _fleet_app.py's no-op
QUEUE = "success-indexes"
# The partial indexes a succeeded job enters beside jobs_pkey (docs/architecture.md).
SUCCESS_INDEXES = ("jobs_succeeded_task_idx", "jobs_finished_idx", "jobs_history_due_idx",
                   "jobs_expires_idx")
VARIANTS = ("as shipped", "without the four")
BATCH = 5000


def succeeded(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'").fetchone()
    return int(row[0]) if row else 0


def wait_for(conn: psycopg.Connection[Any], done: int, worker: subprocess.Popen[bytes],
             timeout: float = 600.0) -> float:
    """time.time() once `done` jobs have succeeded."""
    deadline = time.monotonic() + timeout
    while succeeded(conn) < done:
        if worker.poll() is not None:
            sys.exit(f"the worker exited with {worker.returncode}")
        if time.monotonic() > deadline:
            sys.exit(f"fewer than {done} jobs succeeded in {timeout:.0f} s")
        time.sleep(0.02)
    return time.time()


def run(url: str, variant: str, jobs: int) -> list[str]:
    with c.monitor(url) as conn:
        queue = Queue(conn)
        if variant == VARIANTS[1]:
            for index in SUCCESS_INDEXES:
                conn.execute(f"DROP INDEX workhorse.{index}")
        options = EnqueueOptions(queue=QUEUE)
        for start in range(0, jobs, BATCH):
            queue.enqueue_many([(TASK, {"args": [], "kwargs": {}}, options)]
                               * min(BATCH, jobs - start))
        conn.execute("VACUUM ANALYZE workhorse.jobs")
        c.try_checkpoint(conn)
        env = {**os.environ, "WORKHORSE_DATABASE_URL": url}
        worker = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "worker", "_fleet_app:app", "--queues", QUEUE,
             "--slots", "2", "--concurrency", "32", "--log-level", "warning"],
            cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with c.CpuSampler(url, c.postmaster_pid(conn), lambda: [worker.pid]) as sampler:
                first, last = jobs // 10, jobs - jobs // 10
                start = wait_for(conn, first, worker)
                end = wait_for(conn, last, worker)
        finally:
            c.stop_worker(worker)
    window = sampler.window(start, end)
    done = last - first
    return [variant, c.rate(done / (end - start)),
            f"{window.per_job_us(window.server, done):.0f} µs",
            f"{window.per_job_us(window.workers, done):.0f} µs",
            f"{window.cores(window.server):.2f} + {window.cores(window.workers):.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, "wh_bench_success_indexes")
    parser.add_argument("--jobs", type=int, default=60_000, help="jobs a drain (default 60k)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both (default 2)")
    args = parser.parse_args()
    if args.jobs < 1000:
        sys.exit("--jobs must be at least 1,000")
    printer = c.Printer(args.format)
    server_url, origin = c.resolve_server_url(args.database_url)
    table = c.Table(
        f"a no-op drain with and without a success's four partial indexes ({origin}; workhorse "
        f"from {Path(__import__('workhorse').__file__).parent})",
        ["schema", "jobs/s", "server CPU a job", "worker CPU a job", "cores busy"])
    for _ in range(args.rounds):
        for variant in VARIANTS:
            with c.scratch_database(server_url, args.db_name, keep=args.keep_db) as url:
                table.add(*run(url, variant, args.jobs))
    printer.table(table)


if __name__ == "__main__":
    main()
