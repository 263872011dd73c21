"""Claim benchmarks: claim+complete throughput, claim latency against queue shape, rate limits
(what counting starts costs the product's claim), fair share, named budgets, and drift.

    .venv/bin/python benchmarks/bench_claim.py [--database-url URL] [--quick]
                                               [--only throughput|latency|rate|drift|fair|budget]

1. Throughput. No-op jobs, `Queue.claim(queue, 32, lease)` then `Queue.complete_many(...)` in a
   loop, 4 connections in 4 OS processes (multiprocessing, spawn). Each repeat truncates and
   prefills the queue (INSERT ... SELECT generate_series, status 'ready'), installs the policy after
   the prefill (sync rebuilds the key heads), VACUUM ANALYZEs, then counts the jobs completed in a
   fixed window after a warm-up. Three queue shapes:
     ungoverned                no policy (fast path)
     governed, interleaved     max_active=64, max_active_per_key=4, 100 keys: k(i % 100)
     governed, runs of 1,000   same policy, keys in runs: k((i / 1000) % 100)
   An empty claim (no room under the limit) is retried at once and counted.

2. Latency. A single claimer on an autocommit connection; each claim is timed client-side (the
   round trip the product pays), its batch is completed, and as many jobs of the same keys are
   enqueued at the tail (Queue.enqueue_many, untimed) so the queue keeps its shape while it is
   measured. Batch 1 and 32; p50/p99 per round, median of the rounds. The sizes of a group are
   queues in one table, measured interleaved round by round. Groups:
     depth       N ready keyless jobs; ungoverned, and governed with max_active=64 only
     backlog     max_active_per_key=1; key 'hot' has 1 active job and B ready jobs ahead (lower ids)
                 of the first admissible job; 10,000 admissible jobs of 100 other keys behind
     keys        max_active_per_key=4; 100,000 ready jobs spread over K keys
   Besides time, each measurement records the shared buffers a claim touches (auto_explain,
   nested statements included): work that outside load on the machine cannot skew. For the
   largest backlog and depth queues one claim per batch size runs under auto_explain (ANALYZE,
   BUFFERS, nested statements) and the plans are written to benchmarks/plans/.

3. Rate limits (`--only rate`). The latency measurement above, with each case measured two
   ways, interleaved and in rotated order, on the same queues: the product's claim (Queue.claim)
   under a policy without rate limits, and under that policy plus rate limits. Median of 3
   rounds. Cases:
     a   max_active=64, per-key 4, 100 keys; + rate_limit=1000000/s, per key 100000/s, which
         never bind: what counting starts costs
     b   key 'hot' with B ready jobs (10k, and 1M; 100k in quick mode) ahead of a stream of 10,000
         jobs of fresh keys (each claimed job is replaced by one of a new key); hot is blocked
         by per-key 1 and an active job, or by rate_limit_per_key=5/h with its 5 starts made
     c   100k keys with one ready job each, per-key 4; + rate_limit_per_key=10/m (not binding)
     d   N keys (--ahead, default 10/100/1k) blocked ahead of case b's stream, each with an
         active job and 2 ready: saturated by per-key 1, or by rate_limit_per_key=1/h used up
   The plans of both ways in case b at batch 32 on the largest queue go to benchmarks/plans/.

5. Fair share (`--only fair`). The claim of a fairness="key" queue beside the FIFO claim (a
   queue with max_active only, the row walk), at 10, 1,000 and 10,000 keys with a backlog of
   50,000 ready jobs (20,000 in quick mode) spread over the keys, weights 1-3. Each queue has
   max_active=64 with 63 places held by long-leased active jobs of as many keys, so every claim
   is the steady state's: one freed place, batch 1, completed at once and replaced by a job of
   the same key at the tail. p50/p99 of the claim's round trip per round, median of the rounds.

4. Drift. The same claimer on a fast-path queue and a per-key queue, measured at checkpoints of
   claims since the last VACUUM, then after a VACUUM: what the dead rows that claims and
   enqueues leave behind cost until vacuum removes them.

6. Budgets (`--only budget`). The latency measurement above (Queue.claim timed, the batch
   completed, as many jobs enqueued at the tail untimed, naming the queue's budget if it has
   one) on 2 and on 8 queues that share one budget, each queue with its own backlog of 5,000
   ready keyless jobs (20,000 in full mode); the claimer rotates through a case's queues, one
   claim each. Four variants, each its own set of queues in one table, interleaved round by
   round in rotated order, batch 1 and 32:
     unbudgeted          no policy, no budget (the ungoverned fast path)
     unbudgeted+policy   each queue a policy max_active=64 (the governed path without budgets)
     budgeted            every job names one declared budget max_active=64, no policy
     budgeted, full      the same, with 63 of the 64 units held by active jobs (a lease of a
                         day) of one more queue of the budget that is never claimed from, so
                         each claim takes the one place its predecessor freed (batch 1's steady
                         state; batch 32 takes 1 too, and marks the queue as wanting the
                         budget): the cost of the turn bookkeeping. Checked every round: 63
                         units held, one job per claim, else the run stops.
   p50/p99 and buffers/claim per case, and 8 queues against 2: whether the claim's cost grows
   with the number of queues that share a budget.

Full mode: depth 1k/100k/1M, backlog 10/10k/1M, keys 10/1k/100k, 5 rounds of 200 claims, drift to
4,000 claims. `--quick` caps sizes at 100k and shortens windows, rounds and drift, for a run of a
few minutes (benchmarks/README.md has the run times seen). Before each measurement the run waits
(up to --quiet-wait s) for the machine to be idle, and reports how often it was not.
"""

from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing as mp
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

PLANS_DIR = Path(__file__).resolve().parent / "plans"
TASK = "bench.noop"
NAMESPACE = "bench"
LEASE = 300.0
BATCH = 32
WORKERS = 4
TP_QUEUE = "tp"
LAT_QUEUE = "lat"


# ---- setup helpers ----


def reset(conn: psycopg.Connection[Any]) -> None:
    """An empty schema: no jobs, no policies or budgets, no heads or hints, no start buckets or
    controls, no queue levels."""
    conn.execute(
        "TRUNCATE workhorse.jobs, workhorse.key_heads, workhorse.key_hints, workhorse.policies, "
        "workhorse.rate_starts, workhorse.queue_controls, workhorse.burst_starts, "
        "workhorse.budgets, workhorse.budget_controls, workhorse.budget_queues, "
        "workhorse.budget_starts, workhorse.queue_levels"
    )


def prefill(
    conn: psycopg.Connection[Any],
    queue: str,
    n: int,
    ckey: str = "''",
    status: str = "'ready'",
    budget: str | None = None,
) -> None:
    """n jobs in one INSERT ... SELECT; `ckey`/`status` are SQL expressions over g.i (1-based);
    `budget` is the budget every job names (a value, not SQL). The rows alone do not make the
    queue budgeted: an enqueue through the product does (see bench_budget)."""
    if n <= 0:
        return
    conn.execute(
        sql.SQL(
            """
            INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, run_at,
                                        attempts, lease_until, fence, started_at, budget)
            SELECT %(task)s, %(queue)s, s.ckey, '{{"args": [], "kwargs": {{}}}}'::jsonb, s.status,
                   now() - interval '1 minute',
                   CASE WHEN s.status = 'active' THEN 1 ELSE 0 END,
                   CASE WHEN s.status = 'active' THEN now() + interval '1 day' END,
                   CASE WHEN s.status = 'active' THEN nextval('workhorse.fence_seq') END,
                   CASE WHEN s.status = 'active' THEN now() END,
                   %(budget)s::text
            FROM (SELECT g.i, {ckey} AS ckey, {status} AS status
                  FROM generate_series(1, %(n)s) AS g(i)) AS s
            ORDER BY s.i
            """
        ).format(ckey=sql.SQL(ckey), status=sql.SQL(status)),
        {"task": TASK, "queue": queue, "n": n, "budget": budget},
    )


def set_policy(
    conn: psycopg.Connection[Any], queue: str, max_active: int | None, per_key: int | None
) -> None:
    """Install (through the product's sync, which rebuilds heads) or remove the queue's policy."""
    from workhorse import ConcurrencyPolicyDefinition, Queue

    definitions = []
    if max_active is not None or per_key is not None:
        definitions.append(ConcurrencyPolicyDefinition(queue, max_active, per_key))
    Queue(conn).sync_concurrency_policies(NAMESPACE, definitions, prune=True)


def settle(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "VACUUM ANALYZE workhorse.jobs, workhorse.key_heads, workhorse.key_hints, "
        "workhorse.rate_starts"
    )
    c.try_checkpoint(conn)


# ---- 1. throughput ----


@dataclass(frozen=True)
class TpShape:
    label: str
    ckey: str
    max_active: int | None
    per_key: int | None


TP_SHAPES = [
    TpShape("ungoverned", "'k' || mod(g.i, 100)", None, None),
    TpShape("governed, keys interleaved", "'k' || mod(g.i, 100)", 64, 4),
    TpShape("governed, keys in runs of 1,000", "'k' || mod((g.i - 1) / 1000, 100)", 64, 4),
]


def _tp_worker(
    url: str, queue: str, start_at: Any, end_at: Any, warmup: float, ready: Any, results: Any
) -> None:
    from workhorse.queue import Queue

    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        conn.execute("SELECT 1")
        ready.wait()
        while start_at.value == 0.0:
            time.sleep(0.001)
        t_from = start_at.value + warmup
        t_end = end_at.value
        while time.monotonic() < start_at.value:
            time.sleep(0.0005)
        done = claims = empty = 0
        claim_s = complete_s = 0.0
        while True:
            t0 = time.monotonic()
            if t0 >= t_end:
                break
            jobs = q.claim(queue, BATCH, LEASE)
            t1 = time.monotonic()
            accepted: set[int] = set()
            if jobs:
                accepted = q.complete_many([(j.id, j.fence, None) for j in jobs])
            t2 = time.monotonic()
            if t0 >= t_from and t2 <= t_end:
                claims += 1
                done += len(accepted)
                empty += not jobs
                claim_s += t1 - t0
                complete_s += t2 - t1
        results.put((done, claims, empty, claim_s, complete_s))


@dataclass
class TpRun:
    jobs_per_s: float
    claims_per_s: float
    jobs_per_claim: float
    empty_pct: float
    claim_ms: float
    complete_ms: float
    drained: bool


def run_throughput_once(url: str, queue: str, window: float, warmup: float) -> TpRun:
    ctx = mp.get_context("spawn")
    start_at = ctx.Value("d", 0.0)
    end_at = ctx.Value("d", 0.0)
    ready = ctx.Barrier(WORKERS + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_tp_worker, args=(url, queue, start_at, end_at, warmup, ready, results))
        for _ in range(WORKERS)
    ]
    for p in procs:
        p.start()
    ready.wait()
    now = time.monotonic()
    end_at.value = now + 0.2 + warmup + window
    start_at.value = now + 0.2
    outcomes = [results.get(timeout=warmup + window + 120) for _ in procs]
    for p in procs:
        p.join()
    done = sum(o[0] for o in outcomes)
    claims = sum(o[1] for o in outcomes)
    empty = sum(o[2] for o in outcomes)
    with psycopg.connect(url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM workhorse.jobs WHERE queue = %s AND status = 'ready'", (queue,)
        ).fetchone()[0]  # type: ignore[index]
    return TpRun(
        jobs_per_s=done / window,
        claims_per_s=claims / window,
        jobs_per_claim=done / max(claims - empty, 1),
        empty_pct=100.0 * empty / max(claims, 1),
        claim_ms=1000 * sum(o[3] for o in outcomes) / max(claims, 1),
        complete_ms=1000 * sum(o[4] for o in outcomes) / max(claims - empty, 1),
        drained=left == 0,
    )


def bench_throughput(
    url: str,
    gate: c.QuietGate,
    out: c.Printer,
    *,
    prefill_n: int,
    window: float,
    warmup: float,
    repeats: int,
) -> None:
    out.heading(
        f"Claim+complete throughput: {WORKERS} processes, batch {BATCH}, no-op, "
        f"{prefill_n:,} jobs prefilled, {window:g} s window after {warmup:g} s warm-up, "
        f"median of {repeats}"
    )
    runs: dict[str, list[TpRun]] = {s.label: [] for s in TP_SHAPES}
    with psycopg.connect(url, autocommit=True) as conn:
        for repeat in range(repeats):
            for shape in TP_SHAPES:
                reset(conn)
                prefill(conn, TP_QUEUE, prefill_n, ckey=shape.ckey)
                set_policy(conn, TP_QUEUE, shape.max_active, shape.per_key)
                settle(conn)
                busy = gate.wait()
                run = run_throughput_once(url, TP_QUEUE, window, warmup)
                runs[shape.label].append(run)
                out.line(
                    f"  repeat {repeat + 1}/{repeats}  {shape.label:<32}"
                    f" {run.jobs_per_s:>9,.0f} jobs/s"
                    f"  ({run.claims_per_s:,.0f} claims/s, {run.empty_pct:.0f}% empty)"
                    + f"  [machine {busy:.0%} busy before]"
                    + ("  DRAINED: prefill too small" if run.drained else "")
                )
        reset(conn)

    def med(label: str, attr: str) -> float:
        return c.median([getattr(r, attr) for r in runs[label]])

    base = med(TP_SHAPES[0].label, "jobs_per_s")
    table = c.Table(
        f"Claim+complete, no-op, {WORKERS} connections in {WORKERS} processes, batch {BATCH}, "
        f"jobs/s (median of {repeats})",
        [
            "queue",
            "jobs/s",
            "vs ungoverned",
            "claims/s",
            "jobs/claim",
            "empty claims",
            "claim ms (mean)",
            "complete ms (mean)",
        ],
    )
    for shape in TP_SHAPES:
        jps = med(shape.label, "jobs_per_s")
        drained = any(r.drained for r in runs[shape.label])
        table.add(
            shape.label + (" (drained!)" if drained else ""),
            c.rate(jps),
            f"{jps / base:.2f}",
            c.rate(med(shape.label, "claims_per_s")),
            f"{med(shape.label, 'jobs_per_claim'):.1f}",
            f"{med(shape.label, 'empty_pct'):.0f}%",
            f"{med(shape.label, 'claim_ms'):.2f}",
            f"{med(shape.label, 'complete_ms'):.2f}",
        )
    table.notes.append(
        "Governed: max_active=64, max_active_per_key=4, 100 keys. jobs/claim counts non-empty "
        "claims only; an empty claim (no room) is retried at once."
    )
    out.table(table)


# ---- 2. latency ----


@dataclass(frozen=True)
class Variant:
    label: str
    slug: str
    max_active: int | None
    per_key: int | None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    plans: bool = True

    @property
    def governed(self) -> bool:
        return any(
            x is not None
            for x in (self.max_active, self.per_key, self.rate_limit, self.rate_limit_per_key)
        )


@dataclass
class Group:
    """Queue shapes compared for flatness: one queue per size, all prefilled in one table and
    measured interleaved (round by round, sizes rotated), so a burst of outside load lands on
    every size alike. With several variants, the policy is re-synced before each measurement."""

    sizes: list[int]
    size_label: Callable[[int], str]
    variants: list[Variant]
    build: Callable[[psycopg.Connection[Any], str, int], None]
    plan_size: int | None = None
    plan_batches: tuple[int, ...] = (1, BATCH)
    # The key of the job that replaces a claimed one (default: the same key).
    rekey: Callable[[str | None], str | None] | None = None
    # Run once after the build, before the first policy is installed for measuring.
    after_build: Callable[[psycopg.Connection[Any], Group, Claimer], None] | None = None
    title: str = ""

    def queue(self, size: int) -> str:
        return f"{self.variants[0].slug.split('_')[0]}-{size}"


@dataclass
class LatResult:
    variant: Variant
    size_label: str
    size: int
    batch: int
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    complete_p50: list[float] = field(default_factory=list)
    buffers: list[int] = field(default_factory=list)
    jobs: int = 0
    claims: int = 0


OTHER_KEYS = 100
OTHER_JOBS = 10_000
KEYS_TOTAL = 100_000


def build_depth(conn: psycopg.Connection[Any], queue: str, n: int) -> None:
    prefill(conn, queue, n)


def build_backlog(conn: psycopg.Connection[Any], queue: str, b: int) -> None:
    # Key 'hot' first (lowest ids): one active job (lease 1 day), so per-key 1 saturates it, and
    # b ready jobs behind it; then the admissible work, 10,000 jobs over 100 other keys.
    prefill(
        conn, queue, b + 1, ckey="'hot'", status="CASE WHEN g.i = 1 THEN 'active' ELSE 'ready' END"
    )
    prefill(conn, queue, OTHER_JOBS, ckey=f"'k' || mod(g.i, {OTHER_KEYS})")


def build_keys(conn: psycopg.Connection[Any], queue: str, k: int) -> None:
    prefill(conn, queue, KEYS_TOTAL, ckey=f"'k' || mod(g.i, {k})")


def latency_groups(quick: bool) -> list[Group]:
    big = 100_000 if quick else 1_000_000
    return [
        Group(
            [1_000, 10_000, big] if quick else [1_000, 100_000, big],
            lambda n: f"{c.count(n)} ready",
            [
                Variant("depth, ungoverned", "depth_ungoverned", None, None),
                Variant("depth, governed (max_active=64)", "depth_governed", 64, None),
            ],
            build_depth,
            plan_size=big,
        ),
        Group(
            [10, 10_000, big],
            lambda b: f"{c.count(b)} ahead",
            [Variant("backlog of one saturated key (per-key 1)", "backlog", None, 1)],
            build_backlog,
            plan_size=big,
        ),
        Group(
            [10, 1_000, 100_000],
            lambda k: f"{c.count(k)} keys",
            [
                Variant(
                    f"distinct keys with ready work (per-key 4, {c.count(KEYS_TOTAL)} jobs)",
                    "keys",
                    None,
                    4,
                )
            ],
            build_keys,
        ),
    ]


_BUFFERS = re.compile(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?")


def claim_function() -> str:
    """The SQL function that Queue.claim's statement (sql/statements/claim.sql, the claim
    with no successes to record) calls, read from the statement itself, so that no version is
    spelled here."""
    path = ("sql", "statements", "claim.sql")
    text = resources.files("workhorse").joinpath(*path).read_text()
    body = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    found = re.search(r"workhorse\.(\w+)\(", body)
    if found is None:
        sys.exit(f"benchmarks: {'/'.join(path)} calls no workhorse function")
    return found.group(1)


# The top-level claim statement in an auto_explain NOTICE.
_CLAIM_CALL = re.compile(rf"workhorse\.{re.escape(claim_function())}\(")


class Claimer:
    """The single claimer: claim (timed), complete (timed), and top the queue back up (untimed)
    with as many jobs of the same keys, at the tail, so the queue keeps its shape."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        from workhorse import EnqueueOptions, Queue

        self.conn = conn
        self.q = Queue(conn)
        self._options: dict[tuple[str, str | None], Any] = {}
        self._opt = EnqueueOptions
        self._explain_ready: bool | None = False
        self._notices: list[str] = []

    def claim(self, queue: str, batch: int) -> list[Any]:
        return self.q.claim(queue, batch, LEASE)

    def top_up(
        self,
        queue: str,
        jobs: list[Any],
        rekey: Callable[[str | None], str | None] | None = None,
    ) -> None:
        batch: list[tuple[str, Any, Any]] = []
        for j in jobs:
            if rekey is not None:
                new_key = rekey(j.concurrency_key)
                if new_key != j.concurrency_key:  # a fresh key: not worth caching its options
                    opt = self._opt(queue=queue, concurrency_key=new_key)
                    batch.append((TASK, {"args": [], "kwargs": {}}, opt))
                    continue
            key = (queue, j.concurrency_key)
            opt = self._options.get(key)
            if opt is None:
                opt = self._options[key] = self._opt(queue=queue, concurrency_key=key[1])
            batch.append((TASK, {"args": [], "kwargs": {}}, opt))
        if batch:
            self.q.enqueue_many(batch)

    def buffers(
        self,
        queue: str,
        batch: int,
        n: int,
        rekey: Callable[[str | None], str | None] | None = None,
    ) -> list[int]:
        """Shared buffers (hit + read) touched by each of n claims, nested statements included:
        work per claim that, unlike time, other load on the machine cannot skew. Read from
        auto_explain's top-level plan (no timing), one NOTICE per claim."""
        if not self._explain_ready:
            try:
                self.conn.execute("LOAD 'auto_explain'")
            except psycopg.Error:
                self._explain_ready = None
                return []
            for setting, value in (
                ("auto_explain.log_analyze", "on"),
                ("auto_explain.log_buffers", "on"),
                ("auto_explain.log_timing", "off"),
                ("auto_explain.log_nested_statements", "off"),
                ("auto_explain.log_level", "notice"),
                ("auto_explain.log_min_duration", "-1"),
            ):
                self.conn.execute(
                    sql.SQL("SET {} = {}").format(
                        sql.Identifier(*setting.split(".")), sql.Literal(value)
                    )
                )
            self.conn.add_notice_handler(lambda d: self._notices.append(d.message_primary or ""))
            self._explain_ready = True
        if self._explain_ready is None:
            return []
        found = []
        for _ in range(n):
            self.conn.execute("SET auto_explain.log_min_duration = 0")
            self._notices.clear()
            jobs = self.claim(queue, batch)
            self.conn.execute("SET auto_explain.log_min_duration = -1")
            for notice in self._notices:
                if _CLAIM_CALL.search(notice):
                    m = _BUFFERS.search(notice)
                    if m:
                        found.append(sum(int(x or 0) for x in m.groups()))
                    break
            self.q.complete_many([(j.id, j.fence, None) for j in jobs])
            self.top_up(queue, jobs, rekey)
        return found

    def cycle(
        self,
        queue: str,
        batch: int,
        rekey: Callable[[str | None], str | None] | None = None,
    ) -> tuple[float, float, int]:
        t0 = time.perf_counter()
        jobs = self.claim(queue, batch)
        t1 = time.perf_counter()
        self.q.complete_many([(j.id, j.fence, None) for j in jobs])
        t2 = time.perf_counter()
        self.top_up(queue, jobs, rekey)
        return t1 - t0, t2 - t1, len(jobs)


def apply_policies(conn: psycopg.Connection[Any], group: Group, variant: Variant) -> None:
    """Every queue of the group under `variant`'s policy (no policy when it has none)."""
    from workhorse import ConcurrencyPolicyDefinition, Queue

    definitions = []
    if variant.governed:
        definitions = [
            ConcurrencyPolicyDefinition(
                group.queue(size),
                variant.max_active,
                variant.per_key,
                rate_limit=variant.rate_limit,
                rate_limit_per_key=variant.rate_limit_per_key,
            )
            for size in group.sizes
        ]
    Queue(conn).sync_concurrency_policies(NAMESPACE, definitions, prune=True)


def measure_group(
    url: str,
    out: c.Printer,
    gate: c.QuietGate,
    group: Group,
    *,
    rounds: int,
    claims: int,
    warm: int,
) -> list[LatResult]:
    batches = (1, BATCH)
    results = {
        (v.slug, size, b): LatResult(v, group.size_label(size), size, b)
        for v in group.variants
        for size in group.sizes
        for b in batches
    }
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        reset(conn)
        for size in group.sizes:
            group.build(conn, group.queue(size), size)
        claimer = Claimer(conn)
        if group.after_build is not None:
            group.after_build(conn, group, claimer)
        # Policies after the prefill: a per-key install rebuilds the heads from the ready jobs.
        apply_policies(conn, group, group.variants[0])
        settle(conn)
        out.line(
            f"  {group.variants[0].slug.split('_')[0]}: "
            f"{', '.join(group.size_label(s) for s in group.sizes)} built in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        current = group.variants[0]
        for r in range(rounds):
            busiest = 0.0
            sizes = group.sizes[r % len(group.sizes) :] + group.sizes[: r % len(group.sizes)]
            variants = group.variants
            if group.title:  # side-by-side variants: rotate their order too, round by round
                k = r % len(variants)
                variants = variants[k:] + variants[:k]
            for size in sizes:
                for variant in variants:
                    if variant is not current:
                        apply_policies(conn, group, variant)
                        current = variant
                    busiest = max(busiest, gate.wait())
                    for b in batches:
                        res = results[(variant.slug, size, b)]
                        lat, comp = [], []
                        for i in range(warm + claims):
                            claim_s, complete_s, n = claimer.cycle(
                                group.queue(size), b, group.rekey
                            )
                            if i >= warm:
                                lat.append(claim_s)
                                comp.append(complete_s)
                                res.jobs += n
                                res.claims += 1
                        res.buffers.extend(
                            claimer.buffers(group.queue(size), b, 5, group.rekey)
                        )
                        res.p50.append(c.percentile(lat, 50))
                        res.p99.append(c.percentile(lat, 99))
                        res.complete_p50.append(c.percentile(comp, 50))
            out.line(
                f"    round {r + 1}/{rounds}: "
                + "  ".join(
                    (
                        f"{res.variant.slug.split('_', 1)[1]} {c.count(res.size)} "
                        if group.title
                        else f"{res.size_label} "
                    )
                    + f"b{res.batch} {c.ms(res.p50[-1])}"
                    for res in results.values()
                    if group.title or res.variant is group.variants[0]
                )
                + f"  [machine up to {busiest:.0%} busy before]"
            )
        if group.plan_size is not None:
            for variant in group.variants:
                if not variant.plans:
                    continue
                if variant is not current:
                    apply_policies(conn, group, variant)
                    current = variant
                capture_plans(claimer, group, variant, group.plan_size, group.plan_batches)
    return list(results.values())


def capture_plans(
    claimer: Claimer, group: Group, variant: Variant, size: int, batches: tuple[int, ...]
) -> None:
    """One claim per batch size under auto_explain; plans arrive as NOTICEs on this session."""
    conn = claimer.conn
    notices: list[str] = []

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        notices.append(diag.message_primary or "")

    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        print(f"  (no plans: cannot LOAD auto_explain: {exc})")
        return
    for setting, value in (
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_buffers", "on"),
        ("auto_explain.log_timing", "on"),
        ("auto_explain.log_triggers", "on"),
        ("auto_explain.log_level", "notice"),
        ("client_min_messages", "notice"),
    ):
        conn.execute(
            sql.SQL("SET {} = {}").format(sql.Identifier(*setting.split(".")), sql.Literal(value))
        )
    conn.add_notice_handler(on_notice)
    server = conn.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
    PLANS_DIR.mkdir(exist_ok=True)
    queue = group.queue(size)
    try:
        for b in batches:
            notices.clear()
            conn.execute("SET auto_explain.log_min_duration = 0")
            t0 = time.perf_counter()
            jobs = claimer.claim(queue, b)
            elapsed = time.perf_counter() - t0
            conn.execute("SET auto_explain.log_min_duration = -1")
            captured = [n for n in notices if "auto_explain" not in n]
            claimer.q.complete_many([(j.id, j.fence, None) for j in jobs])
            claimer.top_up(queue, jobs, group.rekey)
            path = PLANS_DIR / f"claim_{variant.slug}_{c.count(size)}_batch{b}.txt"
            header = [
                f"-- workhorse claim plans: {variant.label}, {group.size_label(size)}, batch {b}",
                f"-- {server}",
                f"-- captured {c.stamp()} by benchmarks/bench_claim.py with auto_explain "
                "(log_analyze, log_buffers, log_nested_statements, log_min_duration=0)",
                f"-- claim returned {len(jobs)} jobs in {elapsed * 1000:.2f} ms "
                "(including auto_explain's own overhead)",
                "-- one block per statement executed, innermost first; the last block is the "
                "whole claim",
                "",
            ]
            path.write_text("\n".join(header) + "\n\n".join(captured) + "\n")
            shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
            print(f"  plans -> {shown}", flush=True)
    finally:
        conn.remove_notice_handler(on_notice)
        conn.execute("SET auto_explain.log_min_duration = -1")


def bench_latency(
    url: str,
    out: c.Printer,
    gate: c.QuietGate,
    groups: list[Group],
    *,
    rounds: int,
    claims: int,
    warm: int,
) -> None:
    out.heading(
        f"Claim latency: single claimer, batch 1 and {BATCH}, complete each batch, "
        f"{claims} claims per measurement after {warm} warm-up, median of {rounds} rounds"
    )
    all_results: list[LatResult] = []
    for group in groups:
        all_results.extend(
            measure_group(url, out, gate, group, rounds=rounds, claims=claims, warm=warm)
        )
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn)

    table = c.Table(
        "Claim latency, ms: client round trip of Queue.claim, commit included "
        f"(p50 and p99 per round, median of {rounds} rounds)",
        [
            "case",
            "size",
            "batch",
            "p50",
            "p99",
            "jobs/claim",
            "complete p50",
            "p50 vs smallest",
            "buffers/claim",
        ],
    )
    table.notes.append(
        "buffers/claim: shared buffers hit+read by one claim, nested statements included "
        "(auto_explain, median of 5 per round): the work done, which outside load cannot skew."
    )
    flat = c.Table(
        "Flatness across sizes (target: claim p50 within ±30%)",
        [
            "case",
            "batch",
            "p50 ms by size",
            "max/min",
            "buffers/claim by size",
            "max/min",
            "verdict",
        ],
    )
    order = sorted(
        all_results,
        key=lambda r: (
            [v.label for g in groups for v in g.variants].index(r.variant.label),
            r.batch,
            r.size,
        ),
    )
    by_case: dict[tuple[str, int], list[LatResult]] = {}
    for r in order:
        by_case.setdefault((r.variant.label, r.batch), []).append(r)
    for (label, batch), rs in by_case.items():
        p50s = [c.median(r.p50) for r in rs]
        for r, p50 in zip(rs, p50s, strict=True):
            table.add(
                label,
                r.size_label,
                batch,
                c.ms(p50),
                c.ms(c.median(r.p99)),
                f"{r.jobs / max(r.claims, 1):.1f}",
                c.ms(c.median(r.complete_p50)),
                f"{p50 / p50s[0]:.2f}",
                f"{c.median(r.buffers):.0f}" if r.buffers else "-",
            )
        spread = max(p50s) / min(p50s)
        bufs = [c.median(r.buffers) if r.buffers else math.nan for r in rs]
        buf_spread = max(bufs) / min(bufs) if all(b == b for b in bufs) else math.nan
        if spread <= 1.3:
            verdict = "flat" if not buf_spread > 1.3 else "flat (buffers differ)"
        elif buf_spread <= 1.3:
            verdict = "p50 spread > 30%, buffers flat"
        else:
            verdict = "NOT flat"
        flat.add(
            label,
            batch,
            " / ".join(c.ms(p) for p in p50s),
            f"{spread:.2f}",
            " / ".join(f"{b:.0f}" for b in bufs),
            f"{buf_spread:.2f}",
            verdict,
        )
    out.table(table)
    out.table(flat)


# ---- 3. rate limits: what counting starts costs the claim ----

RATE_OTHER_JOBS = 10_000
HOT_RATE = "5/h"
HOT_STARTS = 5
RATE_KEYS = 100_000


def build_rate_count(conn: psycopg.Connection[Any], queue: str, n: int) -> None:
    prefill(conn, queue, n, ckey=f"'k' || mod(g.i, {OTHER_KEYS})")


def build_rate_hot(conn: psycopg.Connection[Any], queue: str, b: int) -> None:
    # Key 'hot' first (lowest ids): one active job (lease 1 day), which saturates per-key 1 for the
    # concurrency-only variants, and b ready jobs behind it. Then the stream: 10,000 jobs of
    # distinct keys, each claimed job replaced by one of a key never seen (Group.rekey), so no
    # key of the stream comes near its rate limit.
    prefill(
        conn, queue, b + 1, ckey="'hot'", status="CASE WHEN g.i = 1 THEN 'active' ELSE 'ready' END"
    )
    prefill(conn, queue, RATE_OTHER_JOBS, ckey="'s' || g.i")


def build_rate_keys(conn: psycopg.Connection[Any], queue: str, k: int) -> None:
    prefill(conn, queue, k, ckey="'k' || g.i")  # k keys, one ready job each


def build_rate_ahead(conn: psycopg.Connection[Any], queue: str, n: int) -> None:
    # n keys 'x…' first (lowest ids), 3 jobs each: one active (lease 1 day), which saturates
    # per-key 1 for the concurrency-only variants, and 2 ready; then the stream, as in case b.
    prefill(
        conn,
        queue,
        3 * n,
        ckey="'x' || ((g.i - 1) / 3)",
        status="CASE WHEN mod(g.i - 1, 3) = 0 THEN 'active' ELSE 'ready' END",
    )
    prefill(conn, queue, RATE_OTHER_JOBS, ckey="'s' || g.i")


def use_up_starts(
    blocked: Callable[[str | None], bool], starts: Callable[[int], int]
) -> Callable[[psycopg.Connection[Any], Group, Claimer], None]:
    """An after_build hook: under the group's rate-limited variant, claim (and complete) until the
    keys `blocked` picks have made `starts(size)` starts in all, which uses up their rate limit
    with most of their backlog still ready; the last claim of the loop, which took none of them,
    is the check that a claim passes them by."""

    def hook(conn: psycopg.Connection[Any], group: Group, claimer: Claimer) -> None:
        variant = next(v for v in group.variants if v.rate_limit_per_key)
        apply_policies(conn, group, variant)  # the first per-key install rebuilds the heads
        settle(conn)
        for size in group.sizes:
            queue = group.queue(size)
            made = 0
            while True:
                jobs = claimer.claim(queue, BATCH)
                ours = sum(blocked(j.concurrency_key) for j in jobs)
                made += ours
                claimer.q.complete_many([(j.id, j.fence, None) for j in jobs])
                others = [j for j in jobs if not blocked(j.concurrency_key)]
                claimer.top_up(queue, others, group.rekey)
                if not ours:
                    if len(jobs) != BATCH:
                        sys.exit(f"{queue}: a claim behind the blocked keys took {len(jobs)} jobs")
                    break
            if made != starts(size):
                sys.exit(f"{queue}: the blocked keys made {made} starts, not {starts(size)}")
        settle(conn)

    return hook


def rate_groups(quick: bool, ahead: list[int]) -> list[Group]:
    big = 100_000 if quick else 1_000_000
    fresh = itertools.count(1)

    def stream_key(key: str | None) -> str | None:
        """The stream's claimed jobs are replaced by jobs of keys never seen before."""
        return f"n{next(fresh)}" if key and key[0] in "sn" else key

    return [
        Group(
            [RATE_OTHER_JOBS],
            lambda n: f"{c.count(n)} ready, {OTHER_KEYS} keys",
            [
                Variant("a, no rate limit", "ratecount_plain", 64, 4),
                Variant(
                    "a, rate limits",
                    "ratecount_rate",
                    64,
                    4,
                    rate_limit="1000000/s",
                    rate_limit_per_key="100000/s",
                ),
            ],
            build_rate_count,
            title="a. max_active=64, per-key 4, 100 keys interleaved; +rate adds rate_limit="
            "1000000/s and rate_limit_per_key=100000/s (not binding)",
        ),
        Group(
            [10_000, big],
            lambda b: f"hot: {c.count(b)} ready",
            [
                Variant("b, no rate limit", "ratehot_plain", None, 1),
                Variant(
                    "b, rate limit",
                    "ratehot_rate",
                    None,
                    None,
                    rate_limit_per_key=HOT_RATE,
                ),
            ],
            build_rate_hot,
            plan_size=big,
            plan_batches=(BATCH,),
            rekey=stream_key,
            after_build=use_up_starts(lambda k: k == "hot", lambda _: HOT_STARTS),
            title="b. key 'hot' (B ready jobs) ahead of a stream of 10k jobs of fresh keys; hot is "
            "blocked by per-key 1 and its active job (no rate limit), or by rate_limit_per_key="
            f"{HOT_RATE} used up (+rate, no concurrency limit)",
        ),
        Group(
            [RATE_KEYS],
            lambda k: f"{c.count(k)} keys, 1 ready each",
            [
                Variant("c, no rate limit", "ratekeys_plain", None, 4),
                Variant(
                    "c, rate limit",
                    "ratekeys_rate",
                    None,
                    4,
                    rate_limit_per_key="10/m",
                ),
            ],
            build_rate_keys,
            title="c. 100k keys with one ready job each (topped up with the same key): per-key 4; "
            "+rate adds rate_limit_per_key=10/m (not binding)",
        ),
        Group(
            ahead,
            lambda n: f"{c.count(n)} keys ahead",
            [
                Variant("d, no rate limit", "rateahead_plain", None, 1),
                Variant(
                    "d, rate limit",
                    "rateahead_rate",
                    None,
                    None,
                    rate_limit_per_key="1/h",
                ),
            ],
            build_rate_ahead,
            rekey=stream_key,
            after_build=use_up_starts(lambda k: bool(k) and k[0] == "x", lambda n: n),
            title="d. N blocked keys (1 active, 2 ready jobs each) ahead of the stream of case b: "
            "saturated by per-key 1 (no rate limit), or with rate_limit_per_key=1/h used up "
            "(+rate)",
        ),
    ]


def bench_rate(
    url: str,
    out: c.Printer,
    gate: c.QuietGate,
    groups: list[Group],
    *,
    rounds: int,
    claims: int,
    warm: int,
) -> None:
    """Claim latency with and without rate limits on the same queues, as in bench_latency."""
    out.heading(
        f"Rate limits: claim latency without and with rate limits; single claimer, batch 1 and "
        f"{BATCH}, {claims} claims per measurement after {warm} warm-up, median of {rounds} rounds"
    )
    results: list[LatResult] = []
    for group in groups:
        out.line(f"  {group.title}")
        results.extend(
            measure_group(url, out, gate, group, rounds=rounds, claims=claims, warm=warm)
        )
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn)

    def role(v: Variant) -> str:
        return "rate" if v.rate_limit or v.rate_limit_per_key else "plain"

    table = c.Table(
        "Claim latency with rate limits, ms: client round trip, commit included "
        f"(p50 and p99 per round, median of {rounds} rounds)",
        [
            "case",
            "queue",
            "batch",
            "p50",
            "p99",
            "+rate p50",
            "+rate p99",
            "+rate / without p50",
            "jobs/claim without / +rate",
            "buffers/claim without / +rate",
        ],
    )
    cells: dict[tuple[int, int, int, str], LatResult] = {}
    for r in results:
        gi = next(i for i, g in enumerate(groups) if r.variant in g.variants)
        cells[(gi, r.size, r.batch, role(r.variant))] = r
    for gi, group in enumerate(groups):
        for size in group.sizes:
            for b in (1, BATCH):
                row = [cells.get((gi, size, b, x)) for x in ("plain", "rate")]

                def p(res: LatResult | None, attr: str) -> float:
                    return c.median(getattr(res, attr)) if res is not None else math.nan

                plain, rated = p(row[0], "p50"), p(row[1], "p50")
                table.add(
                    group.title.split(".")[0],
                    group.size_label(size),
                    b,
                    *(c.ms(p(res, attr)) for res in row for attr in ("p50", "p99")),
                    f"{rated / plain:.2f}" if plain == plain and rated == rated else "-",
                    " / ".join(
                        f"{res.jobs / max(res.claims, 1):.1f}" if res else "-" for res in row
                    ),
                    " / ".join(
                        f"{c.median(res.buffers):.0f}" if res and res.buffers else "-"
                        for res in row
                    ),
                )
    for group in groups:
        table.notes.append(group.title)
    table.notes.append(
        "Both ways are Queue.claim, the product's claim statement; buffers/claim as in the latency "
        "table."
    )
    out.table(table)

    flat = c.Table(
        "Rate limits: claim p50 across sizes (target: within ±30%)",
        ["case", "variant", "batch", "p50 ms by size", "max/min", "buffers/claim by size"],
    )
    for gi, group in enumerate(groups):
        if len(group.sizes) < 2:
            continue
        for x in ("plain", "rate"):
            for b in (1, BATCH):
                rs = [cells.get((gi, size, b, x)) for size in group.sizes]
                if any(r is None for r in rs):
                    continue
                p50s = [c.median(r.p50) for r in rs if r is not None]
                flat.add(
                    group.title.split(".")[0],
                    {"plain": "no rate limit", "rate": "rate limits"}[x],
                    b,
                    " / ".join(c.ms(v) for v in p50s),
                    f"{max(p50s) / min(p50s):.2f}",
                    " / ".join(
                        f"{c.median(r.buffers):.0f}" if r is not None and r.buffers else "-"
                        for r in rs
                    ),
                )
    flat.notes.append(
        "sizes: "
        + "; ".join(
            f"{g.title.split('.')[0]}: " + " / ".join(g.size_label(s) for s in g.sizes)
            for g in groups
            if len(g.sizes) > 1
        )
    )
    out.table(flat)


# ---- 4. drift: cost against claims since the last VACUUM ----


def bench_drift(url: str, out: c.Printer, gate: c.QuietGate, *, checkpoints: list[int]) -> None:
    """The sizes above are measured on freshly vacuumed tables. This shows what a claim costs
    as dead rows pile up between vacuums: each claim leaves its jobs' old versions behind in the
    ready indexes, and on per-key queues each enqueue's hints and each claim's head updates leave
    dead rows in key_hints and key_heads. A single claimer, batch 32, complete and top up as
    above; at each checkpoint 40 timed claims and 5 under auto_explain; then VACUUM."""
    out.heading(
        f"Drift: claim cost against claims since the last VACUUM (batch {BATCH}, single claimer)"
    )
    groups = [
        Group(
            [100_000],
            lambda n: f"{c.count(n)} ready",
            [Variant("fast path (no policy), 100k ready", "driftfast", None, None)],
            build_depth,
        ),
        Group(
            [10_000],
            lambda b: f"{c.count(b)} ahead",
            [Variant("per-key 1, 10k saturated-key backlog", "driftkey", None, 1)],
            build_backlog,
        ),
    ]
    table = c.Table(
        "Claim cost as dead rows accumulate (autovacuum "
        + ("on" if _autovacuum_on(url) else "OFF on this server")
        + ")",
        ["queue", "claims since VACUUM", "jobs claimed", "p50 ms", "buffers/claim", "vs fresh"],
    )
    for group in groups:
        size = group.sizes[0]
        queue = group.queue(size)
        with psycopg.connect(url, autocommit=True) as conn:
            reset(conn)
            group.build(conn, queue, size)
            apply_policies(conn, group, group.variants[0])
            settle(conn)
            claimer = Claimer(conn)
            done = 0
            fresh: float | None = None
            for checkpoint in [*checkpoints, -1]:
                if checkpoint < 0:
                    conn.execute("VACUUM workhorse.jobs, workhorse.key_hints, workhorse.key_heads")
                    label = f"{done:,} + VACUUM"
                else:
                    while done < checkpoint:
                        claimer.cycle(queue, BATCH)
                        done += 1
                    label = f"{done:,}"
                claimed = done * BATCH
                gate.wait()
                lat = [claimer.cycle(queue, BATCH)[0] for _ in range(40)]
                bufs = claimer.buffers(queue, BATCH, 5)
                done += 45
                buf = c.median(bufs) if bufs else math.nan
                fresh = buf if fresh is None else fresh
                table.add(
                    group.variants[0].label,
                    label,
                    f"{claimed:,}",
                    c.ms(c.percentile(lat, 50)),
                    f"{buf:.0f}",
                    f"{buf / fresh:.2f}" if fresh else "-",
                )
                out.line(f"  {group.variants[0].label}: {label} claims -> {buf:.0f} buffers/claim")
            reset(conn)
    table.notes.append(
        "buffers/claim as in the latency table. Between vacuums every claim steps over the dead "
        "index entries at the front of the ready index; on per-key queues it also re-reads every "
        "dead key_hints row (a bitmap heap scan, which never marks them dead in the index)."
    )
    out.table(table)


def bench_fair(url: str, out: c.Printer, gate: c.QuietGate, *, backlog: int, rounds: int,
               claims: int) -> None:
    from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue

    shapes = [("fifo", 10), ("fair", 10), ("fifo", 1000), ("fair", 1000), ("fifo", 10_000),
              ("fair", 10_000)]
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn)
        q = Queue(conn)
        definitions = []
        for mode, keys in shapes:
            name = f"{mode}-{keys}"
            prefill(conn, name, 63, "'a' || g.i", "'active'")
            prefill(conn, name, backlog, f"'k' || mod(g.i, {keys})")
            conn.execute("UPDATE workhorse.jobs SET weight = 1 + id %% 3 WHERE queue = %s", (name,))
            definitions.append(ConcurrencyPolicyDefinition(
                name, 64, fairness="key" if mode == "fair" else "fifo"))
        q.sync_concurrency_policies(NAMESPACE, definitions, prune=True)
        settle(conn)
        samples: dict[str, list[tuple[float, float]]] = {f"{m}-{k}": [] for m, k in shapes}
        for _ in range(rounds):
            gate.wait()
            for mode, keys in shapes:
                name = f"{mode}-{keys}"
                times: list[float] = []
                for n in range(claims + 5):
                    t0 = time.perf_counter()
                    jobs = q.claim(name, 1, 30)
                    elapsed = time.perf_counter() - t0
                    if n >= 5:
                        times.append(elapsed * 1000)
                    for job in jobs:
                        q.complete(job.id, job.fence)
                        q.enqueue_many([(TASK, {"args": [], "kwargs": {}}, EnqueueOptions(
                            queue=name, concurrency_key=job.concurrency_key))])
                times.sort()
                samples[name].append((times[len(times) // 2], times[int(len(times) * 0.99)]))
    table = c.Table(
        f"claim latency, fair share beside FIFO (ms, batch 1, max_active=64 with 63 active, "
        f"{c.count(backlog)} ready over the keys)",
        ["queue", "keys", "p50", "p99"])
    for mode, keys in shapes:
        rows = samples[f"{mode}-{keys}"]
        p50 = statistics.median(r[0] for r in rows)
        p99 = statistics.median(r[1] for r in rows)
        table.add("fairness=key" if mode == "fair" else "FIFO (max_active only)", c.count(keys),
                  f"{p50:.2f}", f"{p99:.2f}")
    fifo10 = statistics.median(r[0] for r in samples["fifo-10"])
    fair10k = statistics.median(r[0] for r in samples["fair-10000"])
    table.notes.append(f"fair at 10,000 keys / FIFO at 10 keys, p50: {fair10k / fifo10:.2f}x "
                       "(the issue's bar: at most 2x)")
    out.table(table)


# ---- 6. budgets: what admission by a shared budget costs the claim ----

BUDGET_MAX = 64
BUDGET_HOLDERS = BUDGET_MAX - 1
BUDGET_QUEUES = (2, 8)
HOLD_LEASE = 86_400.0


@dataclass(frozen=True)
class BudgetVariant:
    label: str
    slug: str
    policy: bool  # each queue has a policy max_active=64
    budget: bool  # every job names the budget <slug><n> (max_active=64, no policy)
    full: bool = False  # 63 of the budget's 64 units held by another queue's active jobs


BUDGET_VARIANTS = [
    BudgetVariant("unbudgeted", "nobudget", policy=False, budget=False),
    BudgetVariant("unbudgeted+policy", "policy", policy=True, budget=False),
    BudgetVariant("budgeted", "budget", policy=False, budget=True),
    BudgetVariant("budgeted, full", "full", policy=False, budget=True, full=True),
]


@dataclass(frozen=True)
class BudgetCase:
    variant: BudgetVariant
    n: int  # queues sharing the budget (claimed in rotation)

    @property
    def budget(self) -> str | None:
        return f"{self.variant.slug}{self.n}" if self.variant.budget else None

    @property
    def queues(self) -> list[str]:
        return [f"{self.variant.slug}{self.n}-{i}" for i in range(self.n)]

    @property
    def holder(self) -> str:
        """The queue of the budget whose long-leased active jobs hold 63 of its 64 units: never
        claimed from, so for every claimed queue they are another queue's."""
        return f"{self.variant.slug}{self.n}-held"


class BudgetClaimer(Claimer):
    """The latency claimer, with each queue's top-up naming its queue's budget (if any)."""

    def __init__(self, conn: psycopg.Connection[Any], budget_of: dict[str, str | None]) -> None:
        super().__init__(conn)
        self.budget_of = budget_of

    def top_up(
        self,
        queue: str,
        jobs: list[Any],
        rekey: Callable[[str | None], str | None] | None = None,
    ) -> None:
        if not jobs:
            return
        opt = self._options.get((queue, None))
        if opt is None:
            opt = self._options[(queue, None)] = self._opt(
                queue=queue, budget=self.budget_of.get(queue)
            )
        self.q.enqueue_many([(TASK, {"args": [], "kwargs": {}}, opt)] * len(jobs))


def _budget_units(conn: psycopg.Connection[Any], budget: str) -> int:
    row = conn.execute(
        "SELECT COALESCE(sum(cost), 0) FROM workhorse.jobs WHERE budget = %s "
        "AND status = 'active' AND lease_until > now()",
        (budget,),
    ).fetchone()
    return int(row[0])  # type: ignore[index]


def build_budget_cases(
    conn: psycopg.Connection[Any], claimer: BudgetClaimer, cases: list[BudgetCase], backlog: int
) -> None:
    """Each case's queues with `backlog` ready keyless jobs each. A budgeted queue's first job
    is enqueued through the product (which records the (budget, queue) pair and the queue's
    level, as every enqueue naming a budget does), the rest by prefill with the same budget.
    A full budget's holder queue gets 63 jobs through the product, claimed by the product's
    claim with a lease of a day."""
    from workhorse import BudgetDefinition, ConcurrencyPolicyDefinition, EnqueueOptions, Queue

    q = Queue(conn)
    q.sync_budgets(
        NAMESPACE,
        [BudgetDefinition(bc.budget, max_active=BUDGET_MAX) for bc in cases if bc.budget],
        prune=True,
    )
    q.sync_concurrency_policies(
        NAMESPACE,
        [
            ConcurrencyPolicyDefinition(name, BUDGET_MAX, None)
            for bc in cases
            if bc.variant.policy
            for name in bc.queues
        ],
        prune=True,
    )
    payload: dict[str, Any] = {"args": [], "kwargs": {}}
    for bc in cases:
        for name in bc.queues:
            claimer.budget_of[name] = bc.budget
            first = 0
            if bc.budget:
                q.enqueue_many([(TASK, payload, EnqueueOptions(queue=name, budget=bc.budget))])
                first = 1
            prefill(conn, name, backlog - first, budget=bc.budget)
        if bc.variant.full and bc.budget:
            opt = EnqueueOptions(queue=bc.holder, budget=bc.budget)
            q.enqueue_many([(TASK, payload, opt)] * BUDGET_HOLDERS)
            held = q.claim(bc.holder, BUDGET_HOLDERS, HOLD_LEASE)
            if len(held) != BUDGET_HOLDERS:
                sys.exit(f"{bc.holder}: the claim took {len(held)} of {BUDGET_HOLDERS} jobs")
        if bc.budget:
            units = _budget_units(conn, bc.budget)
            want = BUDGET_HOLDERS if bc.variant.full else 0
            if units != want:
                sys.exit(f"budget {bc.budget}: {units} units active after the build, not {want}")
    settle(conn)
    conn.execute("VACUUM ANALYZE workhorse.budget_queues, workhorse.budget_starts")


def bench_budget(
    url: str,
    out: c.Printer,
    gate: c.QuietGate,
    *,
    backlog: int,
    rounds: int,
    claims: int,
    warm: int,
) -> None:
    """The product's claim on queues whose jobs name a budget, beside the same queues without
    one: what admission by a shared budget (its lock, its units across queues, the turns
    between its queues) costs a claim, and whether that grows with the queues sharing it."""
    batches = (1, BATCH)
    cases = [BudgetCase(v, n) for n in BUDGET_QUEUES for v in BUDGET_VARIANTS]
    out.heading(
        f"Budgets: claim latency on 2 and 8 queues sharing a budget (max_active={BUDGET_MAX}) "
        f"beside the same queues unbudgeted; single claimer rotating through the queues, batch 1 "
        f"and {BATCH}, {claims} claims per measurement after {warm} warm-up, median of "
        f"{rounds} rounds"
    )
    results = {
        (bc, b): LatResult(Variant(bc.variant.label, bc.variant.slug, None, None), "", bc.n, b)
        for bc in cases
        for b in batches
    }
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        reset(conn)
        claimer = BudgetClaimer(conn, {})
        build_budget_cases(conn, claimer, cases, backlog)
        out.line(
            f"  {len(cases)} cases, {sum(bc.n for bc in cases)} queues of {c.count(backlog)} "
            f"ready jobs built in {time.perf_counter() - t0:.1f} s"
        )
        turn = dict.fromkeys(cases, 0)
        for r in range(rounds):
            busiest = 0.0
            k = r % len(cases)
            for bc in cases[k:] + cases[:k]:
                busiest = max(busiest, gate.wait())
                names = bc.queues
                for b in batches:
                    res = results[(bc, b)]
                    lat: list[float] = []
                    comp: list[float] = []
                    for i in range(warm + claims):
                        queue = names[turn[bc] % bc.n]
                        turn[bc] += 1
                        claim_s, complete_s, got = claimer.cycle(queue, b)
                        if i >= warm:
                            lat.append(claim_s)
                            comp.append(complete_s)
                            res.jobs += got
                            res.claims += 1
                    for _ in range(5):
                        res.buffers.extend(claimer.buffers(names[turn[bc] % bc.n], b, 1))
                        turn[bc] += 1
                    res.p50.append(c.percentile(lat, 50))
                    res.p99.append(c.percentile(lat, 99))
                    res.complete_p50.append(c.percentile(comp, 50))
                if bc.variant.full and bc.budget:
                    # Each claim must have found the budget full but for the one place its
                    # predecessor freed: 63 units held throughout, one job per claim.
                    units = _budget_units(conn, bc.budget)
                    per_claim = {
                        b: results[(bc, b)].jobs / results[(bc, b)].claims for b in batches
                    }
                    if units != BUDGET_HOLDERS or any(v != 1.0 for v in per_claim.values()):
                        sys.exit(
                            f"budget {bc.budget}: {units} units active between measurements "
                            f"(want {BUDGET_HOLDERS}), jobs/claim "
                            + ", ".join(f"batch {b}: {v:.2f}" for b, v in per_claim.items())
                            + " (want 1.00): not the full budget's steady state"
                        )
            out.line(
                f"    round {r + 1}/{rounds}: "
                + "  ".join(
                    f"{bc.variant.slug}{bc.n} b{b} {c.ms(results[(bc, b)].p50[-1])}"
                    for bc in cases
                    for b in batches
                )
                + f"  [machine up to {busiest:.0%} busy before]"
            )
        reset(conn)

    def p50(bc: BudgetCase, b: int) -> float:
        return c.median(results[(bc, b)].p50)

    def bufs(bc: BudgetCase, b: int) -> float:
        found = results[(bc, b)].buffers
        return c.median(found) if found else math.nan

    def ratio(x: float, y: float, digits: int = 2) -> str:
        return f"{x / y:.{digits}f}" if x == x and y == y and y else "-"

    table = c.Table(
        "Claim latency on budgeted queues, ms: client round trip of Queue.claim, commit included "
        f"(p50 and p99 per round, median of {rounds} rounds)",
        [
            "queues",
            "variant",
            "batch",
            "p50",
            "p99",
            "p50 vs unbudgeted",
            "jobs/claim",
            "complete p50",
            "buffers/claim",
        ],
    )
    by = {(bc.variant.slug, bc.n): bc for bc in cases}
    for n in BUDGET_QUEUES:
        for b in batches:
            base = p50(by[("nobudget", n)], b)
            for v in BUDGET_VARIANTS:
                bc = by[(v.slug, n)]
                res = results[(bc, b)]
                table.add(
                    n,
                    v.label,
                    b,
                    c.ms(p50(bc, b)),
                    c.ms(c.median(res.p99)),
                    ratio(p50(bc, b), base),
                    f"{res.jobs / max(res.claims, 1):.1f}",
                    c.ms(c.median(res.complete_p50)),
                    f"{bufs(bc, b):.0f}" if bufs(bc, b) == bufs(bc, b) else "-",
                )
    table.notes.append(
        f"Each queue has {c.count(backlog)} ready keyless jobs, topped up at the tail after each "
        "claim (untimed; a budgeted queue's top-up names its budget). unbudgeted: no policy, no "
        f"budget (the fast path); +policy: each queue max_active={BUDGET_MAX}; budgeted: every "
        f"job names one budget max_active={BUDGET_MAX} shared by the queues, no policy; full: "
        f"as budgeted, with {BUDGET_HOLDERS} of the {BUDGET_MAX} units held by long-leased active "
        "jobs of one more queue of the budget that is never claimed from, so every claim takes "
        "the one place its predecessor freed (jobs/claim 1.0 at both batches, checked)."
    )
    table.notes.append(
        "buffers/claim: shared buffers hit+read by one claim, nested statements included "
        "(auto_explain, median of 5 per round), as in the latency table."
    )
    out.table(table)

    flat = c.Table(
        "Budgets: 8 queues sharing the budget against 2 (target: claim p50 within ±30%)",
        ["variant", "batch", "p50 ms 2 / 8 queues", "8 / 2", "buffers/claim 2 / 8", "8 / 2"],
    )
    worst_p50 = worst_buf = 0.0
    for v in BUDGET_VARIANTS:
        for b in batches:
            two, eight = by[(v.slug, 2)], by[(v.slug, 8)]
            flat.add(
                v.label,
                b,
                f"{c.ms(p50(two, b))} / {c.ms(p50(eight, b))}",
                ratio(p50(eight, b), p50(two, b)),
                f"{bufs(two, b):.0f} / {bufs(eight, b):.0f}",
                ratio(bufs(eight, b), bufs(two, b)),
            )
            if v.budget:
                worst_p50 = max(worst_p50, p50(eight, b) / p50(two, b))
                worst_buf = max(worst_buf, bufs(eight, b) / bufs(two, b))  # nan: no buffers
    reading = []
    for b in batches:
        pol = [p50(by[("policy", n)], b) for n in BUDGET_QUEUES]
        bud = [p50(by[("budget", n)], b) for n in BUDGET_QUEUES]
        full = [p50(by[("full", n)], b) for n in BUDGET_QUEUES]
        reading.append(
            f"batch {b}: budgeted / +policy p50 "
            + " and ".join(ratio(x, y) for x, y in zip(bud, pol, strict=True))
            + ", full / budgeted "
            + " and ".join(ratio(x, y) for x, y in zip(full, bud, strict=True))
            + " (2 and 8 queues)"
        )
    # The work done (buffers) decides when it was read, as in the latency flatness table: time
    # on a shared 2-core machine moves with outside load.
    if worst_buf == worst_buf:
        verdict = (
            "does not grow" if worst_buf <= 1.3 else "GROWS"
        ) + f" (buffers 8 / 2 queues at worst {worst_buf:.2f}, p50 {worst_p50:.2f})"
    else:
        verdict = (
            "does not grow" if worst_p50 <= 1.3 else "GROWS or is noise"
        ) + f" (p50 8 / 2 queues at worst {worst_p50:.2f}; no buffers read)"
    flat.notes.append(
        "Reading: "
        + "; ".join(reading)
        + ". The claim's cost on a budgeted queue "
        + verdict
        + " with the number of queues that share its budget."
    )
    out.table(flat)


def _autovacuum_on(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SHOW autovacuum").fetchone()[0] == "on"  # type: ignore[index]


# ---- main ----


def main(
    argv: list[str] | None = None, server_url: str | None = None, source: str = "given by caller"
) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_claim")
    parser.add_argument("--quick", action="store_true", help="sizes capped at 100k, shorter rounds")
    parser.add_argument(
        "--only", choices=("throughput", "latency", "rate", "drift", "fair", "budget"), default=None
    )
    parser.add_argument("--repeats", type=int, default=3, help="throughput repeats (%(default)s)")
    parser.add_argument(
        "--window", type=float, default=None, help="throughput window, s (default 10, quick 3)"
    )
    parser.add_argument(
        "--prefill",
        type=int,
        default=None,
        help="throughput prefill, jobs (default 200k, quick 60k)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="latency rounds (default 5, quick 3; rate cases: 3)",
    )
    parser.add_argument(
        "--claims",
        type=int,
        default=None,
        help="timed claims per measurement (one size, one batch size, one round; "
        "default 200, quick 50)",
    )
    parser.add_argument(
        "--ahead",
        default="10,100,1000",
        help="rate case d: numbers of blocked keys ahead, comma-separated (default %(default)s; "
        "a claim passes over every blocked key ahead, so large numbers make long rounds)",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=None,
        help="before each measurement wait up to this many seconds for the machine to be quiet "
        "(default 60, quick 5)",
    )
    args = parser.parse_args(argv)
    out = c.Printer(args.format)
    gate = c.QuietGate(args.quiet_wait if args.quiet_wait is not None else 5 if args.quick else 60)

    if server_url is None:
        server_url, source = c.resolve_server_url(args.database_url)
    window = args.window or (3.0 if args.quick else 10.0)
    warmup = 1.0 if args.quick else 2.0
    prefill_n = args.prefill or (60_000 if args.quick else 200_000)
    claims = args.claims or (50 if args.quick else 200)
    rounds = args.rounds or (3 if args.quick else 5)

    started = time.perf_counter()
    with c.scratch_database(server_url, args.db_name, keep=args.keep_db) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            out.heading(f"bench_claim ({'quick' if args.quick else 'full'} mode)")
            import workhorse

            facts = {
                "database": f"{c.describe_url(url)} ({source})",
                "run at": c.stamp(),
                "workhorse": str(Path(workhorse.__file__).resolve().parent),
            }
            facts.update(c.server_facts(conn))
            out.facts("environment", facts)
        if args.only in (None, "throughput"):
            bench_throughput(
                url,
                gate,
                out,
                prefill_n=prefill_n,
                window=window,
                warmup=warmup,
                repeats=args.repeats,
            )
        if args.only in (None, "latency"):
            bench_latency(
                url, out, gate, latency_groups(args.quick), rounds=rounds, claims=claims, warm=5
            )
        if args.only in (None, "rate"):
            bench_rate(
                url,
                out,
                gate,
                rate_groups(args.quick, [int(x) for x in args.ahead.split(",")]),
                rounds=args.rounds or 3,
                claims=claims,
                warm=5,
            )
        if args.only in (None, "fair"):
            bench_fair(url, out, gate, backlog=20_000 if args.quick else 50_000,
                       rounds=args.rounds or 3, claims=claims)
        if args.only in (None, "budget"):
            bench_budget(
                url,
                out,
                gate,
                backlog=5_000 if args.quick else 20_000,
                rounds=rounds,
                claims=claims,
                warm=5,
            )
        if args.only in (None, "drift"):
            bench_drift(
                url, out, gate, checkpoints=[0, 300, 600] if args.quick else [0, 1000, 2000, 4000]
            )
        with psycopg.connect(url, autocommit=True) as conn:
            out.line(f"\nafter the run: {c.machine_load(conn)}")
            out.line(gate.summary())
    out.line(f"bench_claim finished in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
