"""Workflows (issue #28): what a canvas costs beside the same number of plain jobs, and what the
release trigger costs a plain completion.

    .venv/bin/python benchmarks/bench_workflows.py [--database-url URL] [--jobs 1000] [--repeats 3]

Variants, each with N jobs of one task on one ungoverned queue:
  plain   enqueue_many of N plain jobs                     (one statement)
  chord   a chord: a group of N-1 members and a callback   (one statement)
  chain   a chain of N steps                               (one statement)
Enqueue is timed from the call to its commit. Completion is timed over a loop that claims one job
and records its success (Queue.claim, Queue.complete: 0.2.0's completion function, which the
trigger rides on), until no job is left: for the chord the last success releases the callback;
for the chain each success releases the next step.

Then a plain completion with the triggers and without them (ALTER TABLE ... DISABLE TRIGGER on the
row trigger and the deferred release trigger), side by side: N plain jobs claimed and completed one
at a time, and N plain jobs' status changed in one UPDATE, interleaved within each repeat. No job is
a workflow member there, so the triggers' WHEN tests are all they cost.

Tables are truncated and checkpointed before every measurement; the figure is the median of the
repeats. Benchmarks measure and print; they assert nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

import workhorse
from workhorse import Queue, chain, chord, group

QUEUE = "bench-wf"
# The workflow triggers on workhorse.jobs (migrations/0002_0.3.0.sql): disabled together for
# the "without trigger" side of the plain-completion comparison.
TRIGGERS = ("jobs_workflow_trg", "jobs_workflow_trg_release")
app = workhorse.App("bench_wf")


@app.task(name="bench.wf.step", queue=QUEUE)
def step(*args: Any) -> int:
    return 1


def _reset(conn: psycopg.Connection[Any]) -> None:
    conn.execute("TRUNCATE workhorse.jobs, workhorse.workflow_members, workhorse.job_deps, "
                 "workhorse.workflows, workhorse.key_hints")
    c.try_checkpoint(conn)


def _enqueue(kind: str, n: int) -> Callable[[], object]:
    if kind == "plain":
        return lambda: app.enqueue_many(step.call((i,)) for i in range(n))
    if kind == "chord":
        return lambda: chord(group(step.si(i) for i in range(n - 1)), step.s()).delay()
    return lambda: chain(step.si(0), *(step.s() for _ in range(n - 1))).delay()


def _complete_all(conn: psycopg.Connection[Any]) -> tuple[float, int]:
    q = Queue(conn)
    done = 0
    t0 = time.perf_counter()
    while True:
        claimed = q.claim(QUEUE, 1, 60.0)
        if not claimed:
            break
        for job in claimed:
            q.complete(job.id, job.fence, 1)
            done += 1
    return time.perf_counter() - t0, done


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c.add_common_args(parser, default_db="wh_bench_workflows")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per variant (%(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="median of this many (%(default)s)")
    args = parser.parse_args(argv)
    out = c.Printer(args.format)
    server_url, source = c.resolve_server_url(args.database_url)
    n = args.jobs
    with (
        c.scratch_database(server_url, args.db_name, keep=args.keep_db) as url,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        app.database_url = url
        out.facts("server", {"source": source, **c.server_facts(conn)})
        enq: dict[str, list[float]] = {k: [] for k in ("plain", "chord", "chain")}
        comp: dict[str, list[float]] = {k: [] for k in ("plain", "chord", "chain")}
        trig: dict[str, list[float]] = {"with trigger": [], "without trigger": []}
        bulk: dict[str, list[float]] = {"with trigger": [], "without trigger": []}
        for _ in range(args.repeats):
            for kind in enq:
                _reset(conn)
                enqueue = _enqueue(kind, n)
                t0 = time.perf_counter()
                enqueue()
                enq[kind].append(time.perf_counter() - t0)
                elapsed, done = _complete_all(conn)
                assert done == n, (kind, done)
                comp[kind].append(elapsed)
            for label in trig:
                _reset(conn)
                state = "ENABLE" if label == "with trigger" else "DISABLE"
                for trigger in TRIGGERS:
                    conn.execute(f"ALTER TABLE workhorse.jobs {state} TRIGGER {trigger}")
                app.enqueue_many(step.call((i,)) for i in range(n))
                elapsed, done = _complete_all(conn)
                trig[label].append(elapsed)
                # The same number of status changes in one statement: no round trip per job,
                # so the triggers' WHEN tests are a larger part of what is timed.
                _reset(conn)
                app.enqueue_many(step.call((i,)) for i in range(n))
                t0 = time.perf_counter()
                conn.execute("UPDATE workhorse.jobs SET status = 'succeeded', finished_at = now()"
                             " WHERE queue = %s AND status = 'ready'", (QUEUE,))
                bulk[label].append(time.perf_counter() - t0)
            for trigger in TRIGGERS:
                conn.execute(f"ALTER TABLE workhorse.jobs ENABLE TRIGGER {trigger}")
        table = c.Table(f"{c.count(n)} jobs: enqueue and completion (median of {args.repeats})",
                        ["variant", "enqueue", "per job", "claim+complete all", "per job"])
        for kind in enq:
            e, d = c.median(enq[kind]), c.median(comp[kind])
            table.add(kind, c.ms(e), c.ms(e / n, 3), c.ms(d), c.ms(d / n, 3))
        out.table(table)
        table = c.Table(f"plain completion, {c.count(n)} jobs: one at a time, and all of their "
                        "status changes in one UPDATE",
                        ["variant", "claim+complete all", "per job", "one UPDATE", "per job"])
        for label, values in trig.items():
            d, b = c.median(values), c.median(bulk[label])
            table.add(label, c.ms(d), c.ms(d / n, 3), c.ms(b), c.ms(b / n, 4))
        out.table(table)
        app.close()


if __name__ == "__main__":
    main()
