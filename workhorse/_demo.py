"""`workhorse demo`: a multi-tenant app, a real worker fleet, and the budget holding live.

Every handler returns the wall-clock interval it ran in; at the end the demo sweeps those
intervals to find the highest concurrency that actually happened per queue and per key, and prints
it next to the limits.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from . import _ops, _sql, database
from .app import App

app = App("workhorse-demo")

MAIL_QUEUE = app.queue("demo-mail", max_active=6, max_active_per_key=2)
REPORTS_QUEUE = app.queue("demo-reports", max_active=2)
TENANTS = [f"tenant-{n}" for n in range(1, 9)]


@app.task(name="demo.send_mail", queue=MAIL_QUEUE, concurrency_key=lambda m: m["tenant"])
def send_mail(message: dict[str, Any]) -> dict[str, float]:
    """Pretend to talk to a mail API that allows 6 connections, 2 per tenant."""
    started = time.time()
    time.sleep(random.uniform(0.05, 0.25))
    return {"started": started, "finished": time.time()}


@app.task(name="demo.build_report", queue=REPORTS_QUEUE)
def build_report(tenant: str) -> dict[str, float]:
    """A heavier job on a queue shared fleet-wide by at most 2 runs."""
    started = time.time()
    time.sleep(random.uniform(0.2, 0.5))
    return {"started": started, "finished": time.time()}


DEMO_QUEUES = [MAIL_QUEUE.name, REPORTS_QUEUE.name]
LIMITS = {MAIL_QUEUE.name: MAIL_QUEUE, REPORTS_QUEUE.name: REPORTS_QUEUE}


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals],
                    key=lambda e: (e[0], e[1]))
    running = best = 0
    for _, delta in events:
        running += delta
        best = max(best, running)
    return best


def _view(active: dict[tuple[str, str | None], int], progress: dict[str, int], total: int,
          seen_queue: dict[str, int], seen_key: dict[tuple[str, str], int]) -> Group:
    queues = Table(title="fleet-wide concurrency (live)", expand=False)
    queues.add_column("queue")
    queues.add_column("active / limit", justify="right")
    queues.add_column("")
    queues.add_column("max seen (sampled)", justify="right")
    for name in DEMO_QUEUES:
        limit = LIMITS[name].max_active or 0
        now = sum(n for (q, _), n in active.items() if q == name)
        queues.add_row(name, f"{now} / {limit}", ProgressBar(total=limit, completed=now, width=20),
                       str(seen_queue.get(name, 0)))
    keys = Table(title=f"per tenant on {MAIL_QUEUE.name} (limit {MAIL_QUEUE.max_active_per_key})")
    keys.add_column("tenant")
    keys.add_column("active", justify="right")
    keys.add_column("")
    keys.add_column("max seen (sampled)", justify="right")
    for tenant in TENANTS:
        now = active.get((MAIL_QUEUE.name, tenant), 0)
        per_key = MAIL_QUEUE.max_active_per_key or 0
        keys.add_row(tenant, str(now), ProgressBar(total=per_key, completed=now, width=10),
                     str(seen_key.get((MAIL_QUEUE.name, tenant), 0)))
    done = progress.get("succeeded", 0) + progress.get("failed", 0)
    status = Text(f"{done}/{total} done   " + "  ".join(
        f"{k}: {v}" for k, v in sorted(progress.items())), style="bold")
    return Group(queues, keys, status)


# The demo's own statements live in sql/demo/, apart from the product's.


def _demo_active() -> _ops.Operation[list[tuple[str, str | None, int]]]:
    """Live concurrency per queue and key in the demo's queues."""
    rows = yield _sql.statement("active", "demo"), (DEMO_QUEUES,)
    return [(queue, key, int(n)) for queue, key, n in rows]


def _demo_progress(first_id: int) -> _ops.Operation[dict[str, int]]:
    rows = yield _sql.statement("progress", "demo"), (first_id, DEMO_QUEUES)
    return {status: int(n) for status, n in rows}


def _demo_runs(first_id: int) -> _ops.Operation[list[tuple[str, str | None, Any]]]:
    """Each finished demo job's queue, key and result (its own start and end times)."""
    rows = yield _sql.statement("runs", "demo"), (first_id, DEMO_QUEUES)
    return [(queue, key, result) for queue, key, result in rows]


def _demo_cleanup(first_id: int) -> _ops.Operation[int]:
    rows = yield _sql.statement("cleanup", "demo"), {"first_id": first_id, "queues": DEMO_QUEUES}
    return int(rows[0][0])


def _clean_up(url: str, first_id: int | None, console: Console) -> None:
    """Remove this run's jobs and the demo's policies: the database is the user's."""
    from .queue import Queue

    try:
        with database.connect(url, autocommit=True) as conn:
            removed = _ops.execute(conn, _demo_cleanup(first_id)) if first_id is not None else 0
            Queue(conn).sync_concurrency_policies(app.name, [], prune=True)
        console.print(f"[dim]removed the demo's {removed} jobs and the policies of "
                      f"{app.name!r}[/]")
    except Exception as exc:  # the demo's result stands; say what is left
        console.print(f"[yellow]could not remove the demo's jobs and policies: {exc}[/]")


def run_demo(database_url: str | None, *, job_count: int, slots: int, concurrency: int,
             console: Console) -> int:
    from . import embedded

    embedded_before = None
    if not database_url and not os.environ.get(database.ENV_URL):
        embedded_before = embedded.is_running()
        console.print("[dim]no WORKHORSE_DATABASE_URL: using the embedded PostgreSQL server[/]")
    url = database.resolve_url(database_url)
    app.database_url = url
    database.ensure_schema(url)

    report = app.sync()
    console.print(f"synced policies of [bold]{app.name}[/]: created {report.created}, "
                  f"updated {report.updated}, unchanged {report.unchanged}")

    rng = random.Random(7)
    calls = []
    for n in range(job_count):
        if n % 10 == 9:
            calls.append(build_report.call((rng.choice(TENANTS),)))
        else:
            calls.append(send_mail.call(({"tenant": rng.choice(TENANTS), "n": n},)))
    try:
        handles = app.enqueue_many(calls)
    finally:
        app.close()
    first_id = handles[0].id
    console.print(f"enqueued {len(handles)} jobs across {len(TENANTS)} tenants")

    command = [
        sys.executable, "-m", "workhorse", "--database-url", url, "worker", "workhorse._demo:app",
        "--slots", str(slots), "--concurrency", str(concurrency), "--lease", "10s",
        "--dequeue-timeout", "1s", "--grace", "10s",
    ]
    worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen_queue: dict[str, int] = defaultdict(int)
    seen_key: dict[tuple[str, str], int] = defaultdict(int)
    deadline = time.monotonic() + 50
    try:
        with database.connect(url, autocommit=True) as conn, Live(
            console=console, refresh_per_second=8
        ) as live:
            while True:
                active: dict[tuple[str, str | None], int] = {}
                for queue_name, key, n in _ops.execute(conn, _demo_active()):
                    active[(queue_name, key)] = n
                progress = _ops.execute(conn, _demo_progress(first_id))
                for name in DEMO_QUEUES:
                    seen_queue[name] = max(seen_queue[name], sum(
                        n for (q, _), n in active.items() if q == name))
                for (queue_name, key), n in active.items():
                    if key is not None:
                        seen_key[(queue_name, key)] = max(seen_key[(queue_name, key)], n)
                live.update(_view(active, progress, job_count, seen_queue, seen_key))
                if progress.get("succeeded", 0) + progress.get("failed", 0) >= job_count:
                    break
                if worker.poll() is not None:
                    raise RuntimeError("the worker exited early: " + (
                        worker.stderr.read().decode(errors="replace")[-500:]
                        if worker.stderr else ""))
                if time.monotonic() > deadline:
                    raise RuntimeError("the demo did not finish within 50 s")
                time.sleep(0.2)
            runs = _ops.execute(conn, _demo_runs(first_id))
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        _clean_up(url, first_id, console)
        if embedded_before is False:
            embedded.stop()

    by_queue: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_key: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for queue_name, key, result in runs:
        interval = (result["started"], result["finished"])
        by_queue[queue_name].append(interval)
        if key is not None:
            by_key[(queue_name, key)].append(interval)

    console.print("\n")
    final = Table(title="highest concurrency that actually happened (from handler timestamps)")
    for column in ("queue", "key", "limit", "max seen", "ok"):
        final.add_column(column)
    exceeded = False
    for name in DEMO_QUEUES:
        peak = _max_overlap(by_queue[name])
        limit = LIMITS[name].max_active
        ok = limit is None or peak <= limit
        exceeded |= not ok
        final.add_row(name, "(queue)", str(limit), str(peak),
                      Text("yes", style="green") if ok else Text("NO", style="bold red"))
    for (queue_name, key), intervals in sorted(by_key.items()):
        peak = _max_overlap(intervals)
        limit = LIMITS[queue_name].max_active_per_key
        ok = limit is None or peak <= limit
        exceeded |= not ok
        final.add_row(queue_name, key, str(limit), str(peak),
                      Text("yes", style="green") if ok else Text("NO", style="bold red"))
    console.print(final)
    console.print(
        Text("limit exceeded" if exceeded else "no limit exceeded",
             style="bold red" if exceeded else "bold green")
    )
    if embedded_before is False:
        console.print("[dim]stopped the embedded server the demo started[/]")
    return 1 if exceeded else 0
