"""Schedules: what one supervisor's firing pass costs at 10 and at 10,000 schedules.

    .venv/bin/python benchmarks/bench_schedules.py [--database-url URL] [--passes 200]

In the scratch database `wh_bench_schedules`, for each size N (10, then 10,000 schedules in the
namespace fired, and as many again in another namespace, all `every="1h"`):
  idle pass     a firing pass with nothing due: the one a supervisor runs every second
  10 due        a pass that fires 10 due schedules (10 jobs, pointers moved), the other N-10
                not due
and EXPLAIN (ANALYZE, BUFFERS) of the pass's due-schedules read at the largest size, which must
read `schedules_due_idx` (written to plans/schedules_due_10k.txt).

Each pass is timed end to end as the supervisor runs it (`Scheduler.fire`: its transaction, the
due read, the fire function, the next-due read). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from workhorse import Queue, ScheduleDefinition, _sql
from workhorse.worker.scheduler import Scheduler

SIZES = (10, 10_000)
DUE = 10
PLAN_FILE = Path(__file__).resolve().parent / "plans" / "schedules_due_10k.txt"


def _definitions(prefix: str, n: int) -> list[ScheduleDefinition]:
    return [ScheduleDefinition(f"{prefix}-{i}", "tasks.tick", every="1h", args=[i])
            for i in range(n)]


def _make_due(conn: psycopg.Connection[Any], names: list[str]) -> None:
    """These schedules' pointers back on this hour's occurrence, its earlier firing forgotten."""
    conn.execute("UPDATE workhorse.schedules SET next_run_at = date_trunc('hour', now()) "
                 "WHERE name = ANY(%s)", (names,))
    conn.execute("DELETE FROM workhorse.schedule_runs r USING workhorse.schedules s "
                 "WHERE r.schedule_id = s.id AND s.name = ANY(%s)", (names,))


def measure(url: str, n: int, passes: int, gate: c.QuietGate
            ) -> tuple[list[float], list[float], float, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE workhorse.schedules, workhorse.schedule_runs, workhorse.jobs")
        queue = Queue(conn)
        started = time.perf_counter()
        queue.sync_schedules("bench", _definitions("bench", n))
        sync_s = time.perf_counter() - started
        queue.sync_schedules("other", _definitions("other", n))
        conn.execute("VACUUM ANALYZE workhorse.schedules")
        scheduler = Scheduler("bench")
        scheduler.fire(conn)  # warm: statements parsed, functions compiled
        gate.wait()
        idle = []
        for _ in range(passes):
            t0 = time.perf_counter()
            scheduler.fire(conn)
            idle.append(time.perf_counter() - t0)
        due = []
        fired = 0
        for round_ in range(passes // 4):
            names = [f"bench-{(round_ * DUE + k) % n}" for k in range(DUE)]
            _make_due(conn, names)
            t0 = time.perf_counter()
            firing = scheduler.fire(conn)
            due.append(time.perf_counter() - t0)
            fired += len(firing.fired)
    return idle, due, sync_s, fired


def plan(url: str) -> str:
    with psycopg.connect(url) as conn:  # a transaction, rolled back: the read locks rows
        _make_due(conn, [f"bench-{k}" for k in range(DUE)])
        explain = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ")
        rows = conn.execute(explain + _sql.statement("schedules_due"),
                            {"namespace": "bench", "limit": 500}).fetchall()
        rows += [("",), ("-- schedules_next_due.sql",)]
        rows += conn.execute(explain + _sql.statement("schedules_next_due"),
                             ("bench",)).fetchall()
        conn.rollback()
    return "\n".join(row[0] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, "wh_bench_schedules")
    parser.add_argument("--passes", type=int, default=200, help="idle passes timed per size")
    parser.add_argument("--quiet-wait", type=float, default=20.0)
    args = parser.parse_args()
    server, where = c.resolve_server_url(args.database_url)
    printer = c.Printer(args.format)
    printer.heading(f"schedules benchmark on {c.describe_url(server)} ({where})")
    with c.scratch_database(server, args.db_name, args.keep_db) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            printer.facts("server", c.server_facts(conn))
            printer.line(f"load before: {c.machine_load(conn)}")
        gate = c.QuietGate(args.quiet_wait)
        table = c.Table("one firing pass, ms (namespace of N schedules, N more in another)",
                        ["N", "sync N (s)", "idle p50", "idle p99", f"{DUE} due p50",
                         f"{DUE} due p99", "jobs fired"])
        for n in SIZES:
            idle, due, sync_s, fired = measure(url, n, args.passes, gate)
            table.add(c.count(n), f"{sync_s:.2f}", c.ms(c.percentile(idle, 50)),
                      c.ms(c.percentile(idle, 99)), c.ms(c.percentile(due, 50)),
                      c.ms(c.percentile(due, 99)), c.count(fired))
        printer.table(table)
        text = plan(url)
        PLAN_FILE.write_text(f"-- schedules_due.sql, {c.count(SIZES[-1])} schedules in the "
                             f"namespace (and as many in another), {DUE} due\n{text}\n")
        printer.line(f"plan of the due read at {c.count(SIZES[-1])} "
                     f"(written to {PLAN_FILE.name}):")
        printer.line(text)
        printer.line(gate.summary())


if __name__ == "__main__":
    main()
