"""Budget holds (issue #41 item 3, docs/design.md "Holds"): what a hold costs, and what holds
cost the claim.

    .venv/bin/python benchmarks/bench_holds.py [--database-url URL] [--quick] [--format plain]

1. A hold on an idle budget (max_active=1000, no job and no other hold): `with
   app.budget("idle").hold(): pass`, and `async with` the same on one event loop, one after the
   other, on the App's own pools. Each hold is timed client-side: acquire (the `with` statement
   up to its block: the Holding made, the admission, its commit) and release (the block's end
   to the statement after it). p50/p99 per round, median of the rounds; the sync and async
   rounds alternate. Round trips per hold: libpq's trace of the pool's one connection over 100
   holds, counting the server's ReadyForQuery messages (one ends each round trip). CPU per hold
   (when the server runs on this host): this process's (`time.process_time()`, every thread)
   and the pooled connection's backend's (/proc/<pid>/stat), over each round.
2. The claim beside unexpired holds. Per size N (0 and 1,000; 10,000 in full mode) a budget of
   max_active=100,000 with N holds of one unit each, taken by the product (`hold(lease="2h")`,
   kept open in an ExitStack), and a queue of ready jobs naming it. The single claimer of
   bench_claim.py (`Queue.claim(queue, 1, lease)` timed, its job completed and one enqueued at
   the tail untimed) rotates through the sizes round by round; p50/p99 of the claim's round trip
   per round, median of the rounds, and the shared buffers a claim touches (auto_explain, five
   claims per round). Measured twice: with `budget_holds` as the holds left it, and after a
   VACUUM of it (CI's server runs with autovacuum off). Beside it, EXPLAIN ANALYZE of the sum
   both the claim and the hold make (`sum(units)` of the budget's unexpired holds). The time to
   take the N holds is printed too: each hold sums the budget's holds as well.

Before each measurement the run waits (up to --quiet-wait s) for the machine to be idle. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
import bench_claim as bc

IDLE = "idle"
HOLD_LEASE = 30.0
CLAIM_BUDGET_MAX = 100_000
TRACED_HOLDS = 100
_READY = re.compile(r"^B\t\d+\tReadyForQuery", re.M)


# ---- 1. a hold on an idle budget ----


def sync_round(app: Any, n: int) -> tuple[list[float], list[float]]:
    acquire, release = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        with app.budget(IDLE).hold(lease=HOLD_LEASE):
            t1 = time.perf_counter()
        t2 = time.perf_counter()
        acquire.append(t1 - t0)
        release.append(t2 - t1)
    return acquire, release


async def async_round(app: Any, n: int) -> tuple[list[float], list[float]]:
    acquire, release = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        async with app.budget(IDLE).hold(lease=HOLD_LEASE):
            t1 = time.perf_counter()
        t2 = time.perf_counter()
        acquire.append(t1 - t0)
        release.append(t2 - t1)
    return acquire, release


class Flavour:
    """One way of holding (sync or async): how to run a round, and its pooled connection."""

    def __init__(self, label: str, app: Any, runner: asyncio.Runner) -> None:
        self.label = label
        self.app = app
        self.runner = runner
        self.acquire: list[float] = []
        self.release: list[float] = []
        self.total: list[float] = []
        self.p50: list[float] = []
        self.p99: list[float] = []
        self.client_cpu: list[float] = []
        self.server_cpu: list[float] = []
        self.round_trips = float("nan")

    def run(self, n: int) -> tuple[list[float], list[float]]:
        if self.label == "sync":
            return sync_round(self.app, n)
        return self.runner.run(async_round(self.app, n))

    def backends(self) -> list[int]:
        """The backends of the pool's connections, by their application_name."""
        name = "workhorse-app" if self.label == "sync" else "workhorse-app-async"
        with c.monitor(self.app.database_url) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                                " AND datname = current_database()", (name,)).fetchall()
        return sorted(int(r[0]) for r in rows)

    def pool_size(self) -> int:
        return len(self.backends())

    def traced(self, size: int, files: list[int], on: bool) -> None:
        """Start (or stop) libpq's trace on each of the pool's `size` connections, checked out
        together (so the pool does not grow), into `files`."""
        def switch(pgconn: Any, n: int) -> None:
            if on:
                pgconn.trace(files[n])
                pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            else:
                pgconn.untrace()

        if self.label == "sync":
            with contextlib.ExitStack() as stack:
                for n in range(size):
                    switch(stack.enter_context(self.app.connection()).pgconn, n)
            return

        async def each() -> None:
            async with contextlib.AsyncExitStack() as stack:
                for n in range(size):
                    switch((await stack.enter_async_context(self.app.async_connection())).pgconn,
                           n)

        self.runner.run(each())

    def count_round_trips(self) -> None:
        size = self.pool_size()
        files = [tempfile.mkstemp(prefix="bench_holds_trace_") for _ in range(size)]
        try:
            self.traced(size, [handle for handle, _ in files], on=True)
            self.run(TRACED_HOLDS)
            self.traced(size, [handle for handle, _ in files], on=False)
            ready = sum(len(_READY.findall(Path(path).read_text(errors="replace")))
                        for _, path in files)
        finally:
            for handle, path in files:
                os.close(handle)
                os.unlink(path)
        if self.pool_size() == size:  # no connection opened meanwhile, untraced
            self.round_trips = ready / TRACED_HOLDS


def server_ticks(pids: list[int]) -> int | None:
    """The CPU ticks of these backends, summed (None when one is gone)."""
    stats = [c.proc_stat(pid) for pid in pids]
    if any(stat is None for stat in stats):
        return None
    return sum(stat.ticks for stat in stats if stat is not None)


def bench_hold(url: str, out: c.Printer, gate: c.QuietGate, *, rounds: int, holds: int) -> None:
    from workhorse import App

    out.heading(f"A hold on an idle budget: {holds} holds a round, median of {rounds} rounds")
    app = App("bench-holds", database_url=url)
    app.budget(IDLE, max_active=1000)
    app.sync()
    with psycopg.connect(url, autocommit=True) as conn:
        local = c.postmaster_pid(conn) is not None
    with asyncio.Runner() as runner:
        flavours = [Flavour("sync", app, runner), Flavour("async", app, runner)]
        for flavour in flavours:
            flavour.run(50)  # warm: pools open, statements prepared
            flavour.count_round_trips()
        for r in range(rounds):
            for flavour in flavours if r % 2 == 0 else flavours[::-1]:
                gate.wait()
                backends = flavour.backends()
                before = server_ticks(backends) if local else None
                cpu0 = time.process_time()
                acquire, release = flavour.run(holds)
                cpu1 = time.process_time()
                after = server_ticks(backends) if local else None
                total = [a + b for a, b in zip(acquire, release, strict=True)]
                flavour.acquire.append(c.percentile(acquire, 50))
                flavour.release.append(c.percentile(release, 50))
                flavour.p50.append(c.percentile(total, 50))
                flavour.p99.append(c.percentile(total, 99))
                flavour.client_cpu.append((cpu1 - cpu0) / holds)
                if (before is not None and after is not None
                        and flavour.backends() == backends):
                    flavour.server_cpu.append((after - before) / c.CLOCK_TICKS / holds)
            out.line(f"    round {r + 1}/{rounds}: " + "  ".join(
                f"{f.label} p50 {c.ms(f.p50[-1], 3)} ms" for f in flavours))
        runner.run(app.close_async())
    table = c.Table(
        "Hold acquire+release on an idle budget, ms (client wall time; p50/p99 per round, median "
        "of the rounds); round trips and CPU per hold",
        ["hold", "p50", "p99", "acquire p50", "release p50", "round trips", "client CPU µs",
         "server CPU µs"])
    for f in flavours:
        table.add(f"`{'async with' if f.label == 'async' else 'with'} ...hold()`",
                  c.ms(c.median(f.p50), 3), c.ms(c.median(f.p99), 3),
                  c.ms(c.median(f.acquire), 3), c.ms(c.median(f.release), 3),
                  f"{f.round_trips:.1f}" if f.round_trips == f.round_trips else "-",
                  f"{c.median(f.client_cpu) * 1e6:.0f}",
                  f"{c.median(f.server_cpu) * 1e6:.0f}" if f.server_cpu else "-")
    table.notes.append(
        "round trips: ReadyForQuery messages in libpq's trace of the pool's connection over "
        f"{TRACED_HOLDS} holds; client CPU: this process, every thread; server CPU: the pooled "
        "connection's backend (- when the server is not on this host).")
    out.table(table)


# ---- 2. the claim beside unexpired holds ----


def holds_sum_plan(conn: psycopg.Connection[Any], budget: str) -> tuple[str, str, str, str]:
    """(scan, execution ms, shared buffers, heap fetches) of the holds' sum."""
    with conn.transaction():
        # As the claim plans it (its function turns these off).
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        rows = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) SELECT COALESCE(sum(h.units), 0)"
            " FROM workhorse.budget_holds h WHERE h.budget = %s AND h.lease_until > now()",
            (budget,)).fetchall()
    text = "\n".join(r[0] for r in rows)
    scan = re.search(r"(Index Only Scan|Index Scan|Bitmap Heap Scan|Seq Scan)", text)
    took = re.search(r"Execution Time: ([\d.]+) ms", text)
    buffers = re.search(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?", text)
    fetches = re.search(r"Heap Fetches: (\d+)", text)
    return (scan.group(1) if scan else "?", took.group(1) if took else "?",
            str(sum(int(x or 0) for x in buffers.groups())) if buffers else "0",
            fetches.group(1) if fetches else "-")


def bench_claim_beside_holds(url: str, out: c.Printer, gate: c.QuietGate, *, sizes: list[int],
                             rounds: int, claims: int, backlog: int) -> None:
    from workhorse import App, EnqueueOptions, Queue

    out.heading(f"The claim beside unexpired holds of its budget: {', '.join(map(str, sizes))} "
                f"holds; batch 1, {claims} claims a round, median of {rounds} rounds")
    app = App("bench-holds-claim", database_url=url)
    names = {n: (f"held{n}", f"hq{n}") for n in sizes}
    for budget, _ in names.values():
        app.budget(budget, max_active=CLAIM_BUDGET_MAX)
    app.sync()
    taking: dict[int, str] = {}
    with psycopg.connect(url, autocommit=True) as conn, contextlib.ExitStack() as stack:
        q = Queue(conn)
        claimer = bc.BudgetClaimer(conn, {queue: budget for budget, queue in names.values()})
        for n, (budget, queue) in names.items():
            q.enqueue_many([(bc.TASK, {"args": [], "kwargs": {}},
                             EnqueueOptions(queue=queue, budget=budget))])
            bc.prefill(conn, queue, backlog - 1, budget=budget)
            spans = []
            t0 = time.perf_counter()
            for _ in range(n):
                t1 = time.perf_counter()
                stack.enter_context(app.budget(budget).hold(lease="2h"))
                spans.append(time.perf_counter() - t1)
            if n:
                tenth = max(n // 10, 1)
                taking[n] = (f"{n:,} holds taken in {time.perf_counter() - t0:.1f} s; acquire "
                             f"p50 of the first tenth {c.ms(c.percentile(spans[:tenth], 50), 3)} "
                             f"ms, of the last {c.ms(c.percentile(spans[-tenth:], 50), 3)} ms")
                out.line(f"  {taking[n]}")
        held = dict(conn.execute("SELECT budget, count(*) FROM workhorse.budget_holds"
                                 " GROUP BY budget").fetchall())
        if any(held.get(budget, 0) != n for n, (budget, _) in names.items()):
            sys.exit(f"holds per budget {held}, not {sizes}")
        bc.settle(conn)
        conn.execute("VACUUM ANALYZE workhorse.budget_queues")
        table = c.Table(
            "Claim latency on a budgeted queue beside N unexpired holds of its budget, µs: "
            f"client round trip of Queue.claim (batch 1), p50/p99 per round, median of {rounds} "
            "rounds; buffers per claim; the holds' sum (EXPLAIN ANALYZE)",
            ["holds", "budget_holds", "p50 µs", "p99 µs", "buffers/claim", "sum's scan",
             "sum ms", "sum buffers", "heap fetches"])
        for state in ("as left", "vacuumed"):
            if state == "vacuumed":
                conn.execute("VACUUM ANALYZE workhorse.budget_holds")
            else:
                conn.execute("ANALYZE workhorse.budget_holds")
            p50: dict[int, list[float]] = {n: [] for n in sizes}
            p99: dict[int, list[float]] = {n: [] for n in sizes}
            buffers: dict[int, list[int]] = {n: [] for n in sizes}
            for r in range(rounds):
                order = sizes[r % len(sizes):] + sizes[:r % len(sizes)]
                for n in order:
                    queue = names[n][1]
                    gate.wait()
                    for _ in range(5):
                        claimer.cycle(queue, 1)
                    lat = []
                    for _ in range(claims):
                        claim_s, _, got = claimer.cycle(queue, 1)
                        if got != 1:
                            sys.exit(f"{queue}: a claim took {got} jobs, not 1")
                        lat.append(claim_s)
                    p50[n].append(c.percentile(lat, 50))
                    p99[n].append(c.percentile(lat, 99))
                    buffers[n].extend(claimer.buffers(queue, 1, 5))
                out.line(f"    {state}, round {r + 1}/{rounds}: " + "  ".join(
                    f"{n} holds {c.median(p50[n][-1:]) * 1e6:.0f} µs" for n in sizes))
            for n in sizes:
                scan, took, sum_buffers, fetches = holds_sum_plan(conn, names[n][0])
                table.add(f"{n:,}", state, f"{c.median(p50[n]) * 1e6:.0f}",
                          f"{c.median(p99[n]) * 1e6:.0f}",
                          f"{c.median(buffers[n]):.0f}" if buffers[n] else "-",
                          scan, took, sum_buffers, fetches)
        t0 = time.perf_counter()
        stack.close()
        released = time.perf_counter() - t0
    table.notes.append(f"then {sum(sizes):,} holds released in {released:.1f} s")
    out.table(table)
    app.close()


# ---- main ----


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_holds")
    parser.add_argument("--quick", action="store_true",
                        help="fewer holds and claims, sizes 0 and 1,000 only")
    parser.add_argument("--only", choices=("hold", "claim"), default=None)
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5, quick 3)")
    parser.add_argument("--quiet-wait", type=float, default=None,
                        help="before each measurement wait up to this many seconds for the "
                        "machine to be quiet (default 60, quick 5)")
    args = parser.parse_args()
    out = c.Printer(args.format)
    gate = c.QuietGate(args.quiet_wait if args.quiet_wait is not None
                       else 5 if args.quick else 60)
    server, source = c.resolve_server_url(args.database_url)
    rounds = args.rounds or (3 if args.quick else 5)
    started = time.perf_counter()
    with c.scratch_database(server, args.db_name, keep=args.keep_db) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            out.heading(f"bench_holds ({'quick' if args.quick else 'full'} mode)")
            import workhorse

            facts = {"database": f"{c.describe_url(url)} ({source})", "run at": c.stamp(),
                     "workhorse": str(Path(workhorse.__file__).resolve().parent)}
            facts.update(c.server_facts(conn))
            out.facts("environment", facts)
        if args.only in (None, "hold"):
            bench_hold(url, out, gate, rounds=rounds, holds=300 if args.quick else 2000)
        if args.only in (None, "claim"):
            bench_claim_beside_holds(
                url, out, gate, sizes=[0, 1000] if args.quick else [0, 1000, 10_000],
                rounds=rounds, claims=100 if args.quick else 200,
                backlog=2_000 if args.quick else 5_000)
        with psycopg.connect(url, autocommit=True) as conn:
            out.line(f"\nafter the run: {c.machine_load(conn)}")
            out.line(gate.summary())
    out.line(f"bench_holds finished in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
