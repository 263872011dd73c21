"""Peers for `bench_fleet.py`'s case 9: Celery 5 on a private Redis, and procrastinate 3.

Celery runs as real `celery -A _celery_app worker` subprocesses (cwd benchmarks/) on a Redis
server this module starts on a private port (6390 unless told otherwise) with no persistence and
stops afterwards; Debian's `redis-server` is installed with apt-get when it is missing. The
machine's own Redis (6379) is never touched. procrastinate runs in this process
(`App.run_worker_async(wait=False)`, which returns once the queue is caught up), in the scratch
database, with its own schema in `public`.

A figure is jobs / (last handler end - first handler start), from the handlers' own clocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
REDIS_PORT = 6390


@dataclass
class PeerDrain:
    rate: float
    span: float
    done: int
    peak: int


def from_times(times: Sequence[tuple[float, float]]) -> PeerDrain:
    """Rate over [first start, last end], and the largest number of handlers running at once."""
    if not times:
        return PeerDrain(rate=float("nan"), span=0.0, done=0, peak=0)
    events = sorted([(s, 1) for s, _ in times] + [(e, -1) for _, e in times])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    span = max(e for _, e in times) - min(s for s, _ in times)
    return PeerDrain(rate=len(times) / span if span > 0 else float("nan"), span=span,
                     done=len(times), peak=peak)


# ---- Redis and Celery -------------------------------------------------------------------------


def redis_executable() -> tuple[str | None, str]:
    """(path, how it was found); installs Debian's redis-server when missing and allowed to."""
    found = shutil.which("redis-server")
    if found:
        return found, "installed"
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return None, "redis-server missing and apt-get unavailable (not root?)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "install", "-y", "-q", "redis-server"],
                    ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "redis-server"]):
        subprocess.run(command, env=env, capture_output=True)
        found = shutil.which("redis-server")
        if found:
            return found, "installed now with apt-get"
    return None, "apt-get install redis-server failed"


@contextlib.contextmanager
def redis_server(port: int = REDIS_PORT) -> Iterator[tuple[str | None, str]]:
    """A private Redis on 127.0.0.1:`port`, no RDB and no AOF; yields (url, facts) or
    (None, why not)."""
    exe, how = redis_executable()
    if exe is None:
        yield None, how
        return
    with tempfile.TemporaryDirectory(prefix="bench_redis_") as workdir:
        process = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--dir", workdir, "--logfile", str(Path(workdir, "log"))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            import redis

            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        yield None, f"redis-server on port {port} did not start"
                        return
                    time.sleep(0.05)
            version = client.info("server").get("redis_version", "?")
            client.close()
            yield url, f"redis-server {version} ({how}) on 127.0.0.1:{port}, no persistence"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def celery_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("celery")
    except Exception:  # any failure means: not installed
        return None


def celery_drain(
    broker: str, task: str, args: Sequence[Any], jobs: int, workers: Sequence[Sequence[str]],
    timeout: float,
) -> PeerDrain:
    """Enqueue `jobs` tasks, then start one `celery worker` per entry of `workers` (its flags)
    and wait until every task has recorded itself."""
    os.environ["BENCH_CELERY_BROKER"] = broker  # read by _celery_app at import, here and there
    import _celery_app as ca
    import redis

    client = redis.Redis.from_url(broker)
    client.flushdb()
    with ca.app.producer_or_acquire() as producer:
        for _ in range(jobs):
            ca.app.send_task(task, args=list(args), queue=ca.QUEUE, producer=producer)
    env = {**os.environ, "BENCH_CELERY_BROKER": broker}
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="bench_celery_") as logs:
        try:
            for n, flags in enumerate(workers):
                with Path(logs, f"{n}.log").open("ab") as log:
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "_celery_app", "worker", "-Q",
                         ca.QUEUE, "-n", f"bench{n}@%h", "--loglevel", "WARNING", *flags],
                        cwd=HERE, env=env, stdout=log, stderr=log,
                    ))
            deadline = time.monotonic() + timeout
            while client.llen(ca.TIMES) < jobs:
                dead = [p for p in procs if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    output = "\n".join(Path(logs, f"{n}.log").read_text(errors="replace")[-2000:]
                                       for n in range(len(procs)))
                    raise SystemExit(f"celery: a worker stopped or stalled "
                                     f"({client.llen(ca.TIMES)} of {jobs} done):\n{output}")
                time.sleep(0.1)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    raw = client.lrange(ca.TIMES, 0, -1)
    client.flushdb()
    client.close()
    times = []
    for item in raw:
        start, end = item.split()
        times.append((float(start), float(end)))
    return from_times(times)


# ---- procrastinate ------------------------------------------------------------------------------


def procrastinate_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("procrastinate")
    except Exception:  # any failure means: not installed
        return None


async def _procrastinate(
    url: str, jobs: int, sleep: float, sync: bool, concurrency: int
) -> PeerDrain:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    times: list[tuple[float, float]] = []

    if sync:
        @app.task(name="bench_sync", queue="bench")
        def task(seconds: float = 0.0) -> None:
            start = time.time()
            if seconds:
                time.sleep(seconds)
            times.append((start, time.time()))
    else:
        @app.task(name="bench_async", queue="bench")
        async def task(seconds: float = 0.0) -> None:
            start = time.time()
            if seconds:
                await asyncio.sleep(seconds)
            times.append((start, time.time()))

    with psycopg.connect(url, autocommit=True) as admin:
        installed = admin.execute("SELECT to_regclass('public.procrastinate_jobs')").fetchone()
        async with app.open_async():
            if installed is None or installed[0] is None:
                await app.schema_manager.apply_schema_async()
            admin.execute("TRUNCATE procrastinate_jobs, procrastinate_events, "
                          "procrastinate_workers, procrastinate_periodic_defers CASCADE")
            kwargs: dict[str, Any] = {"seconds": sleep} if sleep else {}
            for start in range(0, jobs, 5000):
                await task.batch_defer_async(*([kwargs] * min(5000, jobs - start)))
            admin.execute("VACUUM ANALYZE procrastinate_jobs")
            with contextlib.suppress(psycopg.Error):
                admin.execute("CHECKPOINT")
            await app.run_worker_async(queues=["bench"], concurrency=concurrency, wait=False,
                                       install_signal_handlers=False)
        admin.execute("TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers "
                      "CASCADE")
    return from_times(times)


def procrastinate_drain(
    url: str, jobs: int, sleep: float, sync: bool, concurrency: int
) -> PeerDrain:
    return asyncio.run(_procrastinate(url, jobs, sleep, sync, concurrency))
