"""Durable execution (issue #42, docs/design.md "Durable execution"): what steps cost, how fast a
suspended job resumes, and what the feature costs a job that uses no step.

    .venv/bin/python benchmarks/bench_durable.py [--database-url URL] [--quick] [--format plain]
        [--only steps|resume|noop] [--baseline REV] [--skip-baseline] [--pgbouncer]

Every figure but the round trips comes from real workers: `python -m workhorse worker
bench_durable:app --slots 2 --concurrency 16` (this file is also the app module; its handlers are
sync), one supervisor, started for each measurement on the one queue it measures, in the scratch
database `wh_bench_durable` of the chosen server.

1. Steps. J jobs each calling `current_job().step.run(f"s{i}", nothing)` N times (N = 0, 1, 10;
   50 in full mode), prefilled before the worker starts: J = 2,000 (quick) or 5,000, five times
   that for N = 0 and a fifth for N = 50. From the jobs' rows: jobs/s and steps/s
   over first claim to last finish, the worker time per job (that span over J, at this
   concurrency) and what each step adds to it against N = 0. Round trips: one job of 1 and one of
   11 steps run by `workhorse.testing.drain` in this process (the worker's executor and step
   store), with libpq's trace on the step store's connections, counting the server's
   ReadyForQuery messages: the first step's, and each further step's.
2. Resume latency. A timer: J jobs (200; quick 100) enqueued 20 ms apart while the worker runs,
   each `t = time.time(); step.sleep("nap", 1); return t`: the resumed run returns when its
   handler started, and the latency is that minus the sleep's `wake_at` (job_steps, the
   database's clock; both clocks are this host's when the server runs here). Beside it the
   claim's view: the job's last `started_at` minus `wake_at`, both the database's clock. A
   signal: J jobs suspended in `step.wait_for("go", signal="go")`, then signaled one at a time,
   20 ms apart, with `app.signal(id, "go")` (autocommit); the latency is the resumed handler's
   start minus the moment the signal's call returned (its commit acknowledged). p50, p99, max.
   `--pgbouncer` measures it again with the worker behind Debian's PgBouncer in transaction
   mode (tests/pgbouncer_server.py), where it cannot LISTEN and polls for wake-ups.
3. A no-op job's throughput at this checkout against the commit before durable execution
   (`--baseline`, default 66d2d3f~1, exported with `git archive` to a temporary directory and
   put first on the worker's PYTHONPATH; it gets a scratch database of its own, installed and
   filled by that code). N no-op jobs (50,000; quick 10,000) prefilled, drained by one worker;
   jobs/s from the rows as in bench_worker.py. The two alternate, R rounds (5; quick 3); the
   table shows the median and the best of each.

Before each measurement the run waits (up to --quiet-wait s) for the machine to be idle. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

import workhorse
from workhorse import current_job

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NOOP, STEPS, SLEEPER, WAITER = ("bench.durable.noop", "bench.durable.steps",
                                "bench.durable.sleeper", "bench.durable.waiter")
QUEUES = {NOOP: "durable-noop", STEPS: "durable-steps", SLEEPER: "durable-sleep",
          WAITER: "durable-signal"}
SLOTS, CONCURRENCY = 2, 16
SLEEP_SECONDS = 1.0
SPACING = 0.02  # between two enqueues (timer) or two signals
DEFAULT_BASELINE = "66d2d3f~1"
_READY = re.compile(r"^B\t\d+\tReadyForQuery", re.M)

# The app the worker loads (`bench_durable:app`). The no-op task must import and run on the
# baseline commit too, which has no durable steps: only the other tasks touch `step`.
app = workhorse.App("bench-durable")


def _nothing() -> None:
    return None


@app.task(name=NOOP, queue=QUEUES[NOOP])
def noop(n: int = 0) -> None:
    return None


@app.task(name=STEPS, queue=QUEUES[STEPS])
def steps(n: int) -> None:
    step = current_job().step
    for i in range(n):
        step.run(f"s{i}", _nothing)


@app.task(name=SLEEPER, queue=QUEUES[SLEEPER])
def sleeper(n: int = 0) -> float:
    started = time.time()
    current_job().step.sleep("nap", SLEEP_SECONDS)
    return started  # the resumed run's start


@app.task(name=WAITER, queue=QUEUES[WAITER])
def waiter(n: int = 0) -> float:
    started = time.time()
    current_job().step.wait_for("go", signal="go")
    return started


# ---- filling, and the worker -------------------------------------------------------------------


def fill(url: str, task: str, jobs: int, arg: int) -> None:
    """Empty the job tables, enqueue `jobs` jobs of `task` (argument `arg`), vacuum, checkpoint.
    Runs with whichever workhorse is imported (this checkout's, or the baseline's)."""
    from workhorse import EnqueueOptions, Queue

    with psycopg.connect(url, autocommit=True) as conn:
        Queue(conn).install_schema()
        tables = ["workhorse.jobs", "workhorse.key_heads", "workhorse.key_hints"]
        for extra in ("workhorse.job_steps", "workhorse.job_signals"):
            if conn.execute("SELECT to_regclass(%s)", (extra,)).fetchone()[0] is not None:  # type: ignore[index]
                tables.append(extra)
        conn.execute(f"TRUNCATE {', '.join(tables)}")
        q = Queue(conn)
        payload = {"args": [arg], "kwargs": {}}
        for start in range(0, jobs, 5000):
            q.enqueue_many([(task, payload, EnqueueOptions(queue=QUEUES[task]))
                            for _ in range(start, min(start + 5000, jobs))])
        conn.execute("VACUUM ANALYZE workhorse.jobs")
        c.try_checkpoint(conn)


def fill_with(code: Path | None, url: str, task: str, jobs: int, arg: int) -> None:
    """`fill` in a subprocess importing workhorse from `code` (None: this checkout)."""
    env = {**os.environ}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--internal-fill", url, task,
                    str(jobs), str(arg)], cwd=tempfile.gettempdir(), env=env, check=True)


# Behind PgBouncer, how long a worker's start-up (its LISTEN probe) is let pass before signals.
STARTUP_SETTLE = 4.0
# The worker's URL for a scratch database, when it is not the database's own (PgBouncer).
WORKER_URLS: dict[str, str] = {}


def pgbouncer(server: str) -> Any:
    """Debian's pgbouncer in transaction mode in front of `server` (tests/pgbouncer_server.py)."""
    sys.path.insert(0, str(REPO / "tests"))
    from pgbouncer_server import PgBouncer

    bouncer = PgBouncer(server, Path(tempfile.mkdtemp(prefix="bench-pgbouncer-")), pool_size=20)
    bouncer.start()
    return bouncer


@contextlib.contextmanager
def worker(url: str, queue: str, code: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """One supervisor on `queue` (workhorse from `code`, else this checkout); SIGTERM on exit.
    With `--pgbouncer` the resume measurement's worker connects through PgBouncer instead."""
    env = {**os.environ, c.ENV_URL: WORKER_URLS.get(url, url)}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", "workhorse", "worker", "bench_durable:app", "--slots", str(SLOTS),
         "--concurrency", str(CONCURRENCY), "--queues", queue, "--lease", "60s", "--grace",
         "10s"], cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=log)
    process.log = log  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def wait_until(conn: psycopg.Connection[Any], process: subprocess.Popen[bytes], query: str,
               params: tuple[Any, ...], timeout: float, what: str) -> None:
    """Poll `query` (one boolean) every 50 ms until true; exit with the worker's log else."""
    deadline = time.monotonic() + timeout
    while not conn.execute(query, params).fetchone()[0]:  # type: ignore[index]
        if process.poll() is not None or time.monotonic() > deadline:
            process.log.seek(0)  # type: ignore[attr-defined]
            log = process.log.read().decode(errors="replace")[-4000:]  # type: ignore[attr-defined]
            sys.exit(f"{what}: the worker stopped or stalled\n{log}")
        time.sleep(0.05)


UNFINISHED = ("SELECT NOT EXISTS (SELECT 1 FROM workhorse.jobs WHERE status IN "
              "('ready', 'active', 'scheduled', 'suspended'))")


def drain_rate(url: str, task: str, jobs: int, arg: int, code: Path | None = None
               ) -> tuple[float, float, int]:
    """Prefill, run one worker until every job finished: (jobs/s, span s, succeeded)."""
    fill_with(code, url, task, jobs, arg)
    with psycopg.connect(url, autocommit=True) as conn:
        with worker(url, QUEUES[task], code) as process:
            wait_until(conn, process, UNFINISHED, (), max(120.0, jobs / 100), task)
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
            "extract(epoch FROM max(finished_at) - min(started_at)) FROM workhorse.jobs"
        ).fetchone()
    assert row is not None
    succeeded, span = int(row[0]), float(row[1])
    return succeeded / span, span, succeeded


# ---- 1. steps -----------------------------------------------------------------------------------


def round_trips(url: str) -> tuple[float, float]:
    """(the first step's round trips, each further step's), from a traced drain of one job of 1
    step and one of 11 (the step store's own connections only)."""
    from workhorse import database
    from workhorse.testing import drain

    traces: list[tuple[int, str]] = []
    connect = database.connect

    def traced(*args: Any, **kwargs: Any) -> Any:
        conn = connect(*args, **kwargs)
        if kwargs.get("role") == "drain-steps":
            handle, path = tempfile.mkstemp(prefix="bench_durable_trace_")
            conn.pgconn.trace(handle)
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            traces.append((handle, path))
        return conn

    counted = []
    database.connect = traced  # type: ignore[assignment]
    try:
        for n in (1, 11):
            fill(url, STEPS, 1, n)
            drain(app, queues=[QUEUES[STEPS]])
            ready = 0
            for handle, path in traces:
                os.close(handle)
                ready += len(_READY.findall(Path(path).read_text(errors="replace")))
                os.unlink(path)
            traces.clear()
            counted.append(ready)
    finally:
        database.connect = connect  # type: ignore[assignment]
    return float(counted[0]), (counted[1] - counted[0]) / 10


def bench_steps(url: str, out: c.Printer, gate: c.QuietGate, *, jobs: int, sizes: list[int],
                rounds: int) -> None:
    out.heading(f"Steps: {jobs:,} jobs of N step.run calls each (N = {sizes}), one worker "
                f"--slots {SLOTS} --concurrency {CONCURRENCY}, sync handlers; best of {rounds}")
    first, further = round_trips(url)
    out.line(f"  round trips: the first step of a run {first:.0f}, each further step "
             f"{further:.1f} (libpq trace of the step store's connections)")
    best: dict[int, tuple[float, float, int]] = {}
    for r in range(rounds):
        for n in sizes if r % 2 == 0 else sizes[::-1]:
            count = jobs * 5 if n == 0 else jobs if n <= 10 else max(jobs // 5, 100)
            gate.wait()
            result = drain_rate(url, STEPS, count, n)
            if n not in best or result[0] > best[n][0]:
                best[n] = result
            out.line(f"    round {r + 1}/{rounds}: N={n}: {c.rate(result[0])} jobs/s "
                     f"({result[2]} succeeded in {result[1]:.2f} s)")
    table = c.Table(
        "Jobs of N steps: throughput, worker time per job and what a step adds (from the jobs' "
        "rows: first claim to last finish)",
        ["steps a job", "jobs", "jobs/s", "steps/s", "ms a job", "ms a step added",
         "round trips"])
    base = best[sizes[0]][1] / best[sizes[0]][2] if sizes[0] == 0 else None
    for n in sizes:
        rate, span, done = best[n]
        per_job = span / done
        added = (per_job - base) / n if base is not None and n else float("nan")
        rts = "0" if n == 0 else f"{first + further * (n - 1):.0f}"
        table.add(n, f"{done:,}", c.rate(rate), c.rate(rate * n) if n else "-",
                  f"{per_job * 1000:.3f}", f"{added * 1000:.3f}" if n else "-", rts)
    table.notes.append(
        f"ms a job: the span over the jobs, at {SLOTS} slots x {CONCURRENCY} handlers; ms a step "
        "added: (ms a job - ms a job of 0 steps) / N. Round trips: the step store's own, "
        f"{first:.0f} for the first step of a run (its recorded steps are read) and "
        f"{further:.1f} for each further one; a job of 0 steps makes none.")
    out.table(table)


# ---- 2. resume latency --------------------------------------------------------------------------


def latency_row(table: c.Table, label: str, values: list[float]) -> None:
    table.add(label, len(values), c.ms(c.percentile(values, 50)), c.ms(c.percentile(values, 99)),
              c.ms(max(values)) if values else "-")


def bench_resume(url: str, out: c.Printer, gate: c.QuietGate, *, jobs: int,
                 through: str | None = None) -> None:
    from workhorse import Queue

    out.heading(f"Resume latency: {jobs} jobs after a {SLEEP_SECONDS:g} s timer, {jobs} after a "
                f"signal; one worker --slots {SLOTS} --concurrency {CONCURRENCY}"
                + (f", its connections through {through}" if through else ""))
    table = c.Table("Resume latency, ms", ["resumed by", "jobs", "p50", "p99", "max"])
    os.environ[c.ENV_URL] = url
    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        # A timer.
        fill(url, SLEEPER, 0, 0)
        gate.wait()
        with worker(url, QUEUES[SLEEPER]) as process:
            ids = []
            for _ in range(jobs):
                ids.append(sleeper.delay().id)
                time.sleep(SPACING)
            wait_until(conn, process, UNFINISHED, (), 120, "timer")
        rows = conn.execute(
            "SELECT (j.result #>> '{}')::float8 - extract(epoch FROM s.wake_at), "
            "extract(epoch FROM j.started_at - s.wake_at) FROM workhorse.jobs j "
            "JOIN workhorse.job_steps s ON s.job_id = j.id AND s.name = 'nap' "
            "WHERE j.status = 'succeeded'").fetchall()
        latency_row(table, f"a timer ({SLEEP_SECONDS:g} s sleep): handler start - wake_at",
                    [float(r[0]) for r in rows])
        latency_row(table, "a timer: the claim's started_at - wake_at",
                    [float(r[1]) for r in rows])
        if len(rows) != jobs:
            table.notes.append(f"timer: {len(rows)} of {jobs} jobs succeeded")
        # A signal.
        fill(url, WAITER, jobs, 0)
        gate.wait()
        with worker(url, QUEUES[WAITER]) as process:
            wait_until(conn, process,
                       "SELECT count(*) = %s FROM workhorse.jobs WHERE status = 'suspended'",
                       (jobs,), 120, "waits")
            if through:
                # Past the supervisor's start: its LISTEN probe (about 2 s through PgBouncer,
                # which refuses LISTEN) ends before it polls; a signal sent meanwhile waits.
                time.sleep(STARTUP_SETTLE)
            sent: dict[int, float] = {}
            for (job_id,) in conn.execute("SELECT id FROM workhorse.jobs ORDER BY id").fetchall():
                q.signal(job_id, "go")
                sent[int(job_id)] = time.time()
                time.sleep(SPACING)
            wait_until(conn, process, UNFINISHED, (), 120, "signals")
        rows = conn.execute("SELECT id, (result #>> '{}')::float8 FROM workhorse.jobs "
                            "WHERE status = 'succeeded'").fetchall()
        latency_row(table, "a signal: handler start - the signal's commit",
                    [float(r[1]) - sent[int(r[0])] for r in rows])
    table.notes.append(
        f"Jobs enqueued (timer) or signaled {SPACING * 1000:.0f} ms apart, so each resume is "
        "alone. Handler start: time.time() at the top of the resumed run; wake_at and "
        "started_at: the database's clock (the same host's clock when the server runs here).")
    out.table(table)


# ---- 3. a no-op job, here and before durable execution -----------------------------------------


def export_baseline(rev: str, into: Path) -> str:
    """The baseline's workhorse package under `into` (git archive); its short hash."""
    commit = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "archive", commit, "workhorse"], cwd=REPO, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return commit


def bench_noop(server: str, url: str, db_name: str, out: c.Printer, gate: c.QuietGate, *,
               jobs: int, rounds: int, baseline: str | None) -> None:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                          capture_output=True, text=True).stdout.strip() or "?"
    out.heading(f"A no-op job: {jobs:,} jobs drained by one worker --slots {SLOTS} "
                f"--concurrency {CONCURRENCY}, this checkout ({head}) against {baseline}; "
                f"{rounds} rounds, alternating")
    codes: list[tuple[str, Path | None, str]] = [(f"this checkout (HEAD {head})", None, url)]
    with contextlib.ExitStack() as stack:
        if baseline is not None:
            where = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="bench_durable_base_")))
            commit = export_baseline(baseline, where)
            base_db = db_name + "_base"
            ident = sql.Identifier(base_db)
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
                admin.execute(sql.SQL("CREATE DATABASE {}").format(ident))

            def drop() -> None:
                with psycopg.connect(server, autocommit=True) as admin:
                    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))

            stack.callback(drop)
            codes.append((f"{baseline} ({commit}), before durable execution", where,
                          c.with_dbname(server, base_db)))
        rates: dict[str, list[float]] = {label: [] for label, _, _ in codes}
        for r in range(rounds):
            for label, code, where_url in codes if r % 2 == 0 else codes[::-1]:
                gate.wait()
                rate, span, done = drain_rate(where_url, NOOP, jobs, 0, code)
                rates[label].append(rate)
                out.line(f"    round {r + 1}/{rounds}: {label}: {c.rate(rate)} jobs/s "
                         f"({done} in {span:.2f} s)")
    table = c.Table(f"No-op jobs/s, {rounds} rounds", ["code", "median", "best", "rounds"])
    for label, values in rates.items():
        table.add(label, c.rate(c.median(values)), c.rate(max(values)),
                  ", ".join(c.rate(v) for v in values))
    if len(rates) == 2:
        here, before = (c.median(v) for v in rates.values())
        table.notes.append(f"this checkout / baseline (medians) = {here / before:.3f}")
    out.table(table)


# ---- main ---------------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--internal-fill":
        fill(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_durable")
    parser.add_argument("--quick", action="store_true", help="fewer jobs and rounds")
    parser.add_argument("--only", choices=("steps", "resume", "noop"), default=None)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE,
                        help="the commit to compare a no-op job with (default %(default)s)")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="measure the no-op job at this checkout only")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5, quick 3)")
    parser.add_argument("--pgbouncer", action="store_true",
                        help="also measure resume latency with the worker behind PgBouncer "
                        "(transaction mode, Debian's pgbouncer)")
    parser.add_argument("--quiet-wait", type=float, default=None,
                        help="before each measurement wait up to this many seconds for the "
                        "machine to be quiet (default 60, quick 5)")
    args = parser.parse_args()
    if not args.skip_baseline and shutil.which("git") is None:
        sys.exit("git is needed to export the baseline (or --skip-baseline)")
    out = c.Printer(args.format)
    gate = c.QuietGate(args.quiet_wait if args.quiet_wait is not None
                       else 5 if args.quick else 60)
    server, source = c.resolve_server_url(args.database_url)
    rounds = args.rounds or (3 if args.quick else 5)
    started = time.perf_counter()
    with c.scratch_database(server, args.db_name, keep=args.keep_db) as url:
        os.environ[c.ENV_URL] = url  # this process's app (the drain, the enqueues)
        with psycopg.connect(url, autocommit=True) as conn:
            out.heading(f"bench_durable ({'quick' if args.quick else 'full'} mode)")
            facts = {"database": f"{c.describe_url(url)} ({source})", "run at": c.stamp(),
                     "workhorse": str(Path(workhorse.__file__).resolve().parent)}
            facts.update(c.server_facts(conn))
            out.facts("environment", facts)
        if args.only in (None, "steps"):
            bench_steps(url, out, gate, jobs=2000 if args.quick else 5000,
                        sizes=[0, 1, 10] if args.quick else [0, 1, 10, 50],
                        rounds=2 if args.quick else 3)
        if args.only in (None, "resume"):
            bench_resume(url, out, gate, jobs=100 if args.quick else 200)
            if args.pgbouncer:
                bouncer = pgbouncer(server)
                try:
                    WORKER_URLS[url] = bouncer.url_for(url)
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute("TRUNCATE workhorse.jobs, workhorse.job_steps, "
                                     "workhorse.job_signals")
                    bench_resume(url, out, gate, jobs=100 if args.quick else 200,
                                 through="PgBouncer in transaction mode (no LISTEN: polling)")
                finally:
                    WORKER_URLS.pop(url, None)
                    bouncer.stop()
        if args.only in (None, "noop"):
            bench_noop(server, url, args.db_name, out, gate,
                       jobs=10_000 if args.quick else 50_000, rounds=rounds,
                       baseline=None if args.skip_baseline else args.baseline)
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            out.line(f"\nafter the run: {c.machine_load(conn)}")
            out.line(gate.summary())
    out.line(f"bench_durable finished in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
