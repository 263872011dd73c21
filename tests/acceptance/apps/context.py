"""The running-job app: handlers that report their JobContext, time out, and snooze."""

from __future__ import annotations

import os
import time

import workhorse
from workhorse import Snooze, current_job

app = workhorse.App("context")

TRACE = os.environ.get("CONTEXT_TRACE", "/dev/null")


def _trace(what: str) -> None:
    # One O_APPEND write per line: lines from several processes never interleave.
    fd = os.open(TRACE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{what} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


@app.task(queue="context", max_attempts=2)
def whoami_sync(x: int) -> dict[str, object]:
    job = current_job()
    job.heartbeat()
    return {"id": job.id, "task": job.task, "queue": job.queue, "key": job.concurrency_key,
            "attempt": job.attempt, "max_attempts": job.max_attempts,
            "cancel_requested": job.cancel_requested, "x": x}


@app.task(queue="context", max_attempts=2)
async def whoami_async(x: int) -> dict[str, object]:
    job = current_job()
    job.heartbeat()
    return {"id": job.id, "task": job.task, "queue": job.queue, "key": job.concurrency_key,
            "attempt": job.attempt, "max_attempts": job.max_attempts, "x": x}


@app.task(queue="serial-timeout", max_active=1, timeout="200ms", max_attempts=1)
def overrun(token: str) -> str:
    """Runs 0.8 s against a 0.2 s timeout: a thread cannot be stopped, so its place is held."""
    _trace(f"start {token}")
    time.sleep(0.8)
    _trace(f"end {token}")
    return token


@app.task(queue="serial-timeout-retry", max_active=1, timeout="200ms", max_attempts=2,
          lease="1s", retry_backoff=0.1)
def overrun_retried(token: str) -> str:
    """Runs 2.2 s against a 0.2 s timeout, with a retry left and a 1 s lease: the retry must
    wait for the thread, and the lease must be renewed while it overruns."""
    attempt = current_job().attempt
    _trace(f"start {token}.{attempt}")
    time.sleep(2.2)
    _trace(f"end {token}.{attempt}")
    return token


@app.task(queue="context")
def snoozer(token: str) -> str:
    if current_job().attempt == 1 and not os.path.exists(f"{TRACE}.{token}"):
        open(f"{TRACE}.{token}", "w").close()
        raise Snooze("300ms")
    return token


@app.task(queue="context", max_attempts=2, retry_backoff=0.1)
def broken(token: str) -> str:
    raise RuntimeError(f"{token} is broken")
