"""What passing over another app's jobs costs (issue #24 item 6).

    .venv/bin/python benchmarks/bench_unknown_tasks.py [--database-url URL] [--rounds 5]

1. Claim latency. One claimer on an autocommit connection claims 4 and completes them, timed
   client-side, with 5,000 of its own jobs ready (refilled at the tail, untimed). Per admission
   path, three ways, interleaved round by round on the same database:
     any task    the claim without a task list (a raw `Queue.claim`)
     own tasks   the worker's claim (its app's 20 task names), no other app's jobs in the queue:
                 what the probe for them costs
     behind 10k  the worker's claim with 10,000 of another app's jobs ahead of its own (in 5
                 keys of their own on keyed paths): the filtered walk
   p50 of 200 claims per round, median of the rounds.
2. Enqueue. `enqueue_many` of 1,000 keyless jobs, with and without the index the filter needs
   (`jobs_ready_task_idx`, dropped and recreated between rounds), median of the rounds.

Prints figures; asserts nothing. Needs a database it may fill (default: the test server URL in
WORKHORSE_TEST_DATABASE_URL, else the embedded server's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from typing import Any

import psycopg

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _ops, database

TASKS = [f"b.task{i}" for i in range(20)]
OURS = TASKS[7]
EMPTY: dict[str, Any] = {"args": [], "kwargs": {}}
PATHS = {
    "ungoverned": (None, False),
    "max_active=64": (ConcurrencyPolicyDefinition("q", max_active=64), False),
    "per-key 4": (ConcurrencyPolicyDefinition("q", max_active=64, max_active_per_key=4), True),
    "fair": (ConcurrencyPolicyDefinition("q", max_active=64, fairness="key"), True),
}
WAYS = ("any task", "own tasks", "behind 10k")


def _url(given: str | None) -> str:
    return given or os.environ.get("WORKHORSE_TEST_DATABASE_URL") or database.resolve_url(None)


def _fresh_database(server: str) -> str:
    name = f"wh_bench_unknown_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(server)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def _fill(q: Queue, path: str, way: str) -> None:
    policy, keyed = PATHS[path]
    q.conn.execute("TRUNCATE workhorse.jobs, workhorse.key_heads, workhorse.key_hints,"
                   " workhorse.policies, workhorse.queue_controls, workhorse.rate_starts CASCADE")
    if policy is not None:
        q.sync_concurrency_policies("bench", [policy])
    if way == "behind 10k":
        for start in range(0, 10_000, 2500):
            q.enqueue_many([("a.report", EMPTY, EnqueueOptions(
                queue="q", concurrency_key=f"a{i % 5}" if keyed else None))
                for i in range(start, start + 2500)])
    _refill(q, keyed, 5000)
    q.conn.execute("ANALYZE workhorse.jobs")


def _refill(q: Queue, keyed: bool, n: int) -> None:
    q.enqueue_many([(OURS, EMPTY, EnqueueOptions(
        queue="q", concurrency_key=f"k{i % 100}" if keyed else None)) for i in range(n)])


def _claims(q: Queue, path: str, way: str, n: int) -> float:
    _, keyed = PATHS[path]
    tasks = None if way == "any task" else TASKS
    times = []
    for _ in range(n):
        started = time.perf_counter()
        jobs, _next = _ops.execute(q.conn, _ops.claim_batch("q", 4, 30, tasks))
        times.append(time.perf_counter() - started)
        for job in jobs:
            q.complete(job.id, job.fence)
        _refill(q, keyed, len(jobs))
    return statistics.median(times) * 1000


def _enqueue_round(q: Queue) -> float:
    started = time.perf_counter()
    q.enqueue_many([(OURS, EMPTY, EnqueueOptions(queue="e"))] * 1000)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    url = _fresh_database(_url(args.database_url))
    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        q.install_schema()
        results: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for path in PATHS:
                for way in WAYS:
                    _fill(q, path, way)
                    results.setdefault((path, way), []).append(_claims(q, path, way, 200))
        print("claim of 4 + complete, p50 ms (median of rounds)")
        print(f"{'path':<16}" + "".join(f"{way:>13}" for way in WAYS))
        for path in PATHS:
            print(f"{path:<16}" + "".join(
                f"{statistics.median(results[(path, way)]):>13.3f}" for way in WAYS))

        with_index, without = [], []
        for _ in range(args.rounds):
            conn.execute("TRUNCATE workhorse.jobs CASCADE")
            with_index.append(_enqueue_round(q))
            conn.execute("DROP INDEX workhorse.jobs_ready_task_idx")
            conn.execute("TRUNCATE workhorse.jobs CASCADE")
            without.append(_enqueue_round(q))
            conn.execute("CREATE INDEX jobs_ready_task_idx ON workhorse.jobs"
                         " (queue, task, rank, id) WHERE status = 'ready'")
        print("enqueue_many of 1,000, ms (median of rounds): "
              f"with jobs_ready_task_idx {statistics.median(with_index):.1f}, "
              f"without {statistics.median(without):.1f}")
    with psycopg.connect(_url(args.database_url), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{psycopg.conninfo.conninfo_to_dict(url)["dbname"]}"'
                      " WITH (FORCE)")


if __name__ == "__main__":
    main()
