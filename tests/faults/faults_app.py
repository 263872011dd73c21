"""The fault suite's app: handlers journal every execution to a file, so that what really ran,
and when, survives a database that is down, restarting or cut off.

Each start and end is one `write()` of one line to a file opened with O_APPEND (atomic between
processes for lines this short): `S|E|C token key run pid monotonic epoch`. `run` is unique to
the execution and is also the job's result, so the stored result names the execution it came
from. CLOCK_MONOTONIC is one clock for every process on the host, network namespaces included.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import workhorse

app = workhorse.App("faults")

if os.environ.get("FAULTS_NO_COMMIT_BARRIER"):
    # The broken variant of test_faults_commit.py: claims still commit asynchronously, and the
    # worker starts their jobs without waiting for the commit barrier's flush.
    from psycopg import sql

    from workhorse import _sql

    _statement = _sql.statement

    def _without_barrier(name: str, folder: str = "statements") -> Any:
        return sql.SQL("SELECT 1") if name == "commit_barrier" else _statement(name, folder)

    _sql.statement = _without_barrier  # type: ignore[assignment]

LIMIT = 5
PER_KEY = 2
KEYS = 4

_fds: dict[int, int] = {}


def journal(kind: str, token: str, key: str, run: str) -> None:
    fd = _fds.get(os.getpid())
    if fd is None:
        fd = os.open(os.environ["FAULTS_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fds[os.getpid()] = fd
    line = f"{kind} {token} {key} {run} {os.getpid()} {time.monotonic():.6f} {time.time():.6f}\n"
    os.write(fd, line.encode())


@app.task(queue="work", max_active=LIMIT, max_active_per_key=PER_KEY, max_attempts=50,
          concurrency_key=lambda token, key, seconds: key)
async def work(token: str, key: str, seconds: float) -> str:
    run = uuid.uuid4().hex[:12]
    journal("S", token, key, run)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:  # its lease was lost: the slot cancels it
        journal("C", token, key, run)
        raise
    journal("E", token, key, run)
    return run


@app.task(queue="blocking", max_active=LIMIT, max_active_per_key=PER_KEY, max_attempts=50,
          concurrency_key=lambda token, key, seconds: key)
def blocking(token: str, key: str, seconds: float) -> str:
    """A sync handler: it holds its thread (and, while it computes, the GIL)."""
    run = uuid.uuid4().hex[:12]
    journal("S", token, key, run)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # busy, not sleeping: load on the slot's process
        sum(range(2000))
    journal("E", token, key, run)
    return run


@app.task(queue="gather", max_attempts=50)
async def gather(runs: list[str]) -> int:
    """A chord's callback (issue #28): journals its execution, returns how many results it got."""
    run = uuid.uuid4().hex[:12]
    journal("S", "gather", "-", run)
    journal("E", "gather", "-", run)
    return len(runs)
