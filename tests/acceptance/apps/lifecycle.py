"""Apps for the lifecycle tests: slow jobs to kill or drain, flaky ones to retry and hold."""

from __future__ import annotations

import asyncio
import time

import workhorse

from . import probe

app = workhorse.App("lifecycle")


@app.task(queue="slow")
def slow(token: str, seconds: float, again: float = 0.0) -> str:
    """Sleeps `seconds` on its first run and `again` on any later one."""
    runs = probe.ran_sync(token)
    time.sleep(seconds if runs == 1 else again)
    return token


@app.task(queue="slow", lease="1s")
async def cancellable(token: str) -> str:
    """Runs until it is cancelled; says so."""
    await probe.ran(token)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await probe.ran(f"{token}:cancelled")
        raise
    return token


@app.task(queue="flaky", max_attempts=3, retry_backoff=0.4, on_failure="hold")
def flaky(token: str) -> str:
    probe.ran_sync(token)
    if not probe.flag(token):
        raise RuntimeError(f"{token} is not ready yet")
    return f"{token} done"


@app.task(queue="flaky", max_attempts=1)
def not_json() -> object:
    return {1, 2, 3}


@app.task(queue="flaky", max_attempts=1)
def unstorable_error() -> None:
    raise ValueError("NUL \x00 and a lone surrogate \ud800 cannot go into jsonb as they are")


@app.task(queue="capped")
def capped(token: str) -> str:
    conn = probe.conn()
    conn.execute(probe.ENTER, ("queue",))
    try:
        probe.ran_sync(token)
        time.sleep(0.1)
    finally:
        conn.execute(probe.LEAVE, ("queue",))
    return token


@app.task(queue="slow", lease="3s", max_attempts=3)
async def losable(token: str) -> str:
    """Its first attempt runs until cancelled (a lost lease cancels it); later ones return."""
    attempt = workhorse.current_job().attempt
    await probe.ran(f"{token}:{attempt}")
    if attempt == 1:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await probe.ran(f"{token}:cancelled")
            raise
    return f"{token}:{attempt}"


@app.task(queue="slow", lease="3s", max_attempts=3)
def losable_sync(token: str) -> str:
    """Its first attempt heartbeats until the heartbeat says the lease is lost; later ones
    return."""
    job = workhorse.current_job()
    probe.ran_sync(f"{token}:{job.attempt}")
    if job.attempt == 1:
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                job.heartbeat()
                time.sleep(0.1)
        except workhorse.StaleLeaseError:
            probe.ran_sync(f"{token}:stale")
            raise
    return f"{token}:{job.attempt}"
