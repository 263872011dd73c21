"""Dashboard pages: how long each takes to render on a big database.

    .venv/bin/python benchmarks/bench_dashboard.py [--database-url URL] [--finished 1000000]
                                                   [--ready 10000] [--keys 1000] [--rounds 20]
                                                   [--sweep] [--reuse] [--keep-db]

The scratch database `wh_bench_dashboard` gets `--finished` finished jobs (99% succeeded, 1%
failed, with error documents, over three queues and 20 tasks, plus a rare task of 12 jobs spread
over the history; each with the expiry retention gives it), `--ready` ready jobs over `--keys`
keys in a governed queue (max_active=50, max_active_per_key=1) of which 50 keys are saturated by
jobs claimed through the real claim, an hour of throughput history, a few worker rows, and 100
schedules of which half have fired. Each page is then requested `--rounds` times in-process
(Starlette's TestClient: routing, the bounded queries on a pooled connection, and the Jinja2
render), after one warm-up request; the table gives the median and the 95th percentile. The
target is < 200 ms a page.

`--sweep` also requests the jobs list under every combination of the filters a user can set
(queue, status, task, key: 5 x 8 x 7 x 3, with values common, rare and absent, exact and as
case-insensitive substrings) and prints the slowest. `--reuse` keeps an already filled scratch
database (implies `--keep-db`; the schema is brought forward first, so a new migration is
measured on the same rows).

Needs the dashboard extra: `pip install -e '.[dashboard,bench]'`. Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from workhorse import (
    App,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    JobStatus,
    Queue,
    ScheduleDefinition,
    chord,
    group,
)
from workhorse.worker.scheduler import Scheduler

RARE_TASK = "shop.monthly"
RARE_EVERY = 83_333  # every so many finished jobs: 12 in 1M
SCHEDULES = 100


def fill(conn: psycopg.Connection[Any], finished: int, ready: int, keys: int) -> None:
    failed = max(finished // 100, 1)
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, attempts, started_at,"
        " finished_at, expires_at, result)"
        " SELECT CASE WHEN g %% %s = 0 THEN %s ELSE 'shop.task' || (g %% 20) END,"
        " (ARRAY['api', 'history', 'mail'])[1 + g %% 3],"
        " 'tenant-' || (g %% %s), jsonb_build_object('args', jsonb_build_array(g)), 'succeeded',"
        " 1, now() - interval '2 hours', now() - interval '1 hour', now() + interval '23 hours',"
        " to_jsonb(g)"
        " FROM generate_series(1, %s) g", (RARE_EVERY, RARE_TASK, keys, finished - failed))
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, attempts, started_at,"
        " finished_at, expires_at, error)"
        " SELECT 'shop.flaky', 'api', 'tenant-' || (g %% %s), '{\"args\": [], \"kwargs\": {}}',"
        " 'failed', 3, now() - interval '2 hours', now() - interval '1 hour',"
        " now() + interval '6 days',"
        " jsonb_build_object('type', 'ValueError', 'message', 'upstream said no ' || g,"
        "   'traceback', repeat('  File \"shop.py\", line 1, in flaky\\n', 20))"
        " FROM generate_series(1, %s) g", (keys, failed))
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status)"
        " SELECT 'shop.call', 'api', 'tenant-' || (g %% %s), '{\"args\": [], \"kwargs\": {}}',"
        " 'ready' FROM generate_series(1, %s) g", (keys, ready))
    q = Queue(conn)
    q.sync_concurrency_policies("bench", [
        ConcurrencyPolicyDefinition("api", max_active=50, max_active_per_key=1),
        ConcurrencyPolicyDefinition("mail", max_active=None, rate_limit="600/m",
                                    rate_limit_per_key="10/m"),
    ])
    claimed = []
    while len(claimed) < 50:
        batch = q.claim("api", 50 - len(claimed), 3600)
        if not batch:
            break
        claimed += batch
    conn.execute(
        "INSERT INTO workhorse.throughput (minute, claimed, succeeded, failed)"
        " SELECT date_trunc('minute', now()) - make_interval(mins => m), 600 + m, 590 + m, m % 7"
        " FROM generate_series(0, 59) m")
    for n in range(4):
        conn.execute(
            "INSERT INTO workhorse.workers (app, host, pid, slots, queues, stats)"
            " VALUES ('shop', %s, %s, 4, ARRAY['api', 'mail'],"
            " '{\"succeeded\": 1000, \"failed\": 3, \"in_flight\": 12}')",
            (f"host-{n}", 1000 + n))
    # Half every-minute schedules, half cron; the first half fired once through the real pass
    # (its pointer put in the past first), so that the page shows both next and last runs.
    q.sync_schedules("shop", [
        ScheduleDefinition(f"every-{n}", f"shop.task{n % 20}", every="1m", args=[n])
        if n % 2 else
        ScheduleDefinition(f"cron-{n}", f"shop.task{n % 20}", cron=f"{n % 60} */2 * * *",
                           tz="Europe/Oslo")
        for n in range(SCHEDULES)])
    conn.execute("UPDATE workhorse.schedules SET next_run_at = next_run_at - interval '1 day'"
                 " WHERE name IN (SELECT name FROM workhorse.schedules ORDER BY name LIMIT %s)",
                 (SCHEDULES // 2,))
    while Scheduler("shop").fire(conn).full:
        pass
    # A fair queue (its page lists keys by active units beside their fair share): 2,000 ready
    # jobs over 1,000 keys, 32 places taken through the real claim; and a chord of 200 members
    # for the workflow page, its first 100 members done.
    q.sync_concurrency_policies("fair", [
        ConcurrencyPolicyDefinition("llm", max_active=32, fairness="key")])
    q.enqueue_many([("shop.infer", {"args": [g], "kwargs": {}},
                     EnqueueOptions(queue="llm", concurrency_key=f"tenant-{g % 1000}",
                                    weight=1 + g % 3))
                    for g in range(2000)])
    q.claim("llm", 32, 3600)
    shop = App("shop-flows")

    @shop.task(name="shop.page", queue="flows")
    def page(n: int) -> int:
        return n

    @shop.task(name="shop.total", queue="flows")
    def total(counts: list[int]) -> int:
        return sum(counts)

    chord(group(page.s(n) for n in range(200)), total.s()).apply_async(connection=conn)
    done = q.claim("flows", 100, 3600)
    q.complete_many([(j.id, j.fence, j.id) for j in done])
    conn.execute("VACUUM ANALYZE")


def facts_of(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM workhorse.jobs WHERE status = 'active'),"
        "       (SELECT id FROM workhorse.jobs WHERE status = 'failed' LIMIT 1),"
        "       (SELECT (min(id) + max(id)) / 2 FROM workhorse.jobs),"
        "       (SELECT max(workflow_id) FROM workhorse.jobs)").fetchone()
    assert row is not None
    return {"claimed": row[0], "failed_id": row[1], "middle_id": row[2], "workflow_id": row[3]}


@contextlib.contextmanager
def database(server: str, args: argparse.Namespace) -> Iterator[tuple[str, bool]]:
    """The scratch database's URL, and whether it still needs filling."""
    if args.reuse:
        url = c.with_dbname(server, args.db_name)
        with contextlib.suppress(psycopg.OperationalError), psycopg.connect(
                url, autocommit=True) as conn:
            Queue(conn).install_schema()
            filled = conn.execute("SELECT to_regclass('workhorse.jobs') IS NOT NULL AND EXISTS"
                                  " (SELECT FROM workhorse.jobs)").fetchone()
            if filled and filled[0]:
                conn.execute("ANALYZE workhorse.jobs")
                yield url, False
                print(f"\nkept scratch database {args.db_name} ({c.describe_url(url)})")
                return
    with c.scratch_database(server, args.db_name, args.keep_db or args.reuse) as url:
        yield url, True


def timed(client: Any, path: str, rounds: int, status: int = 200) -> tuple[int, list[float]]:
    first = client.get(path)
    assert first.status_code == status, (path, first.status_code, first.text[:300])
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - t0)
        assert response.status_code == status
    return len(first.content), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, "wh_bench_dashboard")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--ready", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--sweep", action="store_true",
                        help="also time the jobs list under every filter combination")
    parser.add_argument("--sweep-rounds", type=int, default=5)
    parser.add_argument("--reuse", action="store_true",
                        help="reuse a filled scratch database (implies --keep-db)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

    from workhorse.dashboard import create_app

    server, where = c.resolve_server_url(args.database_url)
    printer = c.Printer(args.format)
    printer.heading(f"dashboard benchmark on {c.describe_url(server)} ({where})")
    with database(server, args) as (url, empty):
        started = time.monotonic()
        with psycopg.connect(url, autocommit=True) as conn:
            if empty:
                fill(conn, args.finished, args.ready, args.keys)
            facts = facts_of(conn)
            printer.facts("server", c.server_facts(conn))
        printer.line(f"{'filled' if empty else 'reused'} in {time.monotonic() - started:.0f} s:"
                     f" {c.count(args.finished)} finished jobs, {c.count(args.ready)} ready over"
                     f" {args.keys:,} keys, {facts['claimed']} active (one per saturated key),"
                     f" {SCHEDULES} schedules")
        pages = [
            ("overview", "/"),
            ("overview, live region", "/?live=1"),
            ("queue api", "/queue?name=api"),
            ("queue mail", "/queue?name=mail"),
            ("queue llm (fair: keys by units)", "/queue?name=llm"),
            ("workflow (chord of 200, half done)", f"/workflows/{facts['workflow_id']}"),
            ("queue, a typo (404)", "/queue?name=hsitory"),
            ("jobs (newest 100)", "/jobs"),
            ("jobs, status=failed", "/jobs?status=failed"),
            ("jobs, status=succeeded", "/jobs?status=succeeded"),
            ("jobs, queue=history", "/jobs?queue=history"),
            ("jobs, a key's backlog (linked)", "/jobs?queue=api&key=tenant-7&status=ready"),
            ("jobs, key=tenant-7", "/jobs?key=tenant-7"),
            ("jobs, queue=api key=tenant-7", "/jobs?queue=api&key=tenant-7"),
            ("jobs, status=succeeded key=tenant-7", "/jobs?status=succeeded&key=tenant-7"),
            ("jobs, status=failed key=tenant-7", "/jobs?status=failed&key=tenant-7"),
            ("jobs, key=no-such-key", "/jobs?key=no-such-key"),
            ("jobs, task=shop.task3", "/jobs?task=shop.task3"),
            ("jobs, task=shop.flaky", "/jobs?task=shop.flaky"),
            (f"jobs, task={RARE_TASK} (12 jobs)", f"/jobs?task={RARE_TASK}"),
            ("jobs, task=no.such.task", "/jobs?task=no.such.task"),
            ("jobs, task=shop.task3 key=tenant-7", "/jobs?task=shop.task3&key=tenant-7"),
            ("jobs, queue contains 'hist'", "/jobs?queue=hist"),
            ("jobs, queue contains 'API' status=failed", "/jobs?queue=API&status=failed"),
            ("jobs, task contains 'TASK3'", "/jobs?task=TASK3"),
            ("jobs, task contains 'monthly' (12 jobs)", "/jobs?task=monthly"),
            ("jobs, queue contains 'nope'", "/jobs?queue=nope"),
            ("jobs, an older page (newer link)", f"/jobs?before={facts['middle_id']}"),
            ("jobs, older page, task contains 'monthly'",
             f"/jobs?task=monthly&before={facts['middle_id']}"),
            ("jobs, id=", f"/jobs?id={facts['failed_id']}"),
            ("job detail (failed)", f"/jobs/{facts['failed_id']}"),
            ("workers", "/workers"),
            ("schedules", "/schedules"),
            ("schedules, live region", "/schedules?live=1"),
        ]
        table = c.Table(f"page render time, ms ({args.rounds} requests each, after a warm-up)",
                        ["page", "path", "bytes", "p50", "p95", "max"])
        with TestClient(create_app(url, read_only=False)) as client:
            for name, path in pages:
                size, times = timed(client, path, args.rounds,
                                    404 if "(404)" in name else 200)
                table.add(name, path if len(path) < 40 else path[:37] + "...", f"{size:,}",
                          c.ms(c.percentile(times, 50), 1), c.ms(c.percentile(times, 95), 1),
                          c.ms(max(times), 1))
            table.notes.append("target: < 200 ms a page")
            printer.table(table)
            if args.sweep:
                printer.table(sweep(client, args.sweep_rounds))


def sweep(client: Any, rounds: int) -> c.Table:
    """Every combination of the jobs page's filters; the 25 slowest by p95."""
    choices = {
        "queue": [None, "api", "history", "HIST", "nope"],
        "status": [None, *(s.value for s in JobStatus)],
        "task": [None, "shop.task3", "shop.flaky", RARE_TASK, "no.such.task", "TASK3", "monthly"],
        "key": [None, "tenant-7", "no-such-key"],
    }
    results = []
    for values in itertools.product(*choices.values()):
        query = urlencode({k: v for k, v in zip(choices, values, strict=True) if v is not None})
        path = f"/jobs?{query}" if query else "/jobs"
        _, times = timed(client, path, rounds)
        results.append((c.percentile(times, 95), c.percentile(times, 50), path))
    results.sort(reverse=True)
    table = c.Table(f"jobs list, every filter combination ({len(results)}, {rounds} requests"
                    " each): the 25 slowest by p95, ms", ["path", "p50", "p95"])
    for p95, p50, path in results[:25]:
        table.add(path, c.ms(p50, 1), c.ms(p95, 1))
    over = [path for p95, _, path in results if p95 >= 0.2]
    table.notes.append(f"{len(over)} of {len(results)} combinations at or over 200 ms (p95)")
    return table


if __name__ == "__main__":
    main()
