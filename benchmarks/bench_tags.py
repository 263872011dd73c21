"""Tags (issue #43, docs/design.md "Tags"): what finding a tag's jobs costs on a big table, and
what tags cost the enqueue.

    .venv/bin/python benchmarks/bench_tags.py [--database-url URL] [--jobs 1000000] [--format plain]

1. List. A scratch database gets `--jobs` finished jobs that share one tag ("acme", and each one
   of 1,000 order tags), plus as many untagged ones, inserted by SQL with their lookup rows
   (VACUUM ANALYZEd). Then `Queue.list_jobs(tag=...)` on an autocommit connection, client-side
   wall time, p50 and p99 of 200 calls, for: the newest 50 of the big tag; the newest 50 of it in
   one queue; the newest 50 of one order tag (1,000 jobs); the failed jobs of the big tag (about
   1 in 1,000 of them: the walk reads the tag's entries until 50 match, or all of them).
   Then the same lists again once the succeeded jobs (all but the last hour's) moved to history.
2. Enqueue. `enqueue_many` of 1,000 jobs with no tag, and with two tags each, p50 of 20 batches
   alternating.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from _common import (
    Printer,
    Table,
    add_common_args,
    describe_url,
    percentile,
    resolve_server_url,
    scratch_database,
    timed_calls,
    try_checkpoint,
)

from workhorse import EnqueueOptions, Queue

EMPTY: dict[str, Any] = {"args": [], "kwargs": {}}


def show(out: Printer, title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]
         ) -> None:
    table = Table(title, list(columns))
    for row in rows:
        table.add(*row)
    out.table(table)


def fill(conn: psycopg.Connection[Any], jobs: int) -> None:
    """`jobs` tagged finished jobs (every 1,000th failed) and as many untagged, a day old and
    older, over two queues."""
    step = 200_000
    for start in range(0, jobs, step):
        end = min(start + step, jobs)
        conn.execute(
            "INSERT INTO workhorse.jobs (task, queue, payload, status, finished_at, tags)"
            " SELECT 'b.t', CASE WHEN g %% 2 = 0 THEN 'q0' ELSE 'q1' END, '{}',"
            "        CASE WHEN g %% 1000 = 0 THEN 'failed' ELSE 'succeeded' END,"
            "        now() - make_interval(secs => 172800.0 * g / %s),"
            "        ARRAY['acme', 'order-' || (g %% 1000)]"
            " FROM generate_series(%s::bigint, %s::bigint) g", (jobs, start, end - 1))
        conn.execute(
            "INSERT INTO workhorse.jobs (task, queue, payload, status, finished_at)"
            " SELECT 'b.t', 'q0', '{}', 'succeeded',"
            "        now() - make_interval(secs => 172800.0 * g / %s)"
            " FROM generate_series(%s::bigint, %s::bigint) g", (jobs, start, end - 1))
    conn.execute("INSERT INTO workhorse.job_tags (tag, job_id)"
                 " SELECT unnest(tags), id FROM workhorse.jobs WHERE tags IS NOT NULL")
    conn.execute("VACUUM ANALYZE workhorse.jobs")
    conn.execute("VACUUM ANALYZE workhorse.job_tags")
    try_checkpoint(conn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, "wh_bench_tags")
    parser.add_argument("--jobs", type=int, default=1_000_000,
                        help="tagged jobs (as many untagged beside them; default %(default)s)")
    args = parser.parse_args()
    server, source = resolve_server_url(args.database_url)
    out = Printer(args.format)
    with scratch_database(server, args.db_name, args.keep_db) as url, \
            psycopg.connect(url, autocommit=True) as conn:
        print(f"server {describe_url(url)} ({source}); {args.jobs:,} tagged jobs")
        started = time.perf_counter()
        fill(conn, args.jobs)
        print(f"filled in {time.perf_counter() - started:.0f} s")
        q = Queue(conn)
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("newest 50 of a tag on every job", lambda: q.list_jobs(tag="acme", limit=50)),
            ("... in one queue", lambda: q.list_jobs(tag="acme", queue="q1", limit=50)),
            (f"newest 50 of a tag on {args.jobs // 1000:,} jobs",
             lambda: q.list_jobs(tag="order-7", limit=50)),
            ("failed jobs of the big tag (1 in 1,000)",
             lambda: q.list_jobs(tag="acme", status="failed", limit=50)),
        ]
        rows = []
        for label, action in cases:
            action()  # warm
            times = timed_calls(action, 200)
            rows.append((label, f"{percentile(times, 50) * 1000:.2f} ms",
                         f"{percentile(times, 99) * 1000:.2f} ms"))
        show(out, "list by tag (client wall time, 200 calls)", ("case", "p50", "p99"), rows)

        # The same lists once the succeeded jobs moved to history (docs/design.md "History"):
        # their tag rows are in job_history_tags, a partition a day, walked and merged.
        started = time.perf_counter()
        moved = 0
        while (batch := q.move_to_history(5000)) > 0:
            moved += batch
        conn.execute("VACUUM ANALYZE workhorse.jobs")
        conn.execute("ANALYZE workhorse.job_history")
        conn.execute("ANALYZE workhorse.job_history_tags")
        print(f"moved {moved:,} jobs to history in {time.perf_counter() - started:.0f} s")
        rows = []
        for label, action in cases:
            action()
            times = timed_calls(action, 200)
            rows.append((label, f"{percentile(times, 50) * 1000:.2f} ms",
                         f"{percentile(times, 99) * 1000:.2f} ms"))
        show(out, "list by tag, the succeeded jobs in history (client wall time, 200 calls)",
             ("case", "p50", "p99"), rows)

        plain = [("b.e", EMPTY, EnqueueOptions(queue="e"))] * 1000
        with_tags = [("b.e", EMPTY, EnqueueOptions(queue="e", tags=["acme", "order-1"]))] * 1000
        spans: dict[str, list[float]] = {"no tags": [], "two tags each": []}
        for _ in range(20):
            for label, batch in (("no tags", plain), ("two tags each", with_tags)):
                spans[label] += timed_calls(lambda batch=batch: q.enqueue_many(batch), 1)
        show(out, "enqueue_many of 1,000 jobs (p50 of 20)", ("jobs", "p50", "per job"),
                  [(label, f"{statistics.median(v) * 1000:.1f} ms",
                    f"{statistics.median(v) * 1000:.1f} µs")
                   for label, v in spans.items()])


if __name__ == "__main__":
    main()
