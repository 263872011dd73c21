"""The worker keeps `jobs`' planner statistics fresh (workhorse/worker/_registry.py,
jobs_statistics_stale.sql; issue #40).

Without statistics (a new install, a bulk enqueue, autovacuum off as on the CI machine or not yet
round) the planner sees every partial index of `jobs` as a row or two, and a claim may walk a
whole ready backlog: a 300,000-job drain ran at 4-5k jobs/s instead of 36-40k.

1. A supervisor's registry ANALYZEs `jobs` when it was never analyzed, and again once more rows
   changed than it held at its last analysis; not otherwise.
2. Why it matters, on the claim itself: the per-key claim of a queue of 20,000 ready jobs on a
   table never analyzed reads the queue's ready backlog (the checker below sees it: the broken
   variant is the table as a bulk enqueue leaves it); after the registry's analysis it reads no
   more than a few rows a job.
3. The plain queue's activation looks its rows up by id whatever the statistics say.
"""

from __future__ import annotations

import re
import time
from typing import Any

import psycopg

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _ops
from workhorse.worker._registry import Registry

TASKS = ["a", "t", "z"]


def _registry() -> Registry:
    return Registry(app="stats", host="h", pid=1, slots=1, queues=["busy"], stats=dict)


def _last_analyze(conn: psycopg.Connection[Any]) -> Any:
    row = conn.execute("SELECT last_analyze FROM pg_stat_user_tables"
                       " WHERE relid = 'workhorse.jobs'::regclass").fetchone()
    assert row is not None
    return row[0]


def _enqueue(conn: psycopg.Connection[Any], n: int, *, keys: int = 0, queue: str = "busy"
             ) -> None:
    q = Queue(conn)
    for start in range(0, n, 5000):
        q.enqueue_many([
            ("t", {"n": i}, EnqueueOptions(queue=queue,
                                           concurrency_key=f"k{i % keys}" if keys else None))
            for i in range(start, min(start + 5000, n))])
    # This session's counts reach the cumulative statistics at its next statement.
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")


def _stale(conn: psycopg.Connection[Any]) -> bool:
    return bool(_ops.execute(conn, _ops.jobs_statistics_stale()))


def test_the_registry_analyzes_jobs_when_never_analyzed_and_when_much_changed(
    conn: psycopg.Connection[Any],
) -> None:
    # Autovacuum (on in the embedded server) would analyze behind the registry's back: an
    # autoanalyze between two steps below resets the changes counted since (seen in CI once).
    conn.execute("ALTER TABLE workhorse.jobs SET (autovacuum_enabled = off)")
    try:
        registry = _registry()
        assert _last_analyze(conn) is None and _stale(conn)  # a new database: never analyzed
        _enqueue(conn, 2000)
        registry._keep_statistics(conn)
        first = _last_analyze(conn)
        assert first is not None and not _stale(conn)

        _enqueue(conn, 1500)  # fewer changes than the 2,000 rows it held: left to autovacuum
        registry._keep_statistics(conn)
        assert _last_analyze(conn) == first and not _stale(conn)

        time.sleep(0.01)
        _enqueue(conn, 1000)  # 2,500 changed since, more than it held
        assert _stale(conn)
        registry._keep_statistics(conn)
        assert _last_analyze(conn) > first and not _stale(conn)
    finally:
        conn.execute("ALTER TABLE workhorse.jobs RESET (autovacuum_enabled)")


def _rows_read(conn: psycopg.Connection[Any], queue: str, limit: int) -> int:
    """The most rows any scan of `jobs` read (returned or filtered out) in one claim of `limit`
    jobs of `queue`, from auto_explain's plans of every statement the claim ran."""
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting in ("auto_explain.log_nested_statements = on", "auto_explain.log_analyze = on",
                    "auto_explain.log_level = 'notice'", "auto_explain.log_min_duration = 0"):
        conn.execute(f"SET {setting}")
    try:
        jobs = _ops.execute(conn, _ops.claim(queue, limit, 60.0, TASKS))
    finally:
        conn.execute("SET auto_explain.log_min_duration = -1")
    assert len(jobs) == limit
    most = 0
    for plan in notices:
        for node in re.split(r"\n\s*->", plan):
            if " on jobs " not in node:
                continue
            # (PostgreSQL 18 prints rows as a mean a loop, with decimals.)
            rows = re.search(r"actual time=[\d.]+\.\.[\d.]+ rows=([\d.]+) loops=(\d+)", node)
            removed = re.search(r"Rows Removed by Filter: (\d+)", node)
            if rows:
                read = round(float(rows.group(1)) * int(rows.group(2)))
                most = max(most, read + (int(removed.group(1)) if removed else 0))
    return most


def _keyed_backlog(conn: psycopg.Connection[Any]) -> None:
    Queue(conn).sync_concurrency_policies("stats", [
        ConcurrencyPolicyDefinition("busy", max_active=64, max_active_per_key=4)])
    _enqueue(conn, 20_000, keys=100)


def test_after_the_analysis_a_keyed_claim_reads_a_few_rows_a_job(
    conn: psycopg.Connection[Any],
) -> None:
    _keyed_backlog(conn)
    _registry()._keep_statistics(conn)
    # The first claim after an enqueue refreshes the heads of the keys it named: one row each.
    assert _rows_read(conn, "busy", 16) <= 1000


def test_the_rows_read_check_fails_on_a_table_never_analyzed(
    conn: psycopg.Connection[Any],
) -> None:
    """The broken variant: the same claim on the table as the bulk enqueue left it."""
    _keyed_backlog(conn)
    assert _last_analyze(conn) is None
    assert _rows_read(conn, "busy", 16) >= 19_000


def test_the_plain_activation_looks_its_rows_up_by_id_without_statistics(
    conn: psycopg.Connection[Any],
) -> None:
    Queue(conn).sync_concurrency_policies("stats", [
        ConcurrencyPolicyDefinition("plain", max_active=64)])
    _enqueue(conn, 20_000, queue="plain")
    assert _last_analyze(conn) is None
    assert _rows_read(conn, "plain", 16) <= 16
