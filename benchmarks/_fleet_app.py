"""The app `bench_fleet.py` runs: `python -m workhorse worker _fleet_app:app --queues Q ...`.

Its tasks declare no policy: each case syncs its own queue's policy under the namespace `fleet`
(`Queue.sync_concurrency_policies`), and jobs are enqueued with an explicit queue, so one task
serves every case of its kind. The timed handlers return `[start, end]` (`time.time()`, the host
clock) so the benchmark can rebuild the real overlap of running handlers from the job rows.
"""

from __future__ import annotations

import asyncio
import time

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
