"""The app `bench_fleet.py` runs: `python -m workhorse worker _fleet_app:app --queues Q ...`.

Its tasks declare no policy: each case syncs its own queue's policy under the namespace `fleet`
(`Queue.sync_concurrency_policies`), and jobs are enqueued with an explicit queue, so one task
serves every case of its kind. The timed handlers return `[start, end]` (`time.time()`, the host
clock) so the benchmark can rebuild the real overlap of running handlers from the job rows.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from typing import Any

import psycopg
from psycopg import sql

import workhorse

NAMESPACE = "fleet"
NOOP_ASYNC = "fleet.noop_async"
NOOP_SYNC = "fleet.noop_sync"
SLEEP_ASYNC = "fleet.sleep_async"
SLEEP_SYNC = "fleet.sleep_sync"
STARTED_AT = "fleet.started_at"

app = workhorse.App(NAMESPACE)


@app.task(name=NOOP_ASYNC, queue="fleet-default")
async def noop_async() -> None:
    return None


@app.task(name=NOOP_SYNC, queue="fleet-default")
def noop_sync() -> None:
    return None


@app.task(name=SLEEP_ASYNC, queue="fleet-default")
async def sleep_async(seconds: float) -> list[float]:
    start = time.time()
    await asyncio.sleep(seconds)
    return [start, time.time()]


@app.task(name=SLEEP_SYNC, queue="fleet-default")
def sleep_sync(seconds: float) -> list[float]:
    start = time.time()
    time.sleep(seconds)
    return [start, time.time()]


@app.task(name=STARTED_AT, queue="fleet-default")
async def started_at() -> float:
    """The moment the handler starts, for enqueue -> start latency."""
    return time.time()


# ---- claim counts, for bench_scale (only when its environment variable asks) ----------------

CLAIM_COUNTS_ENV = "WORKHORSE_BENCH_CLAIM_COUNTS"
# A statement is a claim when it calls a claim function of the schema (any version).
CLAIM_CALL = re.compile(r"workhorse\.claim\w*\s*\(")


def count_claims(folder: str) -> None:
    """Wrap psycopg's cursors so that every claim statement this process sends is counted:
    claims, claims that admitted a job (a returned row with an id and no status: a success row
    has a status, a marker row has no id) and jobs admitted; and, of the claims that admitted
    nothing, those that asked for no job (they only recorded successes: the limit, the second
    parameter, below 1) and those that carried successes (complete_and_claim's fourth, the ids,
    not empty); the rest were bare (claim.sql: queue, limit, lease, tasks), asked for jobs with
    nothing to record. Each process keeps its counts in
    `folder/<pid>`, overwritten in place after every claim (one pwrite: the reader needs no
    exit hook, and a slot ends with os._exit)."""
    checked: dict[int, tuple[object, bool]] = {}
    counts = [0, 0, 0, 0, 0]
    files: dict[int, int] = {}

    def is_claim(query: object) -> bool:
        seen = checked.get(id(query))
        if seen is None or seen[0] is not query:
            text = query.as_string(None) if isinstance(query, sql.Composable) else str(query)
            seen = (query, CLAIM_CALL.search(text) is not None)
            checked[id(query)] = seen
        return seen[1]

    def record(cursor: Any, params: Any) -> None:
        result = cursor.pgresult
        names = [column.name for column in cursor.description or ()]
        admitted = 0
        if result is not None and "id" in names and "status" in names:
            id_at, status_at = names.index("id"), names.index("status")
            admitted = sum(
                1 for row in range(result.ntuples)
                if result.get_value(row, id_at) is not None
                and result.get_value(row, status_at) is None
            )
        pid = os.getpid()
        if pid not in files:  # a forked slot starts its own counts
            counts[:] = [0, 0, 0, 0, 0]
            files[pid] = os.open(os.path.join(folder, str(pid)), os.O_WRONLY | os.O_CREAT, 0o644)
        counts[0] += 1
        counts[1] += admitted > 0
        counts[2] += admitted
        if not admitted and isinstance(params, (list, tuple)) and len(params) > 3:
            if params[1] is None or params[1] < 1:
                counts[3] += 1
            elif len(params) > 4 and params[3]:
                counts[4] += 1
        os.pwrite(files[pid], (" ".join(map(str, counts)) + "\n").ljust(64).encode(), 0)

    sync_execute = psycopg.Cursor.execute
    async_execute = psycopg.AsyncCursor.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        done = sync_execute(self, query, *args, **kwargs)
        if is_claim(query):
            record(self, args[0] if args else kwargs.get("params"))
        return done

    async def execute_async(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        done = await async_execute(self, query, *args, **kwargs)
        if is_claim(query):
            record(self, args[0] if args else kwargs.get("params"))
        return done

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    psycopg.AsyncCursor.execute = execute_async  # type: ignore[method-assign]


def read_claim_counts(folder: str) -> tuple[int, int, int]:
    """(claims, claims that admitted a job, jobs admitted), summed over the processes' files."""
    total = _summed_counts(folder)
    return total[0], total[1], total[2]


def read_empty_claim_kinds(folder: str) -> tuple[int, int, int]:
    """Of the claims that admitted nothing: (those that only recorded successes, those that
    carried successes and asked for jobs, the bare ones), summed over the processes' files."""
    claims, admitting, _, record_only, riding = _summed_counts(folder)
    return record_only, riding, claims - admitting - record_only - riding


def _summed_counts(folder: str) -> list[int]:
    total = [0, 0, 0, 0, 0]
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            fields = f.read().split()
        for i, value in enumerate(fields[:5]):
            total[i] += int(value)
    return total


if os.environ.get(CLAIM_COUNTS_ENV):
    count_claims(os.environ[CLAIM_COUNTS_ENV])
