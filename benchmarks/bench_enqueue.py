"""Enqueue throughput: workhorse's enqueue paths against plain INSERT and COPY of the same rows.

    .venv/bin/python benchmarks/bench_enqueue.py [--database-url URL] [--jobs 10000] [--repeats 3]

Variants, each with the same N rows (task, queue, payload {"args": [i], "kwargs": {}}):
  a  Queue.enqueue, one job per transaction (autocommit)
  b  Queue.enqueue, N calls in one transaction
  c  Queue.enqueue_many, N jobs in one call (one statement, one transaction)
  d  plain psycopg executemany INSERT into an equivalent plain table, one transaction
  e  COPY into that plain table, one transaction
and two for context:
  a' plain INSERT, one row per transaction (autocommit): the commit cost (a) pays
  c' Queue.enqueue_many of keyed jobs into a per-key-governed queue (writes key hints)
and the job keys of docs/design.md "Job keys" beside plain enqueue, one job per transaction and in
batches of 1,000 (`enqueue_many`, 1,000 jobs a call, N/1,000 calls):
  p1    plain Queue.enqueue, one per transaction (as a)         p1k   plain, batches of 1,000
  u1    unique=Unique() (every job new: distinct arguments)      u1k   unique, batches of 1,000
  u1=   unique, every job a duplicate of one existing job        u1k=  duplicates, batches
  k1    job_key (every key new: inserts)                          k1k   job_key, batches of 1,000
  k1=   job_key, one key (every enqueue updates its job)          k1k=  1,000 keys, each updated
  b1    budget="bench-budget" (docs/design.md "Named budgets")        b1k   budget, batches of 1,000
and on_key_full (docs/design.md "Job keys"), keyed jobs one per transaction on a per-key-governed
queue:
  q1    100 keys, on_key_full="queue" (the default)
  f1    100 keys, on_key_full="cancel_in_progress", a limit never reached (the lock and the count)
  f1!   one key, on_key_full="cancel_in_progress", limit 1: every enqueue cancels the one before
The keyed variants build their EnqueueOptions before the clock starts (one a job for job_key).

The "equivalent plain table" is `CREATE TABLE ... (LIKE workhorse.jobs INCLUDING ALL)`: the same
columns, defaults, generated rank, identity, constraints and partial indexes, without the enqueue
function (gate lock, JSON cast, hints, NOTIFY). Tables are truncated and checkpointed before every
measurement; variants are interleaved within each repeat; the figure is the median of the repeats.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

QUEUE = "bench-enqueue"
KEYED_QUEUE = "bench-enqueue-keyed"
FULL_QUEUES = {"q1": ("bench-full-queue", 100), "f1": ("bench-full-cancel", 100),
               "f1!": ("bench-full-supersede", 1)}
TASK = "bench.noop"
KEYS = 100

PLAIN_COLUMNS = "task, queue, ckey, priority, payload, status, max_attempts, on_failure, meta"


def _payload(i: int) -> dict[str, Any]:
    return {"args": [i], "kwargs": {}}


def _reset(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "TRUNCATE workhorse.jobs, workhorse.key_hints, workhorse.key_heads, bench_plain.jobs"
    )
    c.try_checkpoint(conn)


# ---- the variants: each enqueues n jobs and returns the elapsed seconds ----


def v_enqueue_autocommit(conn: psycopg.Connection[Any], n: int) -> float:
    from workhorse import EnqueueOptions, Queue

    q, options = Queue(conn), EnqueueOptions(queue=QUEUE)
    t0 = time.perf_counter()
    for i in range(n):
        q.enqueue(TASK, _payload(i), options)
    return time.perf_counter() - t0


def v_enqueue_one_tx(conn: psycopg.Connection[Any], n: int) -> float:
    from workhorse import EnqueueOptions, Queue

    q, options = Queue(conn), EnqueueOptions(queue=QUEUE)
    t0 = time.perf_counter()
    with conn.transaction():
        for i in range(n):
            q.enqueue(TASK, _payload(i), options)
    return time.perf_counter() - t0


def v_enqueue_many(conn: psycopg.Connection[Any], n: int) -> float:
    from workhorse import EnqueueOptions, Queue

    q, options = Queue(conn), EnqueueOptions(queue=QUEUE)
    t0 = time.perf_counter()
    q.enqueue_many([(TASK, _payload(i), options) for i in range(n)])
    return time.perf_counter() - t0


def v_enqueue_many_keyed(conn: psycopg.Connection[Any], n: int) -> float:
    from workhorse import EnqueueOptions, Queue

    q = Queue(conn)
    options = [EnqueueOptions(queue=KEYED_QUEUE, concurrency_key=f"k{k}") for k in range(KEYS)]
    t0 = time.perf_counter()
    q.enqueue_many([(TASK, _payload(i), options[i % KEYS]) for i in range(n)])
    return time.perf_counter() - t0


BATCH = 1_000


def _keyed_options(kind: str, n: int) -> list[Any]:
    """One EnqueueOptions per job: `unique` (one shared), `job_key` (one key a job, or one key
    for all with "job_key=")."""
    from workhorse import EnqueueOptions, Unique

    if kind == "plain":
        return [EnqueueOptions(queue=QUEUE)] * n
    if kind == "unique":
        return [EnqueueOptions(queue=QUEUE, unique=Unique())] * n
    if kind == "job_key":
        return [EnqueueOptions(queue=QUEUE, job_key=f"k{i}") for i in range(n)]
    if kind == "job_key=":
        return [EnqueueOptions(queue=QUEUE, job_key="k")] * n
    if kind == "budget":  # a named budget: the queue's level and budget_queues, once a batch
        return [EnqueueOptions(queue=QUEUE, budget="bench-budget")] * n
    if kind == "job_key=1k":  # the same 1,000 keys in every batch: each batch updates them all
        keys = [EnqueueOptions(queue=QUEUE, job_key=f"k{i}") for i in range(BATCH)]
        return [keys[i % BATCH] for i in range(n)]
    raise ValueError(kind)


def _key_variant(kind: str, batch: int, duplicate: bool = False
                 ) -> Callable[[psycopg.Connection[Any], int], float]:
    """Enqueue n jobs with `kind` keys: one per transaction (batch 1) or `batch` a call.
    `duplicate`: every payload equal, after one first job (so each enqueue finds it)."""

    def run(conn: psycopg.Connection[Any], n: int) -> float:
        from workhorse import Queue

        q = Queue(conn)
        options = _keyed_options(kind, n)
        payloads = [_payload(0 if duplicate else i) for i in range(n)]
        if duplicate or kind.startswith("job_key="):
            # The job every later enqueue finds, made before the clock starts.
            q.enqueue_many([(TASK, payloads[i], options[i]) for i in range(min(batch, n))])
        t0 = time.perf_counter()
        if batch == 1:
            for i in range(n):
                q.enqueue(TASK, payloads[i], options[i])
        else:
            for start in range(0, n, batch):
                q.enqueue_many([(TASK, payloads[i], options[i])
                                for i in range(start, min(start + batch, n))])
        return time.perf_counter() - t0

    return run


def _full_key_variant(which: str) -> Callable[[psycopg.Connection[Any], int], float]:
    """Keyed jobs one per transaction on one of FULL_QUEUES (its policy set up in main)."""

    def run(conn: psycopg.Connection[Any], n: int) -> float:
        from workhorse import EnqueueOptions, Queue

        q = Queue(conn)
        queue, keys = FULL_QUEUES[which]
        options = [EnqueueOptions(queue=queue, concurrency_key=f"k{k}") for k in range(keys)]
        t0 = time.perf_counter()
        for i in range(n):
            q.enqueue(TASK, _payload(i), options[i % keys])
        return time.perf_counter() - t0

    return run


def _plain_rows(n: int) -> list[tuple[Any, ...]]:
    return [
        (TASK, QUEUE, "", 0, Jsonb(_payload(i)), "ready", 3, "fail", Jsonb({})) for i in range(n)
    ]


_PLAIN_INSERT = (
    f"INSERT INTO bench_plain.jobs ({PLAIN_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def v_plain_autocommit(conn: psycopg.Connection[Any], n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        conn.execute(
            _PLAIN_INSERT, (TASK, QUEUE, "", 0, Jsonb(_payload(i)), "ready", 3, "fail", Jsonb({}))
        )
    return time.perf_counter() - t0


def v_plain_executemany(conn: psycopg.Connection[Any], n: int) -> float:
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(_PLAIN_INSERT, _plain_rows(n))
    return time.perf_counter() - t0


def v_plain_copy(conn: psycopg.Connection[Any], n: int) -> float:
    t0 = time.perf_counter()
    copy_sql = f"COPY bench_plain.jobs ({PLAIN_COLUMNS}) FROM STDIN"
    with conn.transaction(), conn.cursor() as cur, cur.copy(copy_sql) as copy:
        for row in _plain_rows(n):
            copy.write_row(row)
    return time.perf_counter() - t0


@dataclass(frozen=True)
class Variant:
    id: str
    label: str
    per_transaction: bool  # one transaction per job (else the whole batch in one)
    per_call: bool  # one call per job: slow, so --quick runs fewer jobs
    fn: Callable[[psycopg.Connection[Any], int], float]


VARIANTS = [
    Variant(
        "a", "Queue.enqueue, one per transaction (autocommit)", True, True, v_enqueue_autocommit
    ),
    Variant("b", "Queue.enqueue, N in one transaction", False, True, v_enqueue_one_tx),
    Variant("c", "Queue.enqueue_many, N in one call", False, False, v_enqueue_many),
    Variant("d", "plain executemany INSERT, one transaction", False, False, v_plain_executemany),
    Variant("e", "plain COPY, one transaction", False, False, v_plain_copy),
    Variant("a'", "plain INSERT, one per transaction (autocommit)", True, True, v_plain_autocommit),
    Variant(
        "c'",
        "Queue.enqueue_many, keyed, per-key-governed queue",
        False,
        False,
        v_enqueue_many_keyed,
    ),
    Variant("p1", "plain enqueue, one per transaction", True, True, _key_variant("plain", 1)),
    Variant("u1", "unique, one per transaction (all new)", True, True,
            _key_variant("unique", 1)),
    Variant("u1=", "unique, one per transaction (all duplicates)", True, True,
            _key_variant("unique", 1, duplicate=True)),
    Variant("k1", "job_key, one per transaction (all new)", True, True,
            _key_variant("job_key", 1)),
    Variant("k1=", "job_key, one per transaction (all updates)", True, True,
            _key_variant("job_key=", 1)),
    Variant("b1", "budget, one per transaction", True, True, _key_variant("budget", 1)),
    Variant("p1k", "plain enqueue_many, batches of 1,000", False, False,
            _key_variant("plain", BATCH)),
    Variant("b1k", "budget, batches of 1,000", False, False, _key_variant("budget", BATCH)),
    Variant("u1k", "unique, batches of 1,000 (all new)", False, False,
            _key_variant("unique", BATCH)),
    Variant("u1k=", "unique, batches of 1,000 (all duplicates)", False, False,
            _key_variant("unique", BATCH, duplicate=True)),
    Variant("k1k", "job_key, batches of 1,000 (all new)", False, False,
            _key_variant("job_key", BATCH)),
    Variant("k1k=", "job_key, batches of 1,000 (all updates)", False, False,
            _key_variant("job_key=1k", BATCH)),
    Variant("q1", "keyed, on_key_full=queue, one per transaction", True, True,
            _full_key_variant("q1")),
    Variant("f1", "keyed, on_key_full=cancel_in_progress, never full", True, True,
            _full_key_variant("f1")),
    Variant("f1!", "keyed, on_key_full=cancel_in_progress, each supersedes", True, True,
            _full_key_variant("f1!")),
]
QUICK_PER_CALL_JOBS = 2_000


def main(
    argv: list[str] | None = None, server_url: str | None = None, source: str = "given by caller"
) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_enqueue")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per variant (%(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="median of this many (%(default)s)")
    parser.add_argument(
        "--only", default=None, help="comma-separated variant ids to run, e.g. c,d,e"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the per-call variants (a, b, a') enqueue 2,000 jobs instead of --jobs",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=None,
        help="before each measurement wait up to this many seconds for the machine to be quiet "
        "(default 30, quick 5)",
    )
    args = parser.parse_args(argv)
    out = c.Printer(args.format)
    gate = c.QuietGate(args.quiet_wait if args.quiet_wait is not None else 5 if args.quick else 30)

    if server_url is None:
        server_url, source = c.resolve_server_url(args.database_url)
    variants = VARIANTS
    if args.only:
        wanted = {v.strip() for v in args.only.split(",")}
        variants = [v for v in VARIANTS if v.id in wanted]
    jobs = {
        v.id: min(args.jobs, QUICK_PER_CALL_JOBS) if args.quick and v.per_call else args.jobs
        for v in variants
    }

    with (
        c.scratch_database(server_url, args.db_name, keep=args.keep_db) as url,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        from workhorse import ConcurrencyPolicyDefinition, Queue

        conn.execute("CREATE SCHEMA bench_plain")
        conn.execute("CREATE TABLE bench_plain.jobs (LIKE workhorse.jobs INCLUDING ALL)")
        Queue(conn).sync_concurrency_policies(
            "bench",
            [ConcurrencyPolicyDefinition(queue=KEYED_QUEUE, max_active=None, max_active_per_key=4),
             ConcurrencyPolicyDefinition(queue=FULL_QUEUES["q1"][0], max_active_per_key=1_000_000),
             ConcurrencyPolicyDefinition(queue=FULL_QUEUES["f1"][0], max_active_per_key=1_000_000,
                                         on_key_full="cancel_in_progress"),
             ConcurrencyPolicyDefinition(queue=FULL_QUEUES["f1!"][0], max_active_per_key=1,
                                         on_key_full="cancel_in_progress")],
        )
        out.heading(
            f"bench_enqueue: {args.jobs:,} jobs per variant"
            + (f" ({QUICK_PER_CALL_JOBS:,} for one-call-per-job ones)" if args.quick else "")
            + f", median of {args.repeats}"
        )
        facts = {"database": f"{c.describe_url(url)} ({source})", "run at": c.stamp()}
        facts.update(c.server_facts(conn))
        out.facts("environment", facts)

        per_job: dict[str, list[float]] = {v.id: [] for v in variants}
        for repeat in range(args.repeats):
            for v in variants:
                _reset(conn)
                busy = gate.wait()
                elapsed = v.fn(conn, jobs[v.id])
                per_job[v.id].append(elapsed / jobs[v.id])
                out.line(
                    f"  repeat {repeat + 1}/{args.repeats}  {v.id:<3} {v.label:<52} "
                    f"{elapsed:7.3f} s  {jobs[v.id] / elapsed:>9,.0f} jobs/s"
                    f"  [machine {busy:.0%} busy before]"
                )
        _reset(conn)
        out.line(f"after the run: {c.machine_load(conn)}")
        out.line(gate.summary())

    base = c.median(per_job["d"]) if "d" in per_job else None
    table = c.Table(
        f"Enqueue throughput (median of {args.repeats})",
        ["variant", "jobs", "transactions", "jobs/s", "µs/job", "time/job vs (d) executemany"],
    )
    for v in variants:
        m = c.median(per_job[v.id])
        table.add(
            f"({v.id}) {v.label}",
            f"{jobs[v.id]:,}",
            f"{jobs[v.id]:,}" if v.per_transaction
            else f"{-(-jobs[v.id] // BATCH):,}" if v.id.endswith(("1k", "1k=")) else "1",
            c.rate(1 / m),
            f"{m * 1e6:.1f}",
            f"{m / base:.2f}x" if base else "-",
        )
    table.notes.append(
        "(a') and (c') are context: (a') is the per-commit floor that (a) pays; (c') adds one key "
        f"hint per distinct key ({KEYS} keys) in a queue with max_active_per_key. The plain table "
        "is LIKE workhorse.jobs INCLUDING ALL (same columns, defaults, indexes)."
    )
    table.notes.append(
        "p/u/k: plain, unique, job_key; 1: one job per transaction; 1k: enqueue_many of 1,000 "
        "(one transaction a call); '=': every enqueue finds an existing job (a unique duplicate, "
        "a job_key update)."
    )
    out.table(table)


if __name__ == "__main__":
    main()
