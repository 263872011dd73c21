"""Results and retention: does pruning block claims, and how soon does get() return?

    .venv/bin/python benchmarks/bench_results.py [--database-url URL] [--old 1000000]

Two cases, in the scratch database `wh_bench_results`:
  claim during prune   claim+complete latency (batch 10, a governed queue, 4 keys) measured for
                       a few seconds with no prune running, then while `Queue.prune_jobs`
                       deletes `--old` expired finished jobs in batches of 5,000 (as supervisors
                       do)
  get() latency        a job is completed on one connection; the time until `JobHandle.get()`
                       returns in this process (through the results listener), over many jobs;
                       p50/p99 of completion commit -> get() return

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from workhorse import App, ConcurrencyPolicyDefinition, EnqueueOptions, Queue


def _claim_latencies(url: str, seconds: float) -> list[float]:
    out: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            q.enqueue_many([("t", {}, EnqueueOptions(queue="live", concurrency_key=f"k{i % 4}"))
                            for i in range(10)])
            t0 = time.perf_counter()
            jobs = q.claim("live", 10, 30)
            q.complete_many([(j.id, j.fence, None) for j in jobs])
            out.append(time.perf_counter() - t0)
    return out


def _fill_old(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, payload, status, finished_at, expires_at)"
        " SELECT 't', 'history', '{}', 'succeeded', now() - interval '2 days',"
        " now() - interval '1 day' FROM generate_series(1, %s)", (n,))
    conn.execute("VACUUM ANALYZE workhorse.jobs")


def _prune_all(url: str, done: threading.Event, deleted: list[int]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        while True:
            n = q.prune_jobs(5000)
            if n < 0:
                time.sleep(0.01)
                continue
            deleted.append(n)
            if n < 5000:
                break
    done.set()


def claim_during_prune(url: str, old: int, printer: c.Printer) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        Queue(conn).sync_concurrency_policies("bench", [
            ConcurrencyPolicyDefinition("live", max_active=64, max_active_per_key=16)])
        _fill_old(conn, old)
    quiet = _claim_latencies(url, 4.0)
    done = threading.Event()
    deleted: list[int] = []
    started = time.monotonic()
    pruner = threading.Thread(target=_prune_all, args=(url, done, deleted))
    pruner.start()
    busy: list[float] = []
    while not done.is_set():
        busy += _claim_latencies(url, 0.5)
    pruner.join()
    prune_seconds = time.monotonic() - started
    table = c.Table("claim+complete latency (batch 10), ms",
                    ["case", "n", "p50", "p99", "max"])
    for name, values in (("no prune", quiet), (f"while pruning {c.count(old)} rows", busy)):
        table.add(name, len(values), c.ms(c.percentile(values, 50)),
                  c.ms(c.percentile(values, 99)), c.ms(max(values) if values else float("nan")))
    table.notes.append(f"pruned {sum(deleted):,} rows in {prune_seconds:.1f} s "
                       f"({sum(deleted) / prune_seconds:,.0f} rows/s, batches of 5,000)")
    printer.table(table)


def get_latency(url: str, jobs: int, printer: c.Printer) -> None:
    app = App("bench-results", database_url=url)

    @app.task(name="noop", queue="results")
    def noop() -> None: ...

    latencies: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        for _ in range(jobs):
            handle = noop.delay()
            [job] = q.claim("results", 1, 30)
            box: list[float] = []

            def finish(job: Any = job, box: list[float] = box) -> None:
                time.sleep(0.002)  # get() is waiting by now
                q.complete(job.id, job.fence, 1)
                box.append(time.perf_counter())

            thread = threading.Thread(target=finish)
            thread.start()
            handle.get(timeout=10)
            returned = time.perf_counter()
            thread.join()
            latencies.append(returned - box[0])
    app.close()
    table = c.Table("get(): completion committed -> get() returned, ms",
                    ["jobs", "p50", "p99", "max"])
    table.add(jobs, c.ms(c.percentile(latencies, 50)), c.ms(c.percentile(latencies, 99)),
              c.ms(max(latencies)))
    printer.table(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, "wh_bench_results")
    parser.add_argument("--old", type=int, default=1_000_000, help="expired rows to prune")
    parser.add_argument("--gets", type=int, default=300, help="get() calls to time")
    args = parser.parse_args()
    server, where = c.resolve_server_url(args.database_url)
    printer = c.Printer(args.format)
    printer.heading(f"results benchmark on {c.describe_url(server)} ({where})")
    with c.scratch_database(server, args.db_name, args.keep_db) as url:
        claim_during_prune(url, args.old, printer)
        get_latency(url, args.gets, printer)


if __name__ == "__main__":
    main()
