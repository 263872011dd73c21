"""Attempt history's cost to a first-try success (issue #32 item 2): claim + complete of no-op
jobs with the attempt-history trigger in place (this release) and without it (the table as 0.2
wrote it), side by side, interleaved round by round, on one scratch database.

    .venv/bin/python benchmarks/bench_attempts.py [--database-url URL] [--jobs N] [--rounds R]

Each round prefills N ready keyless jobs (INSERT ... SELECT, VACUUM ANALYZE), then one
autocommit connection drains them: `Queue.claim(queue, 32, lease)` then `Queue.complete_many`.
Reported per variant: jobs/s over the drain (median of the rounds), the trigger function's
calls (pg_stat_user_functions, track_functions = 'pl': the WHEN clause must keep it at 0), and
the bytes a succeeded row takes (pg_column_size; attempt_history stays NULL). For contrast, the
fail-then-retry path (one failure, then a success) is timed too: that is where history is
written. Nothing is asserted: the figures go in benchmarks/README.md."""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import _common as c
import psycopg

from workhorse import Queue, _sql

RECORD = _sql.function_name("_record_attempt")
TRIGGER = ("CREATE TRIGGER jobs_attempt_ended AFTER UPDATE ON workhorse.jobs FOR EACH ROW "
           "WHEN (OLD.status = 'active' AND (NEW.status NOT IN ('active', 'succeeded', 'ready') "
           "OR NEW.fence IS DISTINCT FROM OLD.fence)) "
           f"EXECUTE FUNCTION workhorse.{RECORD}()")
BOOM = {"type": "Boom", "message": "no", "traceback": None}


def _set_trigger(conn: psycopg.Connection[Any], on: bool) -> None:
    conn.execute("DROP TRIGGER IF EXISTS jobs_attempt_ended ON workhorse.jobs")
    if on:
        conn.execute(TRIGGER)


def _prefill(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute("TRUNCATE workhorse.jobs")
    conn.execute("INSERT INTO workhorse.jobs (task, queue, payload, status)"
                 " SELECT 't', 'bench', '{}'::jsonb, 'ready' FROM generate_series(1, %s)", (n,))
    conn.execute("VACUUM ANALYZE workhorse.jobs")


def _calls(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.1)  # the backend that ran the trigger flushes its counters when idle
    row = conn.execute("SELECT COALESCE(sum(calls), 0) FROM pg_stat_user_functions"
                       " WHERE funcname = %s", (RECORD,)).fetchone()
    return int(row[0]) if row else 0


def _drain(url: str, fail_first: bool) -> tuple[float, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET track_functions = 'pl'")
        queue = Queue(conn)
        done = 0
        started = time.perf_counter()
        while True:
            claimed = queue.claim("bench", 32, 60.0)
            if not claimed:
                break
            if fail_first:
                for job in claimed:
                    if job.attempts == 1:
                        queue.fail(job.id, job.fence, BOOM, retry_at=c_past())
                done += len(queue.complete_many(
                    [(j.id, j.fence, None) for j in claimed if j.attempts > 1]))
            else:
                done += len(queue.complete_many([(j.id, j.fence, None) for j in claimed]))
        return done / (time.perf_counter() - started), done


# A first-try success's writes, as the claim, a heartbeat and the completion make them.
FIRST_TRY = (
    ("claim", "UPDATE workhorse.jobs SET status = 'active', attempts = attempts + 1,"
     " fence = nextval('workhorse.fence_seq'), started_at = clock_timestamp(),"
     " lease_until = clock_timestamp() + interval '30 s' WHERE id = %s"),
    ("heartbeat", "UPDATE workhorse.jobs SET lease_until = clock_timestamp() + interval '30 s'"
     " WHERE id = %s"),
    ("complete", "UPDATE workhorse.jobs SET status = 'succeeded', result = '1',"
     " finished_at = clock_timestamp(), lease_until = NULL WHERE id = %s"),
)
BEFORE = TRIGGER.replace("AFTER UPDATE", "BEFORE UPDATE").replace(
    f"workhorse.{RECORD}()", "workhorse.bench_noop()")


def _wal(conn: psycopg.Connection[Any], variant: str) -> list[tuple[int, int]]:
    """(WAL records, bytes) of each FIRST_TRY write, this session's own (EXPLAIN ANALYZE WAL),
    the second of two jobs (the first may carry a page's first touch after a checkpoint)."""
    conn.execute("DROP TRIGGER IF EXISTS jobs_attempt_ended ON workhorse.jobs")
    if variant == "after":
        conn.execute(TRIGGER)
    elif variant == "before":
        conn.execute("CREATE OR REPLACE FUNCTION workhorse.bench_noop() RETURNS trigger"
                     " LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$")
        conn.execute(BEFORE)
    found: list[tuple[int, int]] = []
    for _ in range(2):
        row = conn.execute("INSERT INTO workhorse.jobs (task, queue, payload, status)"
                           " VALUES ('t', 'wal', '{}', 'ready') RETURNING id").fetchone()
        assert row is not None
        found = []
        for _, statement in FIRST_TRY:
            plan = conn.execute(f"EXPLAIN (ANALYZE, WAL, FORMAT JSON) {statement}",
                                (row[0],)).fetchone()
            node = plan[0][0]["Plan"] if plan else {}
            found.append((int(node.get("WAL Records", 0)), int(node.get("WAL Bytes", 0))))
    return found


def c_past() -> Any:
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) - timedelta(seconds=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_attempts")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server_url, source = c.resolve_server_url(args.database_url)
    with (c.scratch_database(server_url, args.db_name, keep=args.keep_db) as url,
          psycopg.connect(url, autocommit=True) as conn):
        print(f"bench_attempts on {c.describe_url(url)} ({source}), run at {c.stamp()}")
        print(f"machine: {c.machine_load(conn)}")
        print("\nWAL of a first-try success's writes (records / bytes), this session's own:")
        print(f"{'trigger':32} " + " ".join(f"{name:>12}" for name, _ in FIRST_TRY))
        for variant, label in (("none", "none (as 0.2.0)"), ("after", "AFTER, WHEN (this release)"),
                               ("before", "BEFORE, same WHEN, no-op body")):
            cells = " ".join(f"{f'{r} / {b}':>12}" for r, b in _wal(conn, variant))
            print(f"{label:32} {cells}")
        results: dict[tuple[str, bool], list[float]] = {}
        calls: dict[tuple[str, bool], int] = {}
        sizes: dict[tuple[str, bool], int] = {}
        for _ in range(args.rounds):
            for path in ("first-try success", "fail once, then succeed"):
                n = args.jobs if path == "first-try success" else args.jobs // 4
                for on in (False, True):
                    _set_trigger(conn, on)
                    _prefill(conn, n)
                    conn.execute("SELECT pg_stat_reset()")
                    rate, done = _drain(url, path != "first-try success")
                    assert done == n, (done, n)
                    results.setdefault((path, on), []).append(rate)
                    calls[(path, on)] = _calls(conn)
                    row = conn.execute("SELECT avg(pg_column_size(j.*))::int"
                                       " FROM workhorse.jobs j").fetchone()
                    sizes[(path, on)] = int(row[0]) if row else 0
        print(f"\n{args.jobs:,} jobs a round, {args.rounds} rounds, claim 32 + complete_many,"
              " one connection")
        print(f"{'path':28} {'trigger':8} {'jobs/s (median)':>16} {'rounds':>24}"
              f" {'trigger calls':>14} {'row bytes':>10}")
        for (path, on), rates in results.items():
            shown = ", ".join(f"{r:,.0f}" for r in rates)
            print(f"{path:28} {'on' if on else 'off':8} {statistics.median(rates):>16,.0f}"
                  f" {shown:>24} {calls[(path, on)]:>14,} {sizes[(path, on)]:>10}")


if __name__ == "__main__":
    main()
