"""The Celery app `bench_fleet.py`'s peer case runs: `celery -A _celery_app worker -Q bench ...`.

The broker is the benchmark's own Redis (`BENCH_CELERY_BROKER`, a private port, never the
machine's 6379). No result backend is configured, Celery's default. So the benchmark can time the
drain, each task pushes "start end" (`time.time()`) onto the list `bench:t` in the same Redis, one
round trip: about what a result backend's write costs, and it gives the first start, the last end
and the overlap of running handlers, as workhorse's timed handlers do.
"""

from __future__ import annotations

import os
import threading
import time

import redis
from celery import Celery

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6390/0")
QUEUE = "bench"
TIMES = "bench:t"

app = Celery("bench_peers", broker=BROKER)
app.conf.update(task_default_queue=QUEUE, broker_connection_retry_on_startup=True)

_local = threading.local()


def _client() -> redis.Redis:
    # One client per thread of each pool process, made there: a client made before the prefork
    # pool forks would share its socket across processes.
    client: redis.Redis | None = getattr(_local, "client", None)
    if client is None:
        client = redis.Redis.from_url(BROKER)
        _local.client = client
    return client


def _record(start: float) -> None:
    _client().rpush(TIMES, f"{start} {time.time()}")


@app.task(name="bench.noop")
def noop() -> None:
    _record(time.time())


@app.task(name="bench.sleep")
def sleep(seconds: float) -> None:
    start = time.time()
    time.sleep(seconds)
    _record(start)
