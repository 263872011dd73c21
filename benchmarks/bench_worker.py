"""Worker throughput: drain N no-op jobs with the real worker, and pgqueuer beside it.

    .venv/bin/python benchmarks/bench_worker.py [--database-url URL] [--jobs 50000]
        [--slots N] [--concurrency M] [--repeat R] [--skip-pgqueuer] [--pgbouncer]

Each case runs in the scratch database `wh_bench_worker` on the chosen server:
  ungoverned   N jobs in a queue without a policy
  governed     N jobs in a queue with max_active=64, max_active_per_key=4, over 100 keys
               (k(i % 100)); the policy is synced before the enqueue, as in production
  pgqueuer     N jobs through pgqueuer 1.6 (asyncpg): 5 QueueManagers in one process, batch 10,
               mode=drain (the reference configuration); skipped when pgqueuer is not installed
               (`pip install -e '.[bench]'`)

Workhorse runs as `python -m workhorse worker bench_worker:app --slots N --concurrency M` (this
file is also the app module: an async no-op task). Before each run the queue is filled
(Queue.enqueue_many, 5,000 a statement), VACUUM ANALYZEd and checkpointed. The figure is
N / (last finished_at - first started_at), both from the jobs' own rows, so the worker's start-up
is not counted but every claim and every completion is. pgqueuer's figure is N over the time from
its first handler call to the end of its drain (which flushes its completion buffer).

`--pgbouncer` also runs each workhorse case through PgBouncer in transaction mode (Debian's
`pgbouncer`, started on a free port in front of the same server by tests/pgbouncer_server.py,
default_pool_size 20), with no workhorse setting: the worker cannot LISTEN there and polls for
wake-ups. The table then has a "through pgbouncer" row per case and the ratio to direct.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import _common as c

import workhorse
from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue

HERE = Path(__file__).resolve().parent
TASK = "bench.noop"
UNGOVERNED = "bench-ungoverned"
GOVERNED = "bench-governed"
KEYS = 100
MAX_ACTIVE = 64
PER_KEY = 4

# The app the worker loads (`bench_worker:app`): one async no-op task, served on both queues.
app = workhorse.App("bench")


@app.task(name=TASK, queue=UNGOVERNED)
async def noop() -> None:
    return None


# ---- workhorse ----------------------------------------------------------------------------------


def fill(conn: psycopg.Connection[Any], queue: str, jobs: int, keyed: bool) -> None:
    conn.execute("TRUNCATE workhorse.jobs, workhorse.key_heads, workhorse.key_hints")
    q = Queue(conn)
    payload = {"args": [], "kwargs": {}}
    for start in range(0, jobs, 5000):
        batch = [
            (
                TASK,
                payload,
                EnqueueOptions(queue=queue, concurrency_key=f"k{i % KEYS}" if keyed else None),
            )
            for i in range(start, min(start + 5000, jobs))
        ]
        q.enqueue_many(batch)
    conn.execute("VACUUM ANALYZE workhorse.jobs")
    conn.execute("VACUUM ANALYZE workhorse.key_heads")
    c.try_checkpoint(conn)


def run_workhorse(
    url: str, queue: str, jobs: int, slots: int, concurrency: int, keyed: bool,
    worker_url: str | None = None,
) -> dict[str, float]:
    """Fill on `url` (direct), run the worker on `worker_url` (default: `url`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        fill(conn, queue, jobs, keyed)
        env = {**os.environ, "WORKHORSE_DATABASE_URL": worker_url or url}
        started = time.monotonic()
        log_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the process, below)
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workhorse",
                "worker",
                "bench_worker:app",
                "--slots",
                str(slots),
                "--concurrency",
                str(concurrency),
                "--queues",
                queue,
                "--lease",
                "60s",
                "--grace",
                "10s",
            ],
            cwd=HERE,
            env=env,
            stdout=subprocess.DEVNULL,
            # A file, not a pipe nobody reads: at --log-level info the worker writes a line per
            # finished job, and a full pipe would stall it.
            stderr=log_file,
        )
        try:
            deadline = started + max(120.0, jobs / 200)
            while True:
                time.sleep(0.25)
                left = conn.execute(
                    "SELECT count(*) FROM workhorse.jobs "
                    "WHERE status IN ('ready', 'active', 'scheduled')"
                ).fetchone()
                if left is not None and left[0] == 0:
                    break
                if worker.poll() is not None or time.monotonic() > deadline:
                    log_file.seek(0)
                    err = log_file.read().decode(errors="replace")[-5000:]
                    raise SystemExit(f"the worker stopped or stalled ({left} left):\n{err}")
            wall = time.monotonic() - started
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
            log_file.close()
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
            "extract(epoch FROM max(finished_at) - min(started_at)), max(attempts) "
            "FROM workhorse.jobs"
        ).fetchone()
        assert row is not None
        succeeded, span, attempts = int(row[0]), float(row[1]), int(row[2])
    return {
        "rate": succeeded / span,
        "span": span,
        "wall": wall,
        "succeeded": succeeded,
        "max_attempts": attempts,
    }


# ---- pgqueuer -----------------------------------------------------------------------------------


async def _pgqueuer(url: str, jobs: int, dequeuers: int, batch: int) -> dict[str, float]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    params = c.asyncpg_params(url)
    admin = await asyncpg.connect(**params)
    queries = Queries(AsyncpgDriver(admin))
    if not await queries.schema_is_installed():
        await queries.install()
    await admin.execute("TRUNCATE pgqueuer, pgqueuer_log")
    for start in range(0, jobs, 5000):
        n = min(5000, jobs - start)
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
    await admin.execute("VACUUM ANALYZE")
    await admin.execute("CHECKPOINT")

    first: list[float] = []
    done = 0

    async def run_one() -> None:
        conn = await asyncpg.connect(**params)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint("noop")
        async def handler(job: Job) -> None:
            nonlocal done
            if not first:
                first.append(time.perf_counter())
            done += 1

        await qm.run(batch_size=batch, mode=QueueExecutionMode.drain)
        await conn.close()

    await asyncio.gather(*(run_one() for _ in range(dequeuers)))
    end = time.perf_counter()
    await admin.close()
    span = end - first[0]
    return {"rate": done / span, "span": span, "succeeded": done}



def run_pgqueuer(url: str, jobs: int, dequeuers: int = 5, batch: int = 10) -> dict[str, float]:
    return asyncio.run(_pgqueuer(url, jobs, dequeuers, batch))


# ---- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_worker")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--slots", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--concurrency", type=int, default=128, help="jobs in flight per slot (default %(default)s)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the best is shown")
    parser.add_argument("--skip-pgqueuer", action="store_true")
    parser.add_argument("--only", choices=("ungoverned", "governed", "pgqueuer"), default=None)
    parser.add_argument("--pgbouncer", action="store_true",
                        help="also run each workhorse case through PgBouncer (transaction mode)")
    args = parser.parse_args()
    bouncer = None
    if args.pgbouncer:
        import tempfile

        from pgbouncer_server import PgBouncer

        bouncer = PgBouncer(c.resolve_server_url(args.database_url)[0],
                            Path(tempfile.mkdtemp(prefix="bench-pgbouncer-")), pool_size=20)
        bouncer.start()
    try:
        _main(args, bouncer)
    finally:
        if bouncer is not None:
            bouncer.stop()


def _main(args: argparse.Namespace, bouncer: Any) -> None:

    server_url, source = c.resolve_server_url(args.database_url)
    printer = c.Printer(args.format)
    printer.heading(f"worker throughput, {c.count(args.jobs)} no-op jobs ({c.stamp()})")
    with c.scratch_database(server_url, args.db_name, args.keep_db) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            facts = c.server_facts(conn)
        facts["server url"] = f"{c.describe_url(url)} ({source})"
        facts["worker"] = f"--slots {args.slots} --concurrency {args.concurrency}"
        printer.facts("setup", facts)
        with psycopg.connect(url, autocommit=True) as conn:
            Queue(conn).sync_concurrency_policies(
                "bench", [ConcurrencyPolicyDefinition(GOVERNED, MAX_ACTIVE, PER_KEY)]
            )

        table = c.Table(
            f"jobs/s (best of {args.repeat})",
            ["case", "jobs/s", "first claim to last completion (s)", "notes"],
        )
        results: dict[str, float] = {}
        cases = [("ungoverned", UNGOVERNED, False), ("governed", GOVERNED, True)]
        for name, queue, keyed in cases:
            if args.only not in (None, name):
                continue
            best: dict[str, float] | None = None
            for _ in range(args.repeat):
                result = run_workhorse(url, queue, args.jobs, args.slots, args.concurrency, keyed)
                if best is None or result["rate"] > best["rate"]:
                    best = result
            assert best is not None
            results[name] = best["rate"]
            note = (
                f"max_active={MAX_ACTIVE}, per_key={PER_KEY}, {KEYS} keys" if keyed else "no policy"
            )
            table.add(
                f"workhorse {name}",
                c.rate(best["rate"]),
                f"{best['span']:.2f}",
                f"{note}; {int(best['succeeded'])} succeeded",
            )
            if bouncer is not None:
                pooled: dict[str, float] | None = None
                for _ in range(args.repeat):
                    result = run_workhorse(url, queue, args.jobs, args.slots, args.concurrency,
                                           keyed, worker_url=bouncer.url_for(url))
                    if pooled is None or result["rate"] > pooled["rate"]:
                        pooled = result
                assert pooled is not None
                table.add(
                    f"workhorse {name} through pgbouncer",
                    c.rate(pooled["rate"]),
                    f"{pooled['span']:.2f}",
                    f"transaction mode, pool 20; {pooled['rate'] / best['rate']:.2f} of direct",
                )
        if not args.skip_pgqueuer and args.only in (None, "pgqueuer"):
            try:
                import pgqueuer  # noqa: F401
            except ImportError:
                table.notes.append("pgqueuer: not installed (pip install -e '.[bench]')")
            else:
                best_pgq: dict[str, float] | None = None
                for _ in range(args.repeat):
                    result = run_pgqueuer(url, args.jobs)
                    if best_pgq is None or result["rate"] > best_pgq["rate"]:
                        best_pgq = result
                assert best_pgq is not None
                results["pgqueuer"] = best_pgq["rate"]
                table.add(
                    "pgqueuer 1.6",
                    c.rate(best_pgq["rate"]),
                    f"{best_pgq['span']:.2f}",
                    "5 QueueManagers x batch 10, one process, asyncpg",
                )
        if "ungoverned" in results and "governed" in results:
            table.notes.append(
                f"governed / ungoverned = {results['governed'] / results['ungoverned']:.2f}"
            )
        if "ungoverned" in results and "pgqueuer" in results:
            table.notes.append(
                f"workhorse ungoverned / pgqueuer = "
                f"{results['ungoverned'] / results['pgqueuer']:.2f}"
            )
        printer.table(table)


if __name__ == "__main__":
    main()
