"""What `prepare=False` costs on a direct connection: the worker's hot statements with psycopg's
automatic preparing (its default, prepare_threshold=5) against never preparing (what workhorse
does, so that it works through PgBouncer in transaction mode).

    .venv/bin/python benchmarks/bench_prepare.py [--database-url URL] [--rounds 20] [--batch 200]

One connection, one process. Each round runs `--batch` cycles of enqueue 1, claim 1, heartbeat,
complete (4 statements) prepared, then the same unprepared (the order alternates by round), so
that a shared machine's drift hits both alike. Prints the median per-cycle time of each and the
ratio; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from workhorse import EnqueueOptions, _ops


def _drive(conn: psycopg.Connection[Any], operation: Any, prepare: bool | None) -> Any:
    """`_ops.drive`, with psycopg's `prepare` argument chosen (None: its automatic default)."""
    try:
        statement, params = next(operation)
        while True:
            with conn.cursor() as cur:
                cur.execute(statement, params, prepare=prepare)
                rows = cur.fetchall() if cur.description is not None else []
            statement, params = operation.send(rows)
    except StopIteration as stop:
        return stop.value


def cycle(conn: psycopg.Connection[Any], prepare: bool | None) -> None:
    _drive(conn, _ops.enqueue_many([("bench.noop", {}, EnqueueOptions(queue="prep"))]), prepare)
    [job] = _drive(conn, _ops.claim("prep", 1, 30.0), prepare)
    _drive(conn, _ops.heartbeat([(job.id, job.fence, 30.0)]), prepare)
    _drive(conn, _ops.complete([(job.id, job.fence, None)]), prepare)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_prepare")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    server_url, source = c.resolve_server_url(args.database_url)
    timings: dict[str, list[float]] = {"prepared (psycopg default)": [], "prepare=False": []}
    with c.scratch_database(server_url, args.db_name, args.keep_db) as url, psycopg.connect(
            url, autocommit=True) as conn:
        for _ in range(10):  # warm up both paths, and let psycopg prepare
            cycle(conn, None)
            cycle(conn, False)
        for round_ in range(args.rounds):
            order = [None, False] if round_ % 2 == 0 else [False, None]
            for prepare in order:
                started = time.perf_counter()
                for _ in range(args.batch):
                    cycle(conn, prepare)
                per_cycle = (time.perf_counter() - started) / args.batch * 1000
                timings["prepare=False" if prepare is False else
                        "prepared (psycopg default)"].append(per_cycle)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(f"server {c.describe_url(url)} ({source}); {args.rounds} rounds x {args.batch} cycles "
          "of enqueue + claim + heartbeat + complete")
    for name, value in medians.items():
        print(f"  {name:28} {value:7.3f} ms per cycle (median of rounds)")
    ratio = medians["prepare=False"] / medians["prepared (psycopg default)"]
    print(f"  prepare=False / prepared = {ratio:.3f}")


if __name__ == "__main__":
    main()
