"""Per-key limits as data (issue #41 item 2, docs/design.md "Per-key limits"): what the rows of
workhorse.key_limits cost the claim, with 0, 1,000 and 100,000 of them.

    .venv/bin/python benchmarks/bench_key_limits.py [--database-url URL] [--quick] [--format plain]

One queue, `max_active_per_key=1` (no queue-wide limit), with 100,000 distinct keys (--keys) and
2 ready jobs each (prefilled, key i's jobs at ids i and keys + i, so each claim meets 10 keys it
has not met before), in five cases:
    none        no key limits: the key-heads walk of a level-1 queue (sql/claim/)
    none_nojit  the same queue on a second connection with `SET jit = off`: at 100k keys the
                heads walk's generic plan is estimated above jit_above_cost (100,000), so with
                the server's default (jit on, where the server has JIT) each claim compiles it
    default     a key limit set with a default (max_active 1) and no rows: the queue at level 2,
                admitted in units like the two below; the "0 rows" case
    overrides   1,000 rows (--overrides: every 100th key, max_active 2) + the default
    all         a row for every key (the same 1,000 overrides, the rest max_active 1) + the default
Each case but none_nojit is its own scratch database (`<--db-name>_<case>`), so key_limits holds
that case's rows and no more: its primary key is as deep as that many rows make it. All five are
measured in turn, round by round, in rotated order, on one autocommit connection each, idle
between statements, from this one process. Costs that grow with the rows show as `all` against
`default` (same path, 0 rows); `none` against `default` is what moving to the claim in units
costs, whatever the rows.

Per measurement: 5 warm-up cycles, then N cycles (200; quick 50) of `Queue.claim(queue, 10, 60)`
timed client-side, then `Queue.complete_many` of what it claimed (timed too); nothing is
enqueued back (a case takes ~10,000 of its queue's 200,000 jobs; none and none_nojit
share one queue). p50/p99 per
round, median of the rounds. Besides time:
  * server CPU per claim+complete: the connection's backend's utime + stime (/proc/<pid>/stat,
    when the server runs on this host) over the N cycles, over N;
  * buffers per claim: 5 more claims per round under auto_explain (ANALYZE, BUFFERS, no timing,
    nested statements): the claim statement's shared buffers (hit + read, its nested
    statements included), and, from the nested statements' plans, each scan node on
    key_limits: its type and index, its loops (the probes) and its buffers. Work done, which
    outside load cannot skew.
The plan check: every scan of key_limits seen in those plans, counted by node; a Seq Scan (or
any node other than an index scan of key_limits_pkey) is reported. The statements of one claim
of the `all` case that read key_limits are printed with their plans (a long plan cut to its
nodes on key_limits and the lines above them). The primary key's depth (pgstattuple's
pgstatindex, when the extension can be created) is shown beside each case.

Before each measurement the run waits (up to --quiet-wait s) for the machine to be idle. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
import bench_claim as bc

QUEUE = "kl"
BATCH = 10
LEASE = 60.0
WARM = 5
EXPLAINED = 5
_CLAIM_CALL = re.compile(rf"workhorse\.{re.escape(bc.claim_function())}\(")
_BUFFERS = re.compile(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?")
_KL_SCAN = re.compile(r"(Seq Scan|Index Only Scan|Index Scan|Bitmap Heap Scan|Bitmap Index Scan|"
                      r"Tid Scan|Sample Scan)(?: Backward)?(?: using (\w+))? on key_limits\b")
_LOOPS = re.compile(r"actual rows=\d+ loops=(\d+)")


@dataclass
class Case:
    """One case: its queue's database and connection, and its figures, round by round."""

    slug: str
    label: str
    rows: int
    db: str = ""  # the case whose database it claims from (itself when empty)
    jit: bool = True  # the session's `jit` setting
    url: str = ""
    conn: Any = None
    queue: Any = None
    backend: int = 0
    index: str = "-"
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    complete_p50: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    buffers: list[int] = field(default_factory=list)
    kl_buffers: list[int] = field(default_factory=list)
    kl_probes: list[int] = field(default_factory=list)
    scans: Counter[str] = field(default_factory=Counter)
    plans: list[str] = field(default_factory=list)
    explained: int = 0


def key_sql(keys: int) -> str:
    """The key of job g.i (1-based): keys in runs of `keys`, zero-padded (k000000 ...)."""
    return f"'k' || lpad(mod(g.i - 1, {keys})::text, 6, '0')"


def build(case: Case, keys: int, overrides: int) -> None:
    from workhorse import KeyLimit

    conn, q = case.conn, case.queue
    bc.prefill(conn, QUEUE, 2 * keys, ckey=key_sql(keys))
    bc.set_policy(conn, QUEUE, None, 1)  # rebuilds the key heads from the ready jobs
    # The overrides: `overrides` keys spread evenly (every 100th of 100k keys), max_active 2.
    spread = set(range(0, keys, max(keys // overrides, 1))[:overrides]) if overrides else set()
    rows = {}
    if case.slug == "overrides":
        rows = {f"k{i:06}": KeyLimit(max_active=2) for i in sorted(spread)}
    elif case.slug == "all":
        rows = {f"k{i:06}": KeyLimit(max_active=2 if i in spread else 1) for i in range(keys)}
    if case.slug != "none":  # "default": no rows, the default alone
        q.set_key_limits(bc.NAMESPACE, QUEUE, rows, default=KeyLimit(max_active=1))
    stored = conn.execute("SELECT count(*) FROM workhorse.key_limits").fetchone()[0]
    if stored != case.rows:
        sys.exit(f"{case.slug}: {stored} rows in key_limits, not {case.rows}")
    bc.settle(conn)
    conn.execute("VACUUM ANALYZE workhorse.key_limits, workhorse.key_limit_sets")
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        level, leaves = conn.execute(
            "SELECT tree_level, leaf_pages FROM pgstatindex('workhorse.key_limits_pkey')"
        ).fetchone()
        case.index = f"{level + 1} ({leaves} leaf pages)"
    except psycopg.Error:
        case.index = "-"


def kl_nodes(plan: str) -> list[tuple[str, int, int]]:
    """Each scan node on key_limits in one plan: (node, loops, shared buffers hit + read)."""
    lines = plan.splitlines()
    found = []
    for n, line in enumerate(lines):
        m = _KL_SCAN.search(line)
        if m is None:
            continue
        node = m.group(1) + (f" using {m.group(2)}" if m.group(2) else "")
        loops_m = _LOOPS.search(line)
        loops = int(loops_m.group(1)) if loops_m else 0
        indent = line.index("->") if "->" in line else len(line) - len(line.lstrip())
        buffers = 0
        for detail in lines[n + 1:]:
            if "->" in detail or len(detail) - len(detail.lstrip()) <= indent:
                break
            b = _BUFFERS.search(detail)
            if b:
                buffers = sum(int(x or 0) for x in b.groups())
                break
        found.append((node, loops, buffers))
    return found


@contextlib.contextmanager
def explaining(conn: psycopg.Connection[Any], notices: list[str]) -> Any:
    """auto_explain on this session for the statements in the block: ANALYZE, BUFFERS, no
    timing, nested statements; their plans arrive in `notices`."""
    conn.execute("SET auto_explain.log_min_duration = 0")
    notices.clear()
    try:
        yield
    finally:
        conn.execute("SET auto_explain.log_min_duration = -1")


def prepare_explain(case: Case, notices: list[str]) -> bool:
    try:
        case.conn.execute("LOAD 'auto_explain'")
    except psycopg.Error:
        return False
    for setting, value in (
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_buffers", "on"),
        ("auto_explain.log_timing", "off"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_level", "notice"),
        ("auto_explain.log_min_duration", "-1"),
    ):
        case.conn.execute(sql.SQL("SET {} = {}").format(
            sql.Identifier(*setting.split(".")), sql.Literal(value)))
    case.conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    return True


def cycle(case: Case) -> tuple[float, float]:
    t0 = time.perf_counter()
    jobs = case.queue.claim(QUEUE, BATCH, LEASE)
    t1 = time.perf_counter()
    case.queue.complete_many([(j.id, j.fence, None) for j in jobs])
    t2 = time.perf_counter()
    if len(jobs) != BATCH:
        sys.exit(f"{case.slug}: a claim took {len(jobs)} jobs, not {BATCH}")
    return t1 - t0, t2 - t1


def explain_claims(case: Case, notices: list[str], keep_plans: bool) -> None:
    for _ in range(EXPLAINED):
        with explaining(case.conn, notices):
            jobs = case.queue.claim(QUEUE, BATCH, LEASE)
        case.queue.complete_many([(j.id, j.fence, None) for j in jobs])
        top = [n for n in notices if _CLAIM_CALL.search(n)]
        if not top:
            continue
        m = _BUFFERS.search(top[-1])
        if m:
            case.buffers.append(sum(int(x or 0) for x in m.groups()))
        probes = buffers = 0
        shown = {plan.split("\n", 2)[1] for plan in case.plans}  # by their Query Text
        for notice in notices:
            nodes = kl_nodes(notice)
            for node, loops, node_buffers in nodes:
                case.scans[node] += loops
                probes += loops
                buffers += node_buffers
            text = notice.split("\n", 2)[1] if "\n" in notice else notice
            if nodes and keep_plans and text not in shown:
                case.plans.append(notice)
                shown.add(text)
        case.kl_probes.append(probes)
        case.kl_buffers.append(buffers)
        case.explained += 1


def bench(cases: list[Case], out: c.Printer, gate: c.QuietGate, *, rounds: int, claims: int,
          local: bool) -> None:
    notices: dict[str, list[str]] = {case.slug: [] for case in cases}
    explain = {case.slug: prepare_explain(case, notices[case.slug]) for case in cases}
    for r in range(rounds):
        order = cases[r % len(cases):] + cases[:r % len(cases)]
        busiest = 0.0
        for case in order:
            busiest = max(busiest, gate.wait())
            for _ in range(WARM):
                cycle(case)
            before = c.proc_stat(case.backend) if local else None
            lat, comp = [], []
            for _ in range(claims):
                claim_s, complete_s = cycle(case)
                lat.append(claim_s)
                comp.append(complete_s)
            after = c.proc_stat(case.backend) if local else None
            case.p50.append(c.percentile(lat, 50))
            case.p99.append(c.percentile(lat, 99))
            case.complete_p50.append(c.percentile(comp, 50))
            if before is not None and after is not None:
                case.cpu.append((after.ticks - before.ticks) / c.CLOCK_TICKS / claims)
            if explain[case.slug]:
                explain_claims(case, notices[case.slug], keep_plans=case.slug == "all")
        out.line(f"    round {r + 1}/{rounds}: " + "  ".join(
            f"{case.slug} p50 {c.ms(case.p50[-1])} ms" for case in cases)
            + f"  [machine up to {busiest:.0%} busy before]")


def report(cases: list[Case], out: c.Printer, *, rounds: int, claims: int, keys: int) -> None:
    base = next(case for case in cases if case.slug == "default")
    table = c.Table(
        f"Claim of {BATCH} then complete_many, {c.count(keys)} keys x 2 ready jobs, "
        f"max_active_per_key=1: claim round trip p50/p99 per round ({claims} claims), median of "
        f"{rounds} rounds; server CPU per claim+complete; buffers per claim (auto_explain, "
        f"{EXPLAINED} claims a round)",
        ["case", "key_limits rows", "pkey levels", "claim p50 ms", "claim p99 ms",
         "complete p50 ms", "server CPU µs", "buffers/claim", "key_limits probes/claim",
         "key_limits buffers/claim", "other buffers/claim", "p50 vs 0 rows",
         "buffers vs 0 rows"])
    for case in cases:
        bufs = c.median(case.buffers) if case.buffers else float("nan")
        kl = c.median(case.kl_buffers) if case.kl_buffers else float("nan")
        base_bufs = c.median(base.buffers) if base.buffers else float("nan")
        table.add(
            case.label, f"{case.rows:,}", case.index,
            f"{c.ms(c.median(case.p50))} ({c.ms(min(case.p50))}..{c.ms(max(case.p50))})",
            c.ms(c.median(case.p99)), c.ms(c.median(case.complete_p50)),
            f"{c.median(case.cpu) * 1e6:.0f} ({min(case.cpu) * 1e6:.0f}..{max(case.cpu) * 1e6:.0f})"
            if case.cpu else "-",
            f"{bufs:.0f}", f"{c.median(case.kl_probes):.0f}" if case.kl_probes else "-",
            f"{kl:.0f}", f"{bufs - kl:.0f}",
            f"{c.median(case.p50) / c.median(base.p50):.2f}", f"{bufs - base_bufs:+.0f}")
    table.notes.append(
        "buffers/claim: shared buffers hit + read by the claim statement, nested statements "
        "included; key_limits: the scan nodes on key_limits in the nested statements' plans "
        "(probes: their loops); other: the rest. Medians. vs 0 rows: against the default "
        "case, the same claim (in units) with no rows; no key limits is the key-heads walk.")
    table.notes.append(
        "server CPU: the backend's utime + stime over the timed claims and their completes, "
        "per claim (clock ticks of 10 ms; - when the server is not on this host). In "
        "parentheses: the lowest and highest round.")
    out.table(table)
    plan = c.Table("Plan check: the scans of key_limits in those claims' plans, per claim",
                   ["case", "node", "per claim", "verdict"])
    for case in cases:
        if not case.scans:
            plan.add(case.label, "(none)", "0", "no key_limits read"
                     if case.explained else "no plans (auto_explain unavailable)")
            continue
        for node, loops in sorted(case.scans.items()):
            ok = node == "Index Scan using key_limits_pkey"
            plan.add(case.label, node, f"{loops / max(case.explained, 1):.1f}",
                     "never executed" if not loops else "index probe" if ok
                     else "NOT an index probe of key_limits_pkey")
    out.table(plan)
    for case in cases:
        for text in case.plans:
            out.line(f"\n-- {case.label}: a statement of one claim that reads key_limits "
                     f"(auto_explain)\n{excerpt(text)}")


def excerpt(notice: str, longest: int = 30) -> str:
    """An auto_explain notice shown short: its query's first line, and its plan; a plan longer
    than `longest` lines cut to each node on key_limits with its details and 4 lines above."""
    lines = notice.splitlines()
    start = next((n for n, line in enumerate(lines) if n > 0 and "(cost=" in line
                  and not line.startswith(" ")), len(lines))
    query = " ".join(" ".join(lines[1:start]).split())
    head = f"{query[:110]}{'...' if len(query) > 110 else ''}"
    plan = lines[start:]
    if len(plan) <= longest:
        return "\n".join([head, *plan])
    shown = [head, plan[0], "  ..."]
    for n, line in enumerate(plan):
        if not _KL_SCAN.search(line):
            continue
        indent = line.index("->") if "->" in line else 0
        end = n + 1
        while (end < len(plan) and "->" not in plan[end]
               and len(plan[end]) - len(plan[end].lstrip()) > indent):
            end += 1
        shown += [*plan[max(n - 4, 1):end], "  ..."]
    return "\n".join(shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_key_limits")
    parser.add_argument("--quick", action="store_true", help="fewer rounds and claims (same sizes)")
    parser.add_argument("--keys", type=int, default=100_000, help="keys (%(default)s)")
    parser.add_argument("--overrides", type=int, default=1_000,
                        help="rows of the overrides case (%(default)s)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5, quick 3)")
    parser.add_argument("--claims", type=int, default=None,
                        help="timed claims per case per round (default 200, quick 50)")
    parser.add_argument("--quiet-wait", type=float, default=None,
                        help="before each measurement wait up to this many seconds for the "
                        "machine to be quiet (default 60, quick 5)")
    args = parser.parse_args()
    if args.keys > 1_000_000 or args.overrides > args.keys:
        sys.exit("--keys at most 1,000,000 (6-digit keys), --overrides at most --keys")
    out = c.Printer(args.format)
    gate = c.QuietGate(args.quiet_wait if args.quiet_wait is not None
                       else 5 if args.quick else 60)
    server, source = c.resolve_server_url(args.database_url)
    rounds = args.rounds or (3 if args.quick else 5)
    claims = args.claims or (50 if args.quick else 200)
    cases = [Case("none", "no key limits", 0),
             Case("none_nojit", "no key limits, jit off", 0, db="none", jit=False),
             Case("default", "0 rows + default", 0),
             Case("overrides", f"{c.count(args.overrides)} rows + default", args.overrides),
             Case("all", f"{c.count(args.keys)} rows + default", args.keys)]
    started = time.perf_counter()
    from workhorse import Queue

    with contextlib.ExitStack() as stack:
        for case in cases:
            if not case.db:
                case.url = stack.enter_context(c.scratch_database(
                    server, f"{args.db_name}_{case.slug}", keep=args.keep_db))
        for case in cases:
            if case.db:
                case.url = next(other.url for other in cases if other.slug == case.db)
        out.heading(f"bench_key_limits ({'quick' if args.quick else 'full'} mode)")
        with psycopg.connect(cases[0].url, autocommit=True) as conn:
            import workhorse

            facts = {"databases": ", ".join(c.describe_url(case.url) for case in cases
                                            if not case.db)
                     + f" ({source})", "run at": c.stamp(),
                     "workhorse": str(Path(workhorse.__file__).resolve().parent)}
            facts.update(c.server_facts(conn))
            local = c.postmaster_pid(conn) is not None
            out.facts("environment", facts)
        for case in cases:
            case.conn = stack.enter_context(psycopg.connect(case.url, autocommit=True))
            case.queue = Queue(case.conn)
            case.backend = case.conn.info.backend_pid
            if not case.jit:
                case.conn.execute("SET jit = off")
            if case.db:
                case.index = next(other.index for other in cases if other.slug == case.db)
                continue
            t0 = time.perf_counter()
            build(case, args.keys, args.overrides)
            out.line(f"  {case.slug}: {2 * args.keys:,} jobs over {args.keys:,} keys, "
                     f"{case.rows:,} key_limits rows, built in {time.perf_counter() - t0:.1f} s")
        bench(cases, out, gate, rounds=rounds, claims=claims, local=local)
        report(cases, out, rounds=rounds, claims=claims, keys=args.keys)
        with psycopg.connect(cases[0].url, autocommit=True) as conn:
            out.line(f"\nafter the run: {c.machine_load(conn)}")
            out.line(gate.summary())
    out.line(f"bench_key_limits finished in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
