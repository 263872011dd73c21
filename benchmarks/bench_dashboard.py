"""Dashboard pages: how long each takes to render on a big database.

    .venv/bin/python benchmarks/bench_dashboard.py [--database-url URL] [--finished 1000000]
                                                   [--ready 10000] [--keys 1000] [--rounds 20]

The scratch database `wh_bench_dashboard` gets `--finished` finished jobs (99% succeeded, 1%
failed, with error documents, over three queues), `--ready` ready jobs over `--keys` keys in a
governed queue (max_active=50, max_active_per_key=1) of which 50 keys are saturated by jobs
claimed through the real claim, an hour of throughput history, and a few worker rows. Each page
is then requested `--rounds` times in-process (Starlette's TestClient: routing, the bounded
queries on a pooled connection, and the Jinja2 render), after one warm-up request; the table
gives the median and the 95th percentile. The target is < 200 ms a page.

Needs the dashboard extra: `pip install -e '.[dashboard,bench]'`. Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from workhorse import ConcurrencyPolicyDefinition, Queue


def fill(conn: psycopg.Connection[Any], finished: int, ready: int, keys: int) -> dict[str, Any]:
    failed = max(finished // 100, 1)
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, attempts, started_at,"
        " finished_at, result)"
        " SELECT 'shop.task' || (g %% 20), (ARRAY['api', 'history', 'mail'])[1 + g %% 3],"
        " 'tenant-' || (g %% %s), jsonb_build_object('args', jsonb_build_array(g)), 'succeeded',"
        " 1, now() - interval '2 hours', now() - interval '1 hour', to_jsonb(g)"
        " FROM generate_series(1, %s) g", (keys, finished - failed))
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, attempts, started_at,"
        " finished_at, error)"
        " SELECT 'shop.flaky', 'api', 'tenant-' || (g %% %s), '{\"args\": [], \"kwargs\": {}}',"
        " 'failed', 3, now() - interval '2 hours', now() - interval '1 hour',"
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
    conn.execute("VACUUM ANALYZE")
    failed_id = conn.execute(
        "SELECT id FROM workhorse.jobs WHERE status = 'failed' LIMIT 1").fetchone()[0]
    return {"claimed": len(claimed), "failed_id": failed_id}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, "wh_bench_dashboard")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--ready", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

    from workhorse.dashboard import create_app

    server, where = c.resolve_server_url(args.database_url)
    printer = c.Printer(args.format)
    printer.heading(f"dashboard benchmark on {c.describe_url(server)} ({where})")
    with c.scratch_database(server, args.db_name, args.keep_db) as url:
        started = time.monotonic()
        with psycopg.connect(url, autocommit=True) as conn:
            facts = fill(conn, args.finished, args.ready, args.keys)
            printer.facts("server", c.server_facts(conn))
        printer.line(f"filled in {time.monotonic() - started:.0f} s: {c.count(args.finished)} "
                     f"finished jobs, {c.count(args.ready)} ready over {args.keys:,} keys, "
                     f"{facts['claimed']} active (one per saturated key)")
        pages = [
            ("overview", "/"),
            ("overview, live region", "/?live=1"),
            ("queue api", "/queue?name=api"),
            ("queue mail", "/queue?name=mail"),
            ("jobs (newest 100)", "/jobs"),
            ("jobs, status=failed", "/jobs?status=failed"),
            ("jobs, a key's backlog (linked)", "/jobs?queue=api&key=tenant-7&status=ready"),
            ("jobs, queue=api key=tenant-7", "/jobs?queue=api&key=tenant-7"),
            ("jobs, task=shop.flaky", "/jobs?task=shop.flaky"),
            ("jobs, id=", f"/jobs?id={facts['failed_id']}"),
            ("job detail (failed)", f"/jobs/{facts['failed_id']}"),
            ("workers", "/workers"),
            ("schedules", "/schedules"),
        ]
        table = c.Table(f"page render time, ms ({args.rounds} requests each, after a warm-up)",
                        ["page", "path", "bytes", "p50", "p95", "max"])
        with TestClient(create_app(url, read_only=False)) as client:
            for name, path in pages:
                first = client.get(path)
                assert first.status_code == 200, (path, first.status_code, first.text[:300])
                times = []
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    response = client.get(path)
                    times.append(time.perf_counter() - t0)
                    assert response.status_code == 200
                table.add(name, path if len(path) < 40 else path[:37] + "...",
                          f"{len(first.content):,}", c.ms(c.percentile(times, 50), 1),
                          c.ms(c.percentile(times, 95), 1), c.ms(max(times), 1))
        table.notes.append("target: < 200 ms a page")
        printer.table(table)


if __name__ == "__main__":
    main()
