"""The progress app: handlers that report progress (docs/design.md "Job keys ... progress").

Markers are files in the directory a job is given: a handler waits for the test to say "seen"
before it goes on, so the test reads values while the handler runs, without any timing.

With PROGRESS_EVERY_CALL=1 in the environment, the worker is a deliberately broken variant that
writes the progress at every call (the same statement, on a connection of the handler's thread):
the write-counting test must fail on it.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import workhorse
from workhorse import InvalidOptionsError, Retry, _ops, current_job

app = workhorse.App("progress")

WAIT = 90.0  # a marker the test never writes: the handler gives up (the test has failed)


def _wait_for(marker: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not marker.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no marker {marker}")
        time.sleep(0.02)


@app.task(queue="progress", max_attempts=1)
def stepper(n: int, markers: str) -> str:
    """progress(i, n, "step i") for i in 1..n, each held until the test saw it (marker i)."""
    for i in range(1, n + 1):
        current_job().progress(i, total=n, message=f"step {i}")
        _wait_for(Path(markers) / str(i))
    return "done"


@app.task(queue="progress", max_attempts=1)
async def stepper_async(n: int, markers: str) -> str:
    for i in range(1, n + 1):
        current_job().progress(i / 2, total=n / 2, message=f"async <b>{i}</b>")
        deadline = time.monotonic() + WAIT
        while not (Path(markers) / str(i)).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no marker {i}")
            await asyncio.sleep(0.02)
    return "done"


@app.task(queue="progress", max_attempts=1)
def flood(seconds: float) -> dict[str, Any]:
    """About 1,000 progress calls a second for `seconds`; returns how many and when."""
    job = current_job()
    began = time.time()
    calls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):  # bursts of 10 every 10 ms: less at the mercy of sleep's granularity
            calls += 1
            job.progress(calls, total=None, message="flood")
        time.sleep(0.01)
    return {"calls": calls, "began": began, "ended": time.time()}


@app.task(queue="progress", max_attempts=1)
def last_then_return(markers: str | None = None) -> int:
    """Reports and returns at once: only the flush at the attempt's end can write it."""
    current_job().progress(7, total=10, message="last")
    return 7


@app.task(queue="progress", max_attempts=2, retry_backoff=0.1)
def retried(markers: str) -> str:
    """Attempt 1 reports, then retries; attempt 2 waits for "go" before it reports anything."""
    job = current_job()
    if job.attempt == 1:
        job.progress(5, total=10, message="first attempt")
        raise Retry(delay=0.1)
    _wait_for(Path(markers) / "go")
    job.progress(1, total=10, message="second attempt")
    return "second"


@app.task(queue="progress", max_attempts=2)  # an expired lease with no attempt left ends the job
def ticker(markers: str) -> int:
    """Reports a new value every 20 ms until "stop": a handler that runs on after its job was
    claimed again elsewhere (its lease expired) is a stale handler."""
    i = 0
    deadline = time.monotonic() + WAIT
    while not (Path(markers) / "stop").exists() and time.monotonic() < deadline:
        i += 1
        current_job().progress(i, message="tick")
        time.sleep(0.02)
    return i


BAD = [
    ((-1,), {}), (("x",), {}), ((True,), {}), ((math.nan,), {}), ((math.inf,), {}),
    ((1,), {"total": -1}), ((1,), {"total": "10"}), ((1,), {"total": False}),
    ((1,), {"message": "m" * 1001}), ((1,), {"message": 5}), ((1,), {"message": "a\x00b"}),
    ((2**63,), {}), ((None,), {}),
]


@app.task(queue="progress", max_attempts=1)
def bad_inputs() -> list[str]:
    """Every bad call raises before anything is kept: the job ends with no progress."""
    raised = []
    for args, kwargs in BAD:
        try:
            current_job().progress(*args, **kwargs)
        except InvalidOptionsError as exc:
            raised.append(type(exc).__name__)
        else:
            raised.append("accepted")
    return raised


if os.environ.get("PROGRESS_EVERY_CALL"):
    from workhorse.worker import executor

    _kept = executor.Execution.report
    _local = threading.local()

    def _every_call(self: Any, done: Any, total: Any, message: Any) -> None:
        _kept(self, done, total, message)
        conn = getattr(_local, "conn", None)
        if conn is None:
            conn = _local.conn = psycopg.connect(os.environ["WORKHORSE_DATABASE_URL"],
                                                 autocommit=True)
        assert self.progress is not None
        _ops.execute(conn, _ops.write_progress(
            [(self.job_id, self.fence, self.progress[0], done, total, message)]))

    executor.Execution.report = _every_call  # type: ignore[method-assign]
