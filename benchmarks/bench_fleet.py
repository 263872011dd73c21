"""Fleet throughput (the throughput issue's table and targets a-f), workhorse beside its peers.

    .venv/bin/python benchmarks/bench_fleet.py [--database-url URL] [--only CASE[,CASE]] [--quick]
        [--repeat R] [--quiet-wait S] [--keep-db] [--format rich|plain]

Every case runs in the scratch database `wh_bench_fleet` on the chosen server. Workhorse runs as
real `python -m workhorse worker _fleet_app:app --queues Q ...` subprocesses (cwd benchmarks/,
WORKHORSE_DATABASE_URL set to the scratch database); the code measured is whatever `import
workhorse` resolves to, so `PYTHONPATH=/other/tree` measures another tree (the setup facts print
which file and commit). Before each run the case's workhorse tables are truncated, the case's policy
is synced (namespace `fleet`), the backlog is filled with `Queue.enqueue_many` (5,000 a statement),
VACUUM ANALYZEd and checkpointed, and only then does the worker start. A figure is
jobs / (last finished_at - first started_at), from the jobs' own rows, so start-up is not counted.

  1  async no-op, ungoverned, -s 2 -c 32, vs pgqueuer's drain          target (c) >= 4x pgqueuer
  2  sync no-op at the worker's default flags (only --queues)           target (b) >= 1x pgqueuer
  3  sync no-op, ungoverned, -s 2 -c 32                                 must stay >= 1x pgqueuer
  4  governed no-op (64 / per-key 4 x 100 keys), async and sync,
     -s 2 -c 32, over the ungoverned figure of the same kind and flags  target (d) >= 0.7
  5  20 ms handlers, 12,800-job backlog (quick 6,400), -s 2 -c 64: queue-wide max_active=64
     and 64 / per-key 4 x 100 keys, async and sync, one supervisor; async with two supervisors
     sharing the budget; pgqueuer (concurrency_limit=64) beside (i)     target (a) >= 2,880/s
  6  100 ms async handlers, max_active=64, -s 2 -c 64                   ideal 640/s
  7  enqueue -> handler start, idle worker, 200 single-job enqueues
     ~20 ms apart                                                       target (e) p50 <= 5 ms,
                                                                        p99 <= 20 ms
  8  Queue.enqueue_many of 10k jobs vs COPY into a LIKE-jobs table      target (f) >= 0.5x COPY
  9  peers side by side, each at its default flags and tuned: sync no-op, async no-op, and 20 ms
     jobs at 64 places; workhorse, Celery 5 on Redis, procrastinate 3, pgqueuer 1.6 (below)
 10  fair share vs FIFO (issue #26): 20 ms async handlers, max_active=16, 4 keys backlogged
     (enqueued one key after another, 3,200 jobs each; quick 800), -s 2 -c 16, fairness="key"
     then "fifo": throughput, utilization (the handlers' running time over 16 x the drain's
     span, from their own [start, end]) and each key's share of the running time while every
     key still had ready work (fair: ~25% each; FIFO: the first key's)

pgqueuer's drain: 5 QueueManagers in one process, batch 10, mode=drain (bench_worker's reference
configuration); its figure is jobs over the time from its first handler call to the end of its
drain.

Case 9, the peers. Celery 5 runs as `celery -A _celery_app worker` subprocesses on a Redis
server the benchmark starts on a private port (`--redis-port`, default 6390; Debian's
redis-server is installed with apt-get when missing) with no persistence, and stops at the end;
procrastinate 3 runs in this process (`run_worker_async(wait=False)`); pgqueuer as above. Each
peer drains the same backlog (no-op 10k, 20 ms 6,400; quick 3k and 3,200) after it is filled, and
its figure is jobs over [first handler start, last handler end] from the handlers' own clocks
(see _peers.py and _celery_app.py). "Default" is the peer's own defaults, changed only where the
case needs it (64 places for the 20 ms jobs); "tuned" is the best of the few settings tried, each
named in its row. workhorse's rows reuse cases 1, 2, 3 and 5(i) when they ran in the same
invocation, and measure them otherwise. Celery has no async tasks, so it has no async row.

Governed runs also check the budget: a thread counts the queue's active rows (total and per key)
every ~20 ms, and the timed handlers return [start, end], from which the real overlap of running
handlers is rebuilt. Either peak above its limit prints VIOLATION.

Every workhorse drain notes its CPU: PostgreSQL and workhorse CPU per job (µs) and cores busy
over [first start, last finish], from /proc/<pid>/stat of the postmaster's children (this
database's backends and the background processes) and of the supervisors' process trees,
sampled every 50 ms (_common.CpuSampler; bench_scale.py's docstring has the method).

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, LiteralString, cast

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as c  # noqa: E402
import _fleet_app as fa  # noqa: E402
import _peers as peers  # noqa: E402

import workhorse  # noqa: E402
from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue  # noqa: E402

APP_REF = "_fleet_app:app"
KEYS = 100
MAX_ACTIVE = 64
PER_KEY = 4
HANDLER_20MS = 0.02
HANDLER_100MS = 0.1
# The ideal: every place of the budget running a handler all the time.
IDEAL_20MS = MAX_ACTIVE / HANDLER_20MS
IDEAL_100MS = MAX_ACTIVE / HANDLER_100MS
TARGET_A = 0.9 * IDEAL_20MS  # target (a): 90% of the ideal
WORKHORSE_TABLES = ("jobs", "key_heads", "key_hints", "rate_starts")
CASE_IDS = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "10")
FAIR_MAX_ACTIVE = 16
FAIR_KEYS = 4


@dataclass(frozen=True)
class Sizes:
    noop: int  # cases 1, 3, 4 and pgqueuer's drain
    default_sync: int  # case 2
    backlog: int  # case 5
    slow: int  # case 6
    latency: int  # case 7
    copy: int  # case 8
    peer_noop: int  # case 9, the peers' no-op drains
    peer_backlog: int  # case 9, the peers' 20 ms drains
    fair: int = 12_800  # case 10, over FAIR_KEYS keys


FULL = Sizes(noop=50_000, default_sync=10_000, backlog=12_800, slow=3_200, latency=200,
             copy=10_000, peer_noop=10_000, peer_backlog=6_400)
QUICK = Sizes(noop=10_000, default_sync=3_000, backlog=6_400, slow=1_280, latency=200,
              copy=10_000, peer_noop=3_000, peer_backlog=3_200, fair=3_200)


@dataclass(frozen=True)
class Policy:
    max_active: int | None
    per_key: int | None = None
    fairness: str = "fifo"
    # Keyed jobs (fair share, or a per-key limit): over this many keys, round robin or, with
    # `blocks`, all of one key's jobs before the next key's (each key's backlog behind the last).
    keys: int = KEYS
    blocks: bool = False

    @property
    def keyed(self) -> bool:
        return self.per_key is not None or self.fairness == "key" or self.blocks

    def describe(self) -> str:
        fair = f", fairness={self.fairness!r}" if self.fairness != "fifo" or self.blocks else ""
        if self.per_key is None:
            return f"max_active={self.max_active}{fair}"
        return f"{self.max_active} / per-key {self.per_key} x {self.keys} keys{fair}"


@dataclass
class Peak:
    """The largest overlap seen: jobs in the queue at once, and jobs of one key at once."""

    total: int = 0
    per_key: int = 0
    samples: int = 0


@dataclass
class Drain:
    rate: float
    span: float
    succeeded: int
    jobs: int
    max_attempts: int
    db_peak: Peak | None = None
    handler_peak: Peak | None = None
    in_force: str = ""
    cpu: c.CpuWindow | None = None  # over [first start, last finish]

    def cpu_text(self) -> str:
        """PostgreSQL and workhorse CPU per job (µs) and cores busy, from /proc (see _common)."""
        cpu = self.cpu
        if cpu is None or not self.succeeded:
            return "CPU not measured"
        server = ("PostgreSQL -" if math.isnan(cpu.server) else
                  f"PostgreSQL {cpu.server / self.succeeded * 1e6:,.0f} us")
        return (f"CPU/job {server}, workhorse {cpu.workers / self.succeeded * 1e6:,.0f} us; "
                f"cores busy {cpu.cores(cpu.server):.2f} + {cpu.cores(cpu.workers):.2f} "
                f"(machine {cpu.cores(cpu.machine):.2f})")


@dataclass
class PeerRow:
    case: str
    system: str
    config: str
    jobs: int
    rate: float
    peak: str = "-"


@dataclass
class Row:
    case: str
    workhorse: str
    pgqueuer: str = "-"
    ratio: str = "-"
    target: str = "-"
    met: str = "-"
    peak: str = "-"


@dataclass
class Run:
    """One invocation: the server, the sizes, the rows gathered, and figures reused across cases."""

    url: str
    sizes: Sizes
    printer: c.Printer
    gate: c.QuietGate
    repeat: int
    started: float = field(default_factory=time.monotonic)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    redis_url: str | None = None  # case 9's private Redis, when it could be started
    redis_note: str = ""
    peer_rows: list[PeerRow] = field(default_factory=list)

    def progress(self, text: str) -> None:
        self.printer.line(f"[{time.monotonic() - self.started:5.0f} s] {text}")

    def add(self, row: Row) -> None:
        self.rows.append(row)
        self.progress(f"{row.case}: {row.workhorse} | pgqueuer {row.pgqueuer} | {row.ratio} | "
                      f"{row.target}: {row.met}")

    def once(self, key: str, measure: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = measure()
        return self.cache[key]


# ---- workhorse: one drain of a filled queue ---------------------------------------------------


def reset(conn: psycopg.Connection[Any], queue: str, policy: Policy | None) -> None:
    """Empty the tables the cases use and make `queue`'s policy the only one of the namespace."""
    present = [
        name for name in WORKHORSE_TABLES
        if conn.execute("SELECT to_regclass(%s)", (f"workhorse.{name}",)).fetchone()[0]  # type: ignore[index]
    ]
    conn.execute(
        sql.SQL("TRUNCATE {}").format(
            sql.SQL(", ").join(sql.Identifier("workhorse", name) for name in present)
        )
    )
    definitions = (
        [ConcurrencyPolicyDefinition(queue, policy.max_active, policy.per_key,
                                     fairness=policy.fairness)] if policy else []
    )
    Queue(conn).sync_concurrency_policies(fa.NAMESPACE, definitions, prune=True)


def fill(
    conn: psycopg.Connection[Any], task: str, queue: str, jobs: int, keyed: bool,
    args: Sequence[Any] = (), keys: int = KEYS, blocks: bool = False,
) -> None:
    q = Queue(conn)
    payload = {"args": list(args), "kwargs": {}}
    plain = EnqueueOptions(queue=queue)
    by_key = [EnqueueOptions(queue=queue, concurrency_key=f"k{k}") for k in range(keys)]
    per_block = -(-jobs // keys)

    def key_of(i: int) -> int:
        return i // per_block if blocks else i % keys

    for start in range(0, jobs, 5000):
        batch = [
            (task, payload, by_key[key_of(i)] if keyed else plain)
            for i in range(start, min(start + 5000, jobs))
        ]
        q.enqueue_many(batch)
    for table in ("jobs", "key_heads", "key_hints"):
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier("workhorse", table)))
    c.try_checkpoint(conn)


def worker_command(queue: str, flags: Sequence[str] | None) -> list[str]:
    """`flags=None` is the worker at its default flags: only the queue is named."""
    return [sys.executable, "-m", "workhorse", "worker", APP_REF, "--queues", queue,
            *(flags or ())]


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def output(self) -> str:
        return "".join(path.read_text(errors="replace") for path in (self.stdout, self.stderr))


@contextlib.contextmanager
def workers(
    url: str, queue: str, flags: Sequence[str] | None, count: int,
    env: dict[str, str] | None = None,
) -> Iterator[list[Worker]]:
    """`count` supervisors on `queue` (`env` added to their environment); each gets SIGTERM and
    is waited for on the way out."""
    env = {**os.environ, c.ENV_URL: url, **(env or {})}
    started: list[Worker] = []
    with tempfile.TemporaryDirectory(prefix="bench_fleet_") as logs:
        try:
            for n in range(count):
                # Files, not pipes: a worker logging a line per job would fill a pipe and block.
                out, err = Path(logs, f"{n}.out"), Path(logs, f"{n}.err")
                with out.open("ab") as stdout, err.open("ab") as stderr:
                    process = subprocess.Popen(worker_command(queue, flags), cwd=HERE, env=env,
                                               stdout=stdout, stderr=stderr)
                started.append(Worker(process, out, err))
            yield started
        finally:
            for worker in started:
                if worker.process.poll() is None:
                    worker.process.send_signal(signal.SIGTERM)
            for worker in started:
                try:
                    worker.process.wait(30)
                except subprocess.TimeoutExpired:
                    worker.process.kill()
                    worker.process.wait()


class ActiveSampler:
    """Counts the queue's active rows (total, and the largest per key) every ~20 ms, from the
    database: the budget itself, as every claim sees it."""

    def __init__(self, url: str, queue: str) -> None:
        self.url = url
        self.queue = queue
        self.peak = Peak()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ActiveSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with c.monitor(self.url) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT COALESCE(sum(n), 0), COALESCE(max(n) FILTER (WHERE ckey <> ''), 0) "
                    "FROM (SELECT ckey, count(*) AS n FROM workhorse.jobs "
                    "      WHERE queue = %s AND status = 'active' GROUP BY ckey) AS per_key",
                    (self.queue,),
                ).fetchone()
                assert row is not None
                self.peak.total = max(self.peak.total, int(row[0]))
                self.peak.per_key = max(self.peak.per_key, int(row[1]))
                self.peak.samples += 1
                self._stop.wait(0.02)


def handler_overlap(conn: psycopg.Connection[Any], queue: str) -> Peak:
    """The largest number of handlers running at once, from their own [start, end] results
    (an end and a start at the same instant do not overlap)."""
    rows = conn.execute(
        "SELECT ckey, (result->>0)::float8, (result->>1)::float8 FROM workhorse.jobs "
        "WHERE queue = %s AND status = 'succeeded' AND jsonb_typeof(result) = 'array'",
        (queue,),
    ).fetchall()
    events: list[tuple[float, int, str]] = []
    for ckey, start, end in rows:
        events.append((start, 1, ckey))
        events.append((end, -1, ckey))
    events.sort(key=lambda e: (e[0], e[1]))
    peak = Peak(samples=len(rows))
    running = 0
    per_key: dict[str, int] = defaultdict(int)
    for _, delta, ckey in events:
        running += delta
        per_key[ckey] += delta
        peak.total = max(peak.total, running)
        if ckey:
            peak.per_key = max(peak.per_key, per_key[ckey])
    return peak


IN_FORCE = re.compile(r"(\d+) x concurrency (\d+)")


def drain(
    run: Run, *, task: str, queue: str, jobs: int, flags: Sequence[str] | None,
    policy: Policy | None = None, args: Sequence[Any] = (), supervisors: int = 1,
    timed_handlers: bool = False,
) -> Drain:
    """Best of `run.repeat` drains of `jobs` jobs of `task` by `supervisors` workers."""
    best: Drain | None = None
    for _ in range(run.repeat):
        result = _drain_once(run, task=task, queue=queue, jobs=jobs, flags=flags, policy=policy,
                             args=args, supervisors=supervisors, timed_handlers=timed_handlers)
        if best is None or result.rate > best.rate:
            best = result
    assert best is not None
    run.notes.append(f"{queue}: {best.cpu_text()}")
    return best


def _drain_once(
    run: Run, *, task: str, queue: str, jobs: int, flags: Sequence[str] | None,
    policy: Policy | None, args: Sequence[Any], supervisors: int, timed_handlers: bool,
) -> Drain:
    keyed = policy is not None and policy.keyed
    with c.monitor(run.url) as conn:
        reset(conn, queue, policy)
        fill(conn, task, queue, jobs, keyed, args, keys=policy.keys if policy else KEYS,
             blocks=policy is not None and policy.blocks)
        run.gate.wait()
        sampler = ActiveSampler(run.url, queue) if policy is not None else None
        postmaster = run.once("postmaster", lambda: c.postmaster_pid(conn))
        with workers(run.url, queue, flags, supervisors) as procs, (
            sampler if sampler is not None else contextlib.nullcontext()
        ), c.CpuSampler(run.url, postmaster, lambda: [w.process.pid for w in procs]) as cpu:
            deadline = time.monotonic() + max(120.0, jobs / 100)
            while True:
                time.sleep(0.2)
                left = conn.execute(
                    "SELECT count(*) FROM workhorse.jobs "
                    "WHERE status IN ('ready', 'active', 'scheduled')"
                ).fetchone()[0]  # type: ignore[index]
                if left == 0:
                    break
                dead = [w for w in procs if w.process.poll() is not None]
                if dead or time.monotonic() > deadline:
                    output = "\n".join(w.output()[-3000:] for w in dead or procs)
                    raise SystemExit(
                        f"{queue}: a worker stopped or stalled ({left} jobs left):\n{output}"
                    )
            banner = procs[0].output()
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
            "extract(epoch FROM max(finished_at) - min(started_at)), max(attempts), "
            "extract(epoch FROM min(started_at))::float8 "
            "- extract(epoch FROM clock_timestamp())::float8 + %s::float8 "
            "FROM workhorse.jobs WHERE queue = %s",
            (time.time(), queue),
        ).fetchone()
        assert row is not None
        succeeded, span, attempts = int(row[0]), float(row[1]), int(row[2])
        # The first start on this host's clock (the server's, less its offset from ours).
        first = float(row[3]) if row[3] is not None else math.nan
        handler_peak = handler_overlap(conn, queue) if timed_handlers else None
    found = IN_FORCE.search(banner)
    return Drain(
        rate=succeeded / span if span > 0 else math.nan,
        span=span,
        succeeded=succeeded,
        jobs=jobs,
        max_attempts=attempts,
        db_peak=sampler.peak if sampler is not None else None,
        handler_peak=handler_peak,
        in_force=f"--slots {found.group(1)} --concurrency {found.group(2)}" if found else "?",
        cpu=cpu.window(first, first + span) if not math.isnan(first) else None,
    )


def peak_cell(run: Run, label: str, policy: Policy, result: Drain) -> str:
    """'DB 64 / handlers 64 <= 64; per key 4 / 4 <= 4', and a loud VIOLATION when over."""
    parts = []
    over = []
    for name, limit, pick in (
        ("", policy.max_active, lambda p: p.total),
        ("per key ", policy.per_key, lambda p: p.per_key),
    ):
        if limit is None:
            continue
        seen = []
        for source, peak in (("DB", result.db_peak), ("handlers", result.handler_peak)):
            if peak is None:
                continue
            seen.append(f"{source} {pick(peak)}")
            if pick(peak) > limit:
                over.append(f"{source} peak {name}{pick(peak)} > {limit}")
        parts.append(f"{name}{' / '.join(seen)} <= {limit}")
    if over:
        message = f"VIOLATION in {label}: " + "; ".join(over)
        run.violations.append(message)
        run.printer.line("!" * 80)
        run.printer.line(message)
        run.printer.line("!" * 80)
    text = "; ".join(parts)
    return f"{text} VIOLATION" if over else text


def incomplete(result: Drain) -> str:
    """A note when a drain did not succeed every job exactly once."""
    problems = []
    if result.succeeded != result.jobs:
        problems.append(f"only {result.succeeded} of {result.jobs} succeeded")
    if result.max_attempts > 1:
        problems.append(f"max attempts {result.max_attempts}")
    return "; ".join(problems)


# ---- pgqueuer -----------------------------------------------------------------------------------



@dataclass
class PgqDrain:
    rate: float
    span: float
    done: int
    peak: int


async def _pgqueuer(
    url: str, jobs: int, sleep: float, concurrency_limit: int, dequeuers: int, batch: int,
    sync: bool = False,
) -> PgqDrain:
    import asyncpg  # type: ignore[import-untyped]
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
        await queries.enqueue(["work"] * n, [None] * n, [0] * n)
    await admin.execute("VACUUM ANALYZE")
    await admin.execute("CHECKPOINT")

    first: list[float] = []
    done = 0
    running = 0
    peak = 0

    async def run_one() -> None:
        conn = await asyncpg.connect(**params)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint("work", concurrency_limit=concurrency_limit)
        async def handler(job: Job) -> None:
            nonlocal done, running, peak
            if not first:
                first.append(time.perf_counter())
            running += 1
            peak = max(peak, running)
            if sync:
                # pgqueuer 1.6 takes async entrypoints only; its documented way to run a sync
                # function is a thread.
                await asyncio.to_thread(_sync_handler, sleep)
            elif sleep:
                await asyncio.sleep(sleep)
            running -= 1
            done += 1

        await qm.run(batch_size=batch, mode=QueueExecutionMode.drain)
        await conn.close()

    await asyncio.gather(*(run_one() for _ in range(dequeuers)))
    end = time.perf_counter()
    await admin.close()
    span = end - first[0]
    return PgqDrain(rate=done / span, span=span, done=done, peak=peak)


def _sync_handler(seconds: float) -> None:
    if seconds:
        time.sleep(seconds)


def pgqueuer(
    run: Run, jobs: int, sleep: float = 0.0, concurrency_limit: int = 0, dequeuers: int = 5,
    batch: int = 10, sync: bool = False,
) -> PgqDrain | None:
    """Best of `run.repeat` pgqueuer drains: `dequeuers` QueueManagers in this process (5 unless
    told), batch 10; None if not installed."""
    if importlib.util.find_spec("pgqueuer") is None:
        return None
    best: PgqDrain | None = None
    for _ in range(run.repeat):
        run.gate.wait()
        result = asyncio.run(_pgqueuer(run.url, jobs, sleep, concurrency_limit, dequeuers, batch,
                                       sync))
        if best is None or result.rate > best.rate:
            best = result
    return best


def pgq_drain(run: Run) -> PgqDrain | None:
    """pgqueuer's no-op drain, measured once and shared by cases 1-3."""
    result: PgqDrain | None = run.once("pgq-drain", lambda: pgqueuer(run, run.sizes.noop))
    return result


# ---- figures to cells ---------------------------------------------------------------------------


def ratio(a: float, b: float | None) -> float:
    return a / b if b else math.nan


def times(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def flags(slots: int, concurrency: int) -> list[str]:
    return ["--slots", str(slots), "--concurrency", str(concurrency)]


# ---- the cases ----------------------------------------------------------------------------------


def noop_ungoverned(run: Run, kind: str) -> Drain:
    """The ungoverned no-op drain at -s 2 -c 32 (cases 1 and 3, and case 4's baseline)."""
    task = fa.NOOP_ASYNC if kind == "async" else fa.NOOP_SYNC
    result: Drain = run.once(
        f"ungoverned-{kind}",
        lambda: drain(run, task=task, queue=f"fleet-noop-{kind}", jobs=run.sizes.noop,
                      flags=flags(2, 32)),
    )
    return result


def default_flags(run: Run, kind: str) -> Drain:
    """The ungoverned no-op drain at the worker's default flags (case 2, and case 9's rows)."""
    task = fa.NOOP_ASYNC if kind == "async" else fa.NOOP_SYNC
    result: Drain = run.once(
        f"default-{kind}",
        lambda: drain(run, task=task, queue=f"fleet-default-flags-{kind}",
                      jobs=run.sizes.default_sync, flags=None),
    )
    return result


def pgq_cell(result: PgqDrain | None) -> str:
    return c.rate(result.rate) if result is not None else "not installed"


def case_1(run: Run) -> None:
    result = noop_ungoverned(run, "async")
    pgq = pgq_drain(run)
    value = ratio(result.rate, pgq.rate if pgq else None)
    run.add(Row(
        "1 async no-op, ungoverned, -s 2 -c 32", c.rate(result.rate), pgq_cell(pgq),
        f"{times(value)} pgqueuer", "(c) >= 4x pgqueuer", met(None if pgq is None else value >= 4),
    ))
    note = incomplete(result)
    if note:
        run.notes.append(f"case 1: {note}")


def case_2(run: Run) -> None:
    result = default_flags(run, "sync")
    pgq = pgq_drain(run)
    value = ratio(result.rate, pgq.rate if pgq else None)
    run.add(Row(
        f"2 sync no-op, default flags ({result.in_force})", c.rate(result.rate), pgq_cell(pgq),
        f"{times(value)} pgqueuer", "(b) >= 1x pgqueuer", met(None if pgq is None else value >= 1),
    ))
    note = incomplete(result)
    if note:
        run.notes.append(f"case 2: {note}")


def case_3(run: Run) -> None:
    result = noop_ungoverned(run, "sync")
    pgq = pgq_drain(run)
    value = ratio(result.rate, pgq.rate if pgq else None)
    run.add(Row(
        "3 sync no-op, ungoverned, -s 2 -c 32", c.rate(result.rate), pgq_cell(pgq),
        f"{times(value)} pgqueuer", "(d) >= 1x pgqueuer", met(None if pgq is None else value >= 1),
    ))
    note = incomplete(result)
    if note:
        run.notes.append(f"case 3: {note}")


def case_4(run: Run) -> None:
    policy = Policy(MAX_ACTIVE, PER_KEY)
    for kind, task in (("async", fa.NOOP_ASYNC), ("sync", fa.NOOP_SYNC)):
        label = f"4 {kind} no-op, governed {policy.describe()}, -s 2 -c 32"
        governed = drain(run, task=task, queue=f"fleet-governed-{kind}", jobs=run.sizes.noop,
                         flags=flags(2, 32), policy=policy)
        ungoverned = noop_ungoverned(run, kind)
        value = ratio(governed.rate, ungoverned.rate)
        run.add(Row(
            label, c.rate(governed.rate), "-",
            f"{times(value)} ungoverned ({c.rate(ungoverned.rate)})", "(d) >= 0.7x ungoverned",
            met(value >= 0.7), peak_cell(run, label, policy, governed),
        ))
        note = incomplete(governed)
        if note:
            run.notes.append(f"case 4 {kind}: {note}")


def case_5(run: Run) -> None:
    queue_wide = Policy(MAX_ACTIVE)
    per_key = Policy(MAX_ACTIVE, PER_KEY)
    variants = [
        ("i", "async", queue_wide, 1),
        ("ii", "sync", queue_wide, 1),
        ("iii", "async", per_key, 1),
        ("iv", "sync", per_key, 1),
        ("v", "async", queue_wide, 2),
        ("vi", "async", per_key, 2),
    ]
    for numeral, kind, policy, supervisors in variants:
        who = "one supervisor" if supervisors == 1 else f"{supervisors} supervisors"
        label = f"5({numeral}) 20 ms {kind}, {policy.describe()}, {who} -s 2 -c 64"
        result = twenty_ms(run, numeral, kind, policy, supervisors)
        pgq_text = "-"
        if numeral == "i":
            pgq = pgq_20ms(run, 5)
            pgq_text = pgq_cell(pgq)
            if pgq is not None:
                run.notes.append(
                    f"case 5(i) pgqueuer: concurrency_limit={MAX_ACTIVE}, 5 QueueManagers x "
                    f"batch 10; peak handlers running at once {pgq.peak}; "
                    f"{pgq.rate / IDEAL_20MS:.0%} of the ideal; workhorse / pgqueuer = "
                    f"{times(ratio(result.rate, pgq.rate))}"
                )
        run.add(Row(
            label, c.rate(result.rate), pgq_text,
            f"{result.rate / IDEAL_20MS:.0%} of {c.rate(IDEAL_20MS)}",
            f"(a) >= {TARGET_A:,.0f}/s", met(result.rate >= TARGET_A),
            peak_cell(run, label, policy, result),
        ))
        note = incomplete(result)
        if note:
            run.notes.append(f"case 5({numeral}): {note}")


def twenty_ms(run: Run, numeral: str, kind: str, policy: Policy | None, supervisors: int,
              slots_flags: Sequence[str] | None = None) -> Drain:
    """A 20 ms drain of case 5 (kept for case 9's rows), or one of case 9's own."""
    result: Drain = run.once(
        f"20ms-{numeral}",
        lambda: drain(
            run, task=fa.SLEEP_ASYNC if kind == "async" else fa.SLEEP_SYNC,
            queue=f"fleet-20ms-{numeral}", jobs=run.sizes.backlog,
            flags=list(slots_flags) if slots_flags is not None else flags(2, 64),
            policy=policy, args=[HANDLER_20MS], supervisors=supervisors, timed_handlers=True,
        ),
    )
    return result


def case_6(run: Run) -> None:
    policy = Policy(MAX_ACTIVE)
    label = f"6 100 ms async, {policy.describe()}, -s 2 -c 64"
    result = drain(run, task=fa.SLEEP_ASYNC, queue="fleet-100ms", jobs=run.sizes.slow,
                   flags=flags(2, 64), policy=policy, args=[HANDLER_100MS], timed_handlers=True)
    run.add(Row(
        label, c.rate(result.rate), "-",
        f"{result.rate / IDEAL_100MS:.0%} of {c.rate(IDEAL_100MS)}", "(none; ideal 640/s)",
        "-", peak_cell(run, label, policy, result),
    ))
    note = incomplete(result)
    if note:
        run.notes.append(f"case 6: {note}")


def case_7(run: Run) -> None:
    queue = "fleet-latency"
    jobs = run.sizes.latency
    with psycopg.connect(run.url, autocommit=True) as conn:
        reset(conn, queue, None)
        q = Queue(conn)
        options = EnqueueOptions(queue=queue)
        payload: dict[str, Any] = {"args": [], "kwargs": {}}
        with workers(run.url, queue, flags(2, 32), 1) as procs:
            # Warm up (connections, imports, first plans), then let the worker go idle.
            warm = [q.enqueue(fa.STARTED_AT, payload, options) for _ in range(5)]
            wait_finished(conn, warm, procs, 60.0)
            time.sleep(1.0)
            run.gate.wait()
            committed: dict[int, float] = {}
            for _ in range(jobs):
                job_id = q.enqueue(fa.STARTED_AT, payload, options)  # autocommit: committed now
                committed[job_id] = time.time()
                time.sleep(0.02)
            wait_finished(conn, list(committed), procs, 60.0)
        rows = conn.execute(
            "SELECT id, result FROM workhorse.jobs WHERE id = ANY(%s) AND status = 'succeeded'",
            (list(committed),),
        ).fetchall()
    latencies = [float(result) - committed[job_id] for job_id, result in rows]
    p50 = c.percentile(latencies, 50)
    p99 = c.percentile(latencies, 99)
    run.add(Row(
        f"7 enqueue -> start, idle worker, {jobs} jobs ~20 ms apart, -s 2 -c 32",
        f"p50 {c.ms(p50)} / p99 {c.ms(p99)} ms", "-", f"max {c.ms(max(latencies))} ms",
        "(e) p50 <= 5, p99 <= 20 ms", met(p50 <= 0.005 and p99 <= 0.020),
    ))
    if len(rows) != jobs:
        run.notes.append(f"case 7: only {len(rows)} of {jobs} succeeded")


def wait_finished(
    conn: psycopg.Connection[Any], ids: list[int], procs: list[Worker], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        left = conn.execute(
            "SELECT count(*) FROM workhorse.jobs WHERE id = ANY(%s) "
            "AND status IN ('ready', 'active', 'scheduled')",
            (ids,),
        ).fetchone()[0]  # type: ignore[index]
        if left == 0:
            return
        dead = [w for w in procs if w.process.poll() is not None]
        if dead or time.monotonic() > deadline:
            output = "\n".join(w.output()[-3000:] for w in dead or procs)
            raise SystemExit(f"latency worker stopped or stalled ({left} left):\n{output}")
        time.sleep(0.05)


COPY_COLUMNS = ("task", "queue", "ckey", "priority", "payload", "status", "max_attempts",
                "on_failure")


def case_8(run: Run) -> None:
    """enqueue_many and COPY take the same Python payloads; COPY encodes them inside its timing,
    as enqueue_many does. Interleaved, best of 3 each."""
    n = run.sizes.copy
    queue = "fleet-enqueue"
    payloads = [{"args": [i], "kwargs": {}} for i in range(n)]
    options = EnqueueOptions(queue=queue)
    jobs = [(fa.NOOP_ASYNC, payload, options) for payload in payloads]
    copy_table = sql.Identifier("public", "fleet_copy")
    copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
        copy_table, sql.SQL(", ").join(sql.Identifier(col) for col in COPY_COLUMNS)
    )
    enqueue_best = math.inf
    copy_best = math.inf
    with psycopg.connect(run.url, autocommit=True) as conn:
        (reloptions,) = conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'workhorse.jobs'::regclass"
        ).fetchone()  # type: ignore[misc]
        for _ in range(3):
            reset(conn, queue, None)
            conn.execute("VACUUM workhorse.jobs")
            c.try_checkpoint(conn)
            run.gate.wait()
            t0 = time.perf_counter()
            Queue(conn).enqueue_many(jobs)
            enqueue_best = min(enqueue_best, time.perf_counter() - t0)

            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(copy_table))
            conn.execute(
                sql.SQL("CREATE TABLE {} (LIKE workhorse.jobs INCLUDING ALL)").format(copy_table)
            )
            if reloptions:  # fillfactor and autovacuum settings, as on workhorse.jobs
                conn.execute(sql.SQL("ALTER TABLE {} SET ({})").format(
                    copy_table,
                    sql.SQL(", ").join(sql.SQL(cast(LiteralString, opt)) for opt in reloptions),
                ))
            c.try_checkpoint(conn)
            run.gate.wait()
            with psycopg.connect(run.url) as copy_conn:
                t0 = time.perf_counter()
                with copy_conn.cursor() as cur, cur.copy(copy_sql) as copy:
                    for payload in payloads:
                        copy.write_row(
                            (fa.NOOP_ASYNC, queue, "", 0, json.dumps(payload), "ready", 3, "fail")
                        )
                copy_conn.commit()
                copy_best = min(copy_best, time.perf_counter() - t0)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(copy_table))
        conn.execute("TRUNCATE workhorse.jobs")
    enqueue_rate = n / enqueue_best
    copy_rate = n / copy_best
    value = enqueue_rate / copy_rate
    run.add(Row(
        f"8 enqueue_many of {c.count(n)} jobs, one call (vs COPY)", c.rate(enqueue_rate), "-",
        f"{times(value)} COPY ({c.rate(copy_rate)})", "(f) >= 0.5x COPY", met(value >= 0.5),
    ))


def pgq_20ms(run: Run, dequeuers: int) -> PgqDrain | None:
    """pgqueuer's 20 ms drain at concurrency_limit=64 (case 5(i) and case 9 share it)."""
    result: PgqDrain | None = run.once(
        f"pgq-20ms-{dequeuers}",
        lambda: pgqueuer(run, run.sizes.backlog, HANDLER_20MS, MAX_ACTIVE, dequeuers=dequeuers),
    )
    return result


# Celery's flags in case 9. Default: what `celery worker` does when only the queue is named
# (prefork, one process per CPU, prefetch multiplier 4), or for the 20 ms jobs only the 64 places
# added (threads, since a prefork pool of 64 processes on 2 cores was slower). Tuned: for the
# no-op, two solo workers, one per core (the solo pool runs the task in the consumer, with no
# hand-off to a pool process, which is most of a no-op's cost), with a deep prefetch; for 20 ms,
# the 64 threads split over two processes, one per core, since one process's threads share a GIL.
# Both drop the start-up chatter (gossip, mingle, heartbeat).
CELERY_QUIET = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
CELERY_NOOP_TUNED = ["--pool", "solo", "--prefetch-multiplier", "256", *CELERY_QUIET]
CELERY_20MS_DEFAULT = ["--pool", "threads", "--concurrency", "64"]
CELERY_20MS_TUNED = ["--pool", "threads", "--concurrency", "32", "--prefetch-multiplier", "16",
                     *CELERY_QUIET]


def case_9(run: Run) -> None:
    """The peers beside workhorse, each at its defaults and tuned (see the module docstring)."""
    noop_n = run.sizes.peer_noop
    backlog = run.sizes.peer_backlog
    rows = run.peer_rows

    def add(case: str, system: str, config: str, jobs: int, rate: float, peak: str = "-") -> None:
        rows.append(PeerRow(case, system, config, jobs, rate, peak))
        one, five, _ = os.getloadavg()
        run.progress(f"9 {case} | {system} {config}: {c.rate(rate)} jobs/s "
                     f"(loadavg after {one:.2f} / {five:.2f})")

    def wh(case: str, config: str, result: Drain) -> None:
        peak = f"{result.handler_peak.total}" if result.handler_peak is not None else "-"
        add(case, "workhorse", config, result.jobs, result.rate, peak)

    def celery(case: str, config: str, task: str, args: Sequence[Any], jobs: int,
               workers: Sequence[Sequence[str]]) -> None:
        if run.redis_url is None:
            add(case, "Celery", f"{config}: {run.redis_note}", jobs, math.nan)
            return
        best: peers.PeerDrain | None = None
        for _ in range(run.repeat):
            run.gate.wait()
            result = peers.celery_drain(run.redis_url, task, args, jobs, workers,
                                        timeout=max(300.0, jobs / 20))
            if best is None or result.rate > best.rate:
                best = result
        assert best is not None
        add(case, "Celery", config, best.done, best.rate, str(best.peak))

    def procrastinate(case: str, config: str, jobs: int, sleep: float, sync: bool,
                      concurrency: int) -> None:
        if peers.procrastinate_version() is None:
            add(case, "procrastinate", f"{config}: not installed", jobs, math.nan)
            return
        best: peers.PeerDrain | None = None
        for _ in range(run.repeat):
            run.gate.wait()
            result = peers.procrastinate_drain(run.url, jobs, sleep, sync, concurrency)
            if best is None or result.rate > best.rate:
                best = result
        assert best is not None
        add(case, "procrastinate", config, best.done, best.rate, str(best.peak))

    def pgq(case: str, config: str, result: PgqDrain | None, jobs: int) -> None:
        if result is None:
            add(case, "pgqueuer", f"{config}: not installed", jobs, math.nan)
        else:
            add(case, "pgqueuer", config, result.done, result.rate, str(result.peak))

    sync = "sync no-op"
    wh(sync, "default flags (only --queues)", default_flags(run, "sync"))
    wh(sync, "-s 2 -c 32", noop_ungoverned(run, "sync"))
    celery(sync, "default (prefork, -c = CPUs, prefetch 4)", "bench.noop", [], noop_n, [[]])
    celery(sync, "2 workers x --pool solo, --prefetch-multiplier 256, quiet", "bench.noop",
           [], noop_n, [CELERY_NOOP_TUNED, CELERY_NOOP_TUNED])
    procrastinate(sync, "default (--concurrency 1)", noop_n, 0.0, True, 1)
    procrastinate(sync, "--concurrency 32", noop_n, 0.0, True, 32)
    pgq(sync, "default: 1 QueueManager, batch 10, sync via asyncio.to_thread",
        pgqueuer(run, noop_n, dequeuers=1, sync=True), noop_n)
    pgq(sync, "5 QueueManagers x batch 10 (bench_worker's), asyncio.to_thread",
        pgqueuer(run, noop_n, sync=True), noop_n)

    anoop = "async no-op"
    wh(anoop, "default flags (only --queues)", default_flags(run, "async"))
    wh(anoop, "-s 2 -c 32", noop_ungoverned(run, "async"))
    add(anoop, "Celery", "no async tasks in Celery 5", 0, math.nan)
    procrastinate(anoop, "default (--concurrency 1)", noop_n, 0.0, False, 1)
    procrastinate(anoop, "--concurrency 32", noop_n, 0.0, False, 32)
    pgq(anoop, "default: 1 QueueManager, batch 10", pgqueuer(run, noop_n, dequeuers=1), noop_n)
    pq = pgq_drain(run)
    pgq(anoop, "5 QueueManagers x batch 10 (bench_worker's; case 1's)", pq, run.sizes.noop)

    slow = "20 ms async, 64 places"
    wh(slow, "max_active=64, -s 2 -c 64 (case 5(i))",
       twenty_ms(run, "i", "async", Policy(MAX_ACTIVE), 1))
    wh(slow, "ungoverned, -s 2 -c 32", twenty_ms(run, "free64", "async", None, 1, flags(2, 32)))
    celery(slow, "sync task: --pool threads -c 64", "bench.sleep", [HANDLER_20MS],
           backlog, [CELERY_20MS_DEFAULT])
    celery(slow, "sync task: 2 workers x --pool threads -c 32, prefetch 16, quiet",
           "bench.sleep", [HANDLER_20MS], backlog, [CELERY_20MS_TUNED, CELERY_20MS_TUNED])
    procrastinate(slow, "--concurrency 64", backlog, HANDLER_20MS, False, 64)
    pgq(slow, "concurrency_limit=64, 1 QueueManager, batch 10", pgq_20ms(run, 1), backlog)
    pgq(slow, "concurrency_limit=64, 5 QueueManagers x batch 10", pgq_20ms(run, 5), backlog)


@dataclass(frozen=True)
class Sharing:
    """Case 10's figures from the handlers' own [start, end]: the drain's span (first start to
    last end), utilization (running time over limit x span), and each key's share of the running
    time while every key still had ready work (until the first key's last job started)."""

    jobs: int
    span: float
    utilization: float
    shares: dict[str, float]
    window: float


def sharing(conn: psycopg.Connection[Any], queue: str, limit: int) -> Sharing:
    rows = [(str(k), float(a), float(b)) for k, a, b in conn.execute(
        "SELECT ckey, (result->>0)::float8, (result->>1)::float8 FROM workhorse.jobs "
        "WHERE queue = %s AND status = 'succeeded' AND jsonb_typeof(result) = 'array'",
        (queue,),
    ).fetchall()]
    if not rows:
        return Sharing(0, math.nan, math.nan, {}, math.nan)
    first = min(a for _, a, _ in rows)
    span = max(b for _, _, b in rows) - first
    busy = sum(b - a for _, a, b in rows)
    last_start: dict[str, float] = {}
    for key, a, _ in rows:
        last_start[key] = max(last_start.get(key, a), a)
    until = min(last_start.values())
    per_key: dict[str, float] = defaultdict(float)
    for key, a, b in rows:
        per_key[key] += max(0.0, min(b, until) - max(a, first))
    total = sum(per_key.values())
    shares = {key: (per_key[key] / total if total > 0 else math.nan) for key in sorted(last_start)}
    return Sharing(len(rows), span, busy / (limit * span) if span > 0 else math.nan, shares,
                   until - first)


def case_10(run: Run) -> None:
    results: dict[str, tuple[Drain, Sharing]] = {}
    for fairness in ("key", "fifo"):
        policy = Policy(FAIR_MAX_ACTIVE, fairness=fairness, keys=FAIR_KEYS, blocks=True)
        queue = f"fleet-fair-{fairness}"
        label = (f"10 20 ms async, max_active={FAIR_MAX_ACTIVE}, {FAIR_KEYS} keys backlogged, "
                 f"fairness={fairness!r}, -s 2 -c {FAIR_MAX_ACTIVE}")
        result = drain(run, task=fa.SLEEP_ASYNC, queue=queue, jobs=run.sizes.fair,
                       flags=flags(2, FAIR_MAX_ACTIVE), policy=policy, args=[HANDLER_20MS],
                       timed_handlers=True)
        with psycopg.connect(run.url, autocommit=True) as conn:
            shared = sharing(conn, queue, FAIR_MAX_ACTIVE)
        results[fairness] = (result, shared)
        ideal = FAIR_MAX_ACTIVE / HANDLER_20MS
        shares = " ".join(f"{key} {value:.0%}" for key, value in shared.shares.items())
        run.add(Row(
            label, c.rate(result.rate), "-",
            f"utilization {shared.utilization:.0%}; {result.rate / ideal:.0%} of {c.rate(ideal)}",
            "(none; fair ~ fifo)", "-", peak_cell(run, label, policy, result),
        ))
        run.notes.append(
            f"case 10 fairness={fairness!r}: {shared.jobs:,} jobs in {shared.span:.2f} s "
            f"(handler clock); shares of the running time in the first {shared.window:.2f} s, "
            f"while every key had ready work: {shares}")
        note = incomplete(result)
        if note:
            run.notes.append(f"case 10 {fairness}: {note}")
    (fair, fair_share), (fifo, fifo_share) = results["key"], results["fifo"]
    run.notes.append(
        f"case 10: fair / FIFO throughput {times(ratio(fair.rate, fifo.rate))}, utilization "
        f"{fair_share.utilization:.0%} vs {fifo_share.utilization:.0%}")


CASES: dict[str, Callable[[Run], None]] = {
    "1": case_1, "2": case_2, "3": case_3, "4": case_4,
    "5": case_5, "6": case_6, "7": case_7, "8": case_8, "9": case_9, "10": case_10,
}


# ---- setup facts --------------------------------------------------------------------------------


def code_facts(url: str) -> dict[str, str]:
    """Which workhorse is measured: the file `import workhorse` resolves to, here and in a worker
    subprocess started as the cases start theirs, and the git commit of its tree."""
    facts: dict[str, str] = {}
    here = str(Path(workhorse.__file__).resolve())
    facts["workhorse.__file__"] = here
    probe = subprocess.run(
        [sys.executable, "-c", "import workhorse; print(workhorse.__file__)"],
        cwd=HERE, env={**os.environ, c.ENV_URL: url}, capture_output=True, text=True,
    )
    there = str(Path(probe.stdout.strip()).resolve()) if probe.returncode == 0 else "?"
    if there != here:
        facts["workhorse in the worker"] = f"{there}  <-- DIFFERENT from this process's"
    tree = Path(here).parent
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True)
    if commit.returncode == 0:
        dirty = subprocess.run(
            ["git", "-C", str(tree), "status", "--porcelain", "--", "."],
            capture_output=True, text=True,
        ).stdout.strip()
        branch = subprocess.run(["git", "-C", str(tree), "branch", "--show-current"],
                                capture_output=True, text=True).stdout.strip()
        facts["workhorse commit"] = (
            f"{commit.stdout.strip()}{' + uncommitted changes' if dirty else ''}"
            f"{f' (branch {branch})' if branch else ''}"
        )
    else:
        facts["workhorse commit"] = "not a git tree"
    if os.environ.get("PYTHONPATH"):
        facts["PYTHONPATH"] = os.environ["PYTHONPATH"]
    try:
        from importlib.metadata import version

        facts["pgqueuer"] = version("pgqueuer")
    except Exception:  # any failure means: not installed
        facts["pgqueuer"] = "not installed (pip install -e '.[bench]'): its column is empty"
    facts["celery"] = peers.celery_version() or "not installed (pip install -e '.[bench]')"
    facts["procrastinate"] = (peers.procrastinate_version()
                              or "not installed (pip install -e '.[bench]')")
    return facts


# ---- main ---------------------------------------------------------------------------------------


def parse_only(value: str | None) -> list[str]:
    if not value:
        return list(CASE_IDS)
    chosen = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in CASE_IDS]
    if unknown:
        raise SystemExit(f"--only: unknown case(s) {', '.join(unknown)}; cases are 1-10")
    return [case for case in CASE_IDS if case in chosen]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_fleet")
    parser.add_argument("--only", default=None, metavar="CASE[,CASE]",
                        help="run only these cases (1-10); default all")
    parser.add_argument("--redis-port", type=int, default=peers.REDIS_PORT,
                        help="port of the private Redis case 9 starts for Celery "
                        "(default %(default)s; never the machine's own)")
    parser.add_argument("--quick", action="store_true",
                        help="smaller drains: no-op 10k, default flags 3k, 20 ms backlog 6,400, "
                        "100 ms 1,280 (targets are stated for the full sizes)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per measurement; the best is shown (default %(default)s)")
    parser.add_argument("--quiet-wait", type=float, default=None, metavar="S",
                        help="wait up to S seconds before each measurement for the machine to be "
                        "quiet (default 3, quick 1)")
    args = parser.parse_args()
    cases = parse_only(args.only)
    sizes = QUICK if args.quick else FULL
    quiet_wait = args.quiet_wait if args.quiet_wait is not None else (1.0 if args.quick else 3.0)

    server_url, source = c.resolve_server_url(args.database_url)
    printer = c.Printer(args.format)
    printer.heading(f"fleet throughput{' (quick)' if args.quick else ''} ({c.stamp()})")
    with c.scratch_database(server_url, args.db_name, args.keep_db) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            facts = c.server_facts(conn)
        facts["server url"] = f"{c.describe_url(url)} ({source})"
        facts.update(code_facts(url))
        facts["cases"] = ", ".join(cases)
        facts["sizes"] = (
            f"no-op {c.count(sizes.noop)}, default-flags sync {c.count(sizes.default_sync)}, "
            f"20 ms backlog {sizes.backlog:,}, 100 ms {sizes.slow:,}, latency {sizes.latency}, "
            f"enqueue {c.count(sizes.copy)}; best of {args.repeat}"
        )
        printer.facts("setup", facts)
        run = Run(url=url, sizes=sizes, printer=printer, gate=c.QuietGate(quiet_wait),
                  repeat=max(1, args.repeat))
        with contextlib.ExitStack() as stack:
            if "9" in cases:
                run.redis_url, run.redis_note = stack.enter_context(
                    peers.redis_server(args.redis_port))
                printer.line(f"case 9's broker: {run.redis_note}")
            for case in cases:
                CASES[case](run)
        table = c.Table(
            "fleet throughput: workhorse beside pgqueuer 1.6",
            ["case", "workhorse jobs/s", "pgqueuer jobs/s", "ratio / utilization", "target",
             "met", "peak active (DB sample / handlers) vs limit"],
        )
        for row in run.rows:
            table.add(row.case, row.workhorse, row.pgqueuer, row.ratio, row.target, row.met,
                      row.peak)
        table.notes.extend(run.notes)
        table.notes.append(run.gate.summary())
        with psycopg.connect(url, autocommit=True) as conn:
            table.notes.append(f"machine load at the end: {c.machine_load(conn)}")
        table.notes.append(f"total time {time.monotonic() - run.started:.0f} s")
        if run.violations:
            table.notes.extend(run.violations)
        else:
            table.notes.append("budget: no sampled or handler-recorded overlap exceeded its limit")
        printer.table(table)
        if run.peer_rows:
            printer.table(peer_table(run))


def peer_table(run: Run) -> c.Table:
    """Case 9: one row per system and configuration, each case against workhorse's best row."""
    table = c.Table(
        "case 9: the peers side by side (each at its defaults and tuned)",
        ["case", "system", "configuration", "jobs", "jobs/s", "workhorse's best / this",
         "handlers at once (peak)"],
    )
    best: dict[str, float] = {}
    for row in run.peer_rows:
        if row.system == "workhorse" and not math.isnan(row.rate):
            best[row.case] = max(best.get(row.case, 0.0), row.rate)
    for row in run.peer_rows:
        versus = "-"
        if row.system != "workhorse" and row.case in best and not math.isnan(row.rate):
            versus = times(best[row.case] / row.rate)
        table.add(row.case, row.system, row.config, f"{row.jobs:,}" if row.jobs else "-",
                  c.rate(row.rate), versus, row.peak)
    if run.redis_note:
        table.notes.append(f"Celery's broker: {run.redis_note}; no result backend")
    table.notes.append(
        "workhorse's no-op rows drain their own backlog sizes (cases 1-3); each peer drains "
        f"{c.count(run.sizes.peer_noop)} no-op jobs and {run.sizes.peer_backlog:,} 20 ms jobs, "
        "except pgqueuer's tuned async no-op (case 1's drain) and its 20 ms rows (case 5(i)'s "
        "backlog)")
    return table


if __name__ == "__main__":
    main()
