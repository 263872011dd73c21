"""Drains of a `jobs` table that was never analyzed (issue #40, docs/architecture.md "Laps,
prefetch and planner statistics").

    .venv/bin/python benchmarks/bench_statistics.py [--database-url URL] [--jobs 100000]

The other benchmarks VACUUM ANALYZE after filling; a user (and an acceptance check) enqueues and
starts a worker, and where autovacuum is off (as on the CI machine) or has not come round, the
planner has no statistics for `jobs`. For each case, a fresh scratch database, `--jobs` no-op
jobs enqueued in batches of 5,000, no ANALYZE, then one `workhorse worker _fleet_app:app --slots
2 --concurrency 32` (the app declares five tasks, so claims probe for another app's jobs); the
rate is sampled every 2 s from the succeeded count, and the table says whether `jobs` had been
analyzed by then (the worker does it itself since this change). Cases:
  free     an ungoverned queue
  plain    max_active=64
  keyed    max_active=64, 4 a key, 100 keys

Compare two trees with `PYTHONPATH=/other/tree`. Prints figures; asserts nothing.
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

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue

HERE = Path(__file__).resolve().parent
TASK = "fleet.noop_async"  # _fleet_app.py's no-op
QUEUE = "stats"
CASES: dict[str, ConcurrencyPolicyDefinition | None] = {
    "free": None,
    "plain": ConcurrencyPolicyDefinition(QUEUE, max_active=64),
    "keyed": ConcurrencyPolicyDefinition(QUEUE, max_active=64, max_active_per_key=4),
}
SAMPLE = 2.0


def succeeded(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'").fetchone()
    return int(row[0]) if row else 0


def analyzed(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL"
                       " FROM pg_stat_user_tables WHERE relid = 'workhorse.jobs'::regclass"
                       ).fetchone()
    return bool(row and row[0])


def run_case(url: str, case: str, jobs: int, seconds: float) -> list[str]:
    policy = CASES[case]
    with psycopg.connect(url, autocommit=True) as conn:
        queue = Queue(conn)
        if policy is not None:
            queue.sync_concurrency_policies("fleet", [policy])
        for start in range(0, jobs, 5000):
            queue.enqueue_many([
                (TASK, {"args": [], "kwargs": {}},
                 EnqueueOptions(queue=QUEUE, concurrency_key=f"k{i % 100}"
                                if policy is not None and policy.max_active_per_key else None))
                for i in range(start, min(start + 5000, jobs))])
        env = {**os.environ, "WORKHORSE_DATABASE_URL": url}
        worker = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "worker", "_fleet_app:app", "--queues", QUEUE,
             "--slots", "2", "--concurrency", "32", "--log-level", "warning"],
            cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rates = []
        try:
            done = succeeded(conn)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and done < jobs:
                time.sleep(SAMPLE)
                now = succeeded(conn)
                rates.append((now - done) / SAMPLE)
                done = now
            was_analyzed = analyzed(conn)
        finally:
            c.stop_worker(worker)
    # The first sample includes the worker's start, the last (when the drain ended) its end.
    steady = (rates[1:-1] if len(rates) > 2 else rates) if done >= jobs else rates[1:] or rates
    return [case, c.count(jobs), " ".join(c.rate(r) for r in rates),
            c.rate(max(steady) if steady else 0), "yes" if was_analyzed else "no"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, "wh_bench_statistics")
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs a case (default 100k)")
    parser.add_argument("--seconds", type=float, default=12.0,
                        help="sample for at most this long a case (default 12)")
    parser.add_argument("--only", default=",".join(CASES),
                        help=f"cases, comma-separated (default {','.join(CASES)})")
    args = parser.parse_args()
    printer = c.Printer(args.format)
    server_url, origin = c.resolve_server_url(args.database_url)
    table = c.Table(
        f"no-op drains of a jobs table never analyzed ({origin}; workhorse from "
        f"{Path(__import__('workhorse').__file__).parent})",
        ["case", "jobs", f"jobs/s every {SAMPLE:.0f} s", "best, start and end left out",
         "analyzed"])
    for case in args.only.split(","):
        if case not in CASES:
            sys.exit(f"unknown case {case!r}: one of {', '.join(CASES)}")
        with c.scratch_database(server_url, args.db_name, keep=args.keep_db) as url:
            table.add(*run_case(url, case, args.jobs, args.seconds))
    printer.table(table)


if __name__ == "__main__":
    main()
