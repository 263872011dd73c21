"""History (docs/design.md "History"): what moving a day of finished jobs out of `jobs` costs,
what pruning that day costs once it is in `job_history`, against 0.2.0's row-by-row prune, and
what reads pay for the partitions.

    .venv/bin/python benchmarks/bench_history.py [--quick] [--database-url URL] [--jobs N]
        [--repeats 3] [--old-cap-seconds 60] [--format rich|plain|json] [--keep-db]

The server is `--database-url`, else $WORKHORSE_DATABASE_URL, else CI's PostgreSQL 15 at
postgresql://postgres@127.0.0.1:5432/postgres. The scratch database `wh_bench_history` is made
on it with the workhorse schema and dropped at the end. Every timing is taken `--repeats` times
(default 3) and the median reported; each repeat starts from a rebuilt table.

The day. `--jobs` succeeded jobs (default 1,000,000; `--quick` 100,000), their `finished_at`
spread evenly over one UTC day two days ago, expiring a day after they finished (so the whole
day's retention has passed), with payloads of about 250 bytes and results of about 100 (text a
compressor cannot shrink), 20 tasks, 3 queues, 1,000 keys, every 10th job with a tag (and its
job_tags row). Beside it, the live workload: 10,000 ready jobs and 10,000 jobs that succeeded in
the last half hour (too young to move). All set-based (INSERT ... SELECT generate_series, the day
first, so the live rows are the table's newest), then VACUUM ANALYZE and CHECKPOINT.

1. Move. `Queue.move_to_history(5000, after=3600)` in a loop until a batch is short, as a
   supervisor does: wall time, the backend's CPU (utime + stime of /proc/<pid>/stat of this
   connection's backend, pg_backend_pid(): the server must run on this host), and WAL written
   (pg_current_wal_insert_lsn), per job; the batches' p50 and slowest; then the VACUUM of `jobs`.
2. The live table. `workhorse.jobs`' heap (pg_relation_size) and total size (with indexes and
   TOAST, pg_total_relation_size), n_live_tup and n_dead_tup (pg_stat_user_tables, flushed
   first): before the move, after it, and after a VACUUM. A move is a DELETE from `jobs`: it
   leaves each moved row dead once, which the VACUUM reclaims (the space is reused by new rows;
   the file keeps its size).
3. Prune the day. After the move and the VACUUM, the wall time of one retention prune
   (`Queue.prune_jobs()`: the day's latest expiry has passed) and of one
   `Queue.prune_jobs(older_than=86400)`, alternately, each on its own freshly built and moved
   day; the jobs it returned, and `jobs`' n_dead_tup and n_tup_del across the prune (a day's
   drop leaves nothing on the live table). The issue's target: under 1,000 ms for 1M jobs.
4. The old way. The same day left in `jobs` (no move) and pruned as 0.2.0 pruned it, through
   the retention path on `jobs.expires_at`: `Queue.prune_jobs(5000)` until a batch is short, for
   at most `--old-cap-seconds` (default 60; "> cap" with the rate reached when it did not
   finish), with its CPU, WAL, the dead rows it leaves in `jobs` and the VACUUM that follows.
   (the live prune deletes jobs outside workflows exactly as 0.2.0's did, after a history pass
   that finds no partition here.)
5. Reads, with the day moved, on an autocommit connection, client wall time: get-by-id
   (`_ops.execute(conn, _ops.get_job(id))`) of a live job, of a history job, and of a history
   job as the first statement of a new connection (its catalog caches cold); `list_jobs(limit=50)`;
   an export (`Queue.export_history` over the day) of its first 100,000 rows, in rows/s. With the
   one day partition, then with 30 more small days (10 jobs each, moved through
   `move_to_history` with backdated `finished_at`): a history read by id probes every day.

Prints figures; asserts nothing. A wrong count (a move or a prune that did not take the whole
day) is printed as a problem under its table.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg.sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from workhorse import Queue, _ops, _sql

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BATCH = 5000
AFTER = 3600.0
READY = 10_000
RECENT = 10_000
SMALL_DAYS = 30
SMALL_DAY_JOBS = 10
EXPORT_ROWS = 100_000
FILL_STEP = 200_000


# ---- output: the shared tables, or one JSON document ----


class JsonPrinter:
    """`_common.Printer`'s interface, collecting the tables (and the raw figures) into one JSON
    document printed at the end; progress lines go to standard error."""

    style = "json"

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {"tables": [], "lines": []}

    def heading(self, text: str) -> None:
        self.doc.setdefault("heading", text)

    def line(self, text: str = "") -> None:
        print(text, file=sys.stderr, flush=True)
        if text:
            self.doc["lines"].append(text)

    def facts(self, title: str, facts: dict[str, str]) -> None:
        self.doc[title] = facts

    def table(self, table: c.Table) -> None:
        self.doc["tables"].append({"title": table.title, "columns": table.columns,
                                   "rows": table.rows, "notes": table.notes})

    def finish(self, figures: dict[str, Any]) -> None:
        self.doc["figures"] = figures
        print(json.dumps(self.doc, indent=2, default=str))


# ---- building the tables ----


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


FILL_DAY = """
INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, attempts, run_at, enqueued_at,
                            started_at, finished_at, fence, result, expires_at, tags)
SELECT 'shop.task' || (g %% 20), (ARRAY['api', 'mail', 'reports'])[1 + g %% 3],
       'tenant-' || (g %% 1000),
       jsonb_build_object(
           'args', jsonb_build_array(g, 'order-' || g),
           'kwargs', jsonb_build_object(
               'customer', 'cust-' || (g %% 50000), 'email', 'user' || g || '@example.com',
               'lines', jsonb_build_array(g %% 7, g %% 11, g %% 13),
               'token', md5(g::text) || md5((g + 1)::text), 'note', md5((g + 2)::text))),
       'succeeded', 1, f - interval '3 s', f - interval '3 s', f - interval '1 s', f, g,
       jsonb_build_object('status', 'ok', 'order', g, 'total_cents', g %% 100000,
                          'receipt', md5((g + 3)::text)),
       f + make_interval(secs => %(expires_after)s),
       CASE WHEN g %% 10 = 0 THEN ARRAY['tenant-' || (g %% 100)] END
FROM (SELECT g, %(start)s::timestamptz + make_interval(secs => %(span)s * g / %(n)s) AS f
      FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g) s
"""


def fill_finished(conn: psycopg.Connection[Any], n: int, start: datetime,
                  span: float = 86400.0, expires_after: float = 86400.0) -> None:
    """`n` succeeded jobs finished evenly over [start, start + span) seconds, each expiring
    `expires_after` seconds after it finished, with the job_tags rows of their tags."""
    first = conn.execute("SELECT coalesce(max(id), 0) FROM workhorse.jobs").fetchone()
    assert first is not None
    for lo in range(0, n, FILL_STEP):
        hi = min(lo + FILL_STEP, n) - 1
        conn.execute(FILL_DAY, {"start": start, "span": span, "n": n, "lo": lo, "hi": hi,
                                "expires_after": expires_after})
    conn.execute("INSERT INTO workhorse.job_tags (tag, job_id)"
                 " SELECT unnest(tags), id FROM workhorse.jobs"
                 " WHERE id > %s AND tags IS NOT NULL", (first[0],))


def fill_live(conn: psycopg.Connection[Any]) -> None:
    """The live workload: ready jobs, and jobs that succeeded in the last half hour."""
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status)"
        " SELECT 'shop.call', 'live', 'tenant-' || (g %% 1000),"
        "        jsonb_build_object('args', jsonb_build_array(g, md5(g::text)),"
        "                           'kwargs', '{}'::jsonb), 'ready'"
        " FROM generate_series(1, %s) g", (READY,))
    fill_finished(conn, RECENT, datetime.now(UTC) - timedelta(minutes=30), span=1800.0)


def reset(conn: psycopg.Connection[Any]) -> None:
    """Empty `jobs` and its tag rows, and drop every day of history."""
    conn.execute("TRUNCATE workhorse.jobs, workhorse.job_tags")
    for (name,) in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent IN ('workhorse.job_history'::regclass,"
            "                       'workhorse.job_history_tags'::regclass)").fetchall():
        conn.execute(f'DROP TABLE workhorse."{name}"')


def settle(conn: psycopg.Connection[Any]) -> None:
    # This backend's pending counts first, so that they do not land on top of VACUUM's.
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("VACUUM ANALYZE workhorse.jobs")
    conn.execute("VACUUM ANALYZE workhorse.job_tags")
    conn.execute("ANALYZE workhorse.job_history")
    c.try_checkpoint(conn)


# The first build is main's (it prints the table's size): the first section to ask uses it.
_PREBUILT: list[bool] = []


def build(conn: psycopg.Connection[Any], n: int, day: date) -> float:
    """A fresh `jobs`: the day of `n` finished jobs, then the live workload; seconds taken."""
    if _PREBUILT:
        _PREBUILT.clear()
        return 0.0
    t0 = time.perf_counter()
    reset(conn)
    fill_finished(conn, n, day_bounds(day)[0])
    fill_live(conn)
    settle(conn)
    return time.perf_counter() - t0


def history_days(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'workhorse.job_history'::regclass ORDER BY 1").fetchall()]


# ---- what the server did ----


def table_state(conn: psycopg.Connection[Any], count: bool = False) -> dict[str, int]:
    """`jobs`' sizes and its statistics counters, this backend's pending counts flushed (and,
    with `count`, its rows counted: n_live_tup is an estimate after a VACUUM that skipped
    pages)."""
    conn.execute("SELECT pg_stat_force_next_flush()")  # flushed as the backend goes idle
    row = conn.execute(
        "SELECT pg_relation_size('workhorse.jobs'), pg_total_relation_size('workhorse.jobs'),"
        "       n_live_tup, n_dead_tup, n_tup_del"
        " FROM pg_stat_user_tables WHERE relid = 'workhorse.jobs'::regclass").fetchone()
    assert row is not None
    state = dict(zip(("heap", "total", "live", "dead", "deleted"), (int(v) for v in row),
                     strict=True))
    if count:
        rows = conn.execute("SELECT count(*) FROM workhorse.jobs").fetchone()
        assert rows is not None
        state["rows"] = int(rows[0])
    return state


def history_size(conn: psycopg.Connection[Any]) -> int:
    """job_history's partitions with their indexes and TOAST, in bytes."""
    row = conn.execute(
        "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) FROM pg_inherits i"
        " WHERE i.inhparent = 'workhorse.job_history'::regclass").fetchone()
    assert row is not None
    return int(row[0])


class Work:
    """Wall time, this connection's backend CPU and the WAL written over a block."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.pid = conn.info.backend_pid
        self.local = c.proc_stat(self.pid) is not None
        self.wall = self.cpu = self.wal = math.nan

    def _ticks(self) -> float:
        stat = c.proc_stat(self.pid) if self.local else None
        return stat.ticks / c.CLOCK_TICKS if stat is not None else math.nan

    def _lsn(self) -> str:
        row = self.conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def __enter__(self) -> Work:
        self._lsn0 = self._lsn()
        self._cpu0 = self._ticks()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = self._ticks() - self._cpu0
        row = self.conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)",
                                (self._lsn0,)).fetchone()
        assert row is not None
        self.wal = float(row[0])


# ---- formatting ----


def mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MB"


def us(seconds: float, jobs: int) -> str:
    return "-" if not jobs or math.isnan(seconds) else f"{seconds / jobs * 1e6:,.1f}"


def runs(values: list[float], fmt: Callable[[float], str]) -> str:
    return ", ".join(fmt(v) for v in values)


def med(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


# ---- 1-3: move, the live table, prune ----


def move_all(q: Queue, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    batches: list[tuple[int, float]] = []
    with Work(conn) as work:
        while True:
            t0 = time.perf_counter()
            moved = q.move_to_history(BATCH, after=AFTER)
            if moved < 0:  # another mover or pruner: none in this database, but as a supervisor
                time.sleep(0.01)
                continue
            batches.append((moved, time.perf_counter() - t0))
            if moved < BATCH:
                break
    times = [t for _, t in batches]
    tenth = max(len(times) // 10, 1)
    return {"moved": sum(n for n, _ in batches), "wall": work.wall, "cpu": work.cpu,
            "wal": work.wal, "batches": len(batches), "batch_p50": med(times),
            "batch_max": max(times), "first_tenth": statistics.fmean(times[:tenth]),
            "last_tenth": statistics.fmean(times[-tenth:])}


def prune_once(q: Queue, conn: psycopg.Connection[Any], how: str) -> dict[str, Any]:
    before = table_state(conn)
    days = history_days(conn)
    with Work(conn) as work:
        pruned = q.prune_jobs() if how == "retention" else q.prune_jobs(older_than=86400)
    after = table_state(conn)
    return {"how": how, "pruned": pruned, "wall": work.wall, "cpu": work.cpu, "wal": work.wal,
            "days_before": len(days), "days_after": len(history_days(conn)),
            "dead_change": after["dead"] - before["dead"],
            "deleted_change": after["deleted"] - before["deleted"]}


def move_and_prune(conn: psycopg.Connection[Any], args: argparse.Namespace, day: date,
                   gate: c.QuietGate, out: Any, figures: dict[str, Any]) -> None:
    q = Queue(conn)
    moves: list[dict[str, Any]] = []
    vacuums: list[float] = []
    prunes: dict[str, list[dict[str, Any]]] = {"retention": [], "older_than": []}
    states: dict[str, dict[str, int]] = {}
    for round_no in range(2 * args.repeats):
        how = ("retention", "older_than")[round_no % 2]
        last = round_no == 2 * args.repeats - 1
        built = build(conn, args.jobs, day)
        states["before the move"] = table_state(conn, count=last)
        busy = gate.wait()
        move = move_all(q, conn)
        moves.append(move)
        states["after the move"] = table_state(conn, count=last)
        history = history_size(conn)
        t0 = time.perf_counter()
        conn.execute("VACUUM workhorse.jobs")
        vacuums.append(time.perf_counter() - t0)
        states["after VACUUM"] = table_state(conn, count=last)
        conn.execute("ANALYZE workhorse.job_history")
        c.try_checkpoint(conn)
        gate.wait()
        prune = prune_once(q, conn, how)
        prunes[how].append(prune)
        out.line(f"round {round_no + 1}/{2 * args.repeats}: built in {built:.0f} s; moved "
                 f"{move['moved']:,} in {move['wall']:.2f} s (CPU busy {busy:.0%} before); "
                 f"{how} prune {prune['pruned']:,} in {prune['wall'] * 1000:.0f} ms")

    n = args.jobs
    walls = [m["wall"] for m in moves]
    cpus = [m["cpu"] for m in moves]
    table = c.Table(f"1. move {n:,} jobs to history: move_to_history({BATCH}, after={AFTER:g})"
                    f" until a batch is short (median of {len(moves)})",
                    ["measure", "median", "runs"])
    table.add("wall time, s", f"{med(walls):.2f}", runs(walls, lambda v: f"{v:.2f}"))
    table.add("µs a job (wall)", us(med(walls), n), runs(walls, lambda v: us(v, n)))
    table.add("jobs/s", c.rate(n / med(walls)), runs(walls, lambda v: c.rate(n / v)))
    table.add("backend CPU, µs a job", us(med(cpus), n), runs(cpus, lambda v: us(v, n)))
    table.add("backend CPU / wall", f"{med(cpus) / med(walls):.0%}", "")
    table.add("WAL, bytes a job", f"{med([m['wal'] for m in moves]) / n:,.0f}",
              runs([m["wal"] for m in moves], lambda v: f"{v / n:,.0f}"))
    table.add("batches", str(moves[0]["batches"]), "")
    table.add("batch, ms: p50 / slowest",
              f"{c.ms(med([m['batch_p50'] for m in moves]), 0)} / "
              f"{c.ms(med([m['batch_max'] for m in moves]), 0)}", "")
    table.add("batch, ms: mean of the first / last tenth",
              f"{c.ms(med([m['first_tenth'] for m in moves]), 0)} / "
              f"{c.ms(med([m['last_tenth'] for m in moves]), 0)}", "")
    table.add("VACUUM of jobs afterwards, s", f"{med(vacuums):.2f}",
              runs(vacuums, lambda v: f"{v:.2f}"))
    wrong = [m["moved"] for m in moves if m["moved"] != n]
    if wrong:
        table.notes.append(f"PROBLEM: a move took {wrong} jobs, not {n:,}")
    if not Work(conn).local:
        table.notes.append("backend CPU: the server is not on this host ('-')")
    out.table(table)

    table = c.Table("2. the live table workhorse.jobs (the last round)",
                    ["when", "heap", "with indexes", "rows", "n_live_tup", "n_dead_tup"])
    for when, s in states.items():
        table.add(when, mb(s["heap"]), mb(s["total"]), f"{s['rows']:,}", f"{s['live']:,}",
                  f"{s['dead']:,}")
    table.notes.append(
        "The move is a DELETE from jobs: each moved row is left dead once (n_dead_tup above),"
        " and VACUUM reclaims it; the file keeps its size, the space is reused by new rows"
        " (n_live_tup after VACUUM is its estimate from the pages it read; rows is count(*)).")
    table.notes.append(f"The day in job_history: {mb(history)} with its indexes and TOAST.")
    out.table(table)

    table = c.Table(f"3. prune the day of {n:,} moved jobs (after VACUUM; median of "
                    f"{args.repeats}, each on a fresh day)",
                    ["prune", "median ms", "runs ms", "jobs pruned", "days before → after",
                     "jobs n_dead_tup Δ", "jobs n_tup_del Δ", "target"])
    for how, label in (("retention", "prune_jobs() (retention)"),
                       ("older_than", "prune_jobs(older_than=86400)")):
        done = prunes[how]
        ms_ = [p["wall"] for p in done]
        table.add(label, c.ms(med(ms_), 0), runs(ms_, lambda v: c.ms(v, 0)),
                  "/".join(f"{p['pruned']:,}" for p in done),
                  "/".join(f"{p['days_before']}→{p['days_after']}" for p in done),
                  "/".join(str(p["dead_change"]) for p in done),
                  "/".join(str(p["deleted_change"]) for p in done),
                  f"< 1000 ms for 1M: {'met' if med(ms_) < 1 else 'NOT met'}"
                  if n >= 1_000_000 else "< 1000 ms for 1M")
        bad = [p["pruned"] for p in done if p["pruned"] != n or p["days_after"] != 0]
        if bad:
            table.notes.append(f"PROBLEM: {label} pruned {bad}, not the day's {n:,}")
        if any(p["dead_change"] or p["deleted_change"] for p in done):
            table.notes.append(f"PROBLEM: {label} changed jobs' dead or deleted tuples")
    out.table(table)
    figures["move"] = moves
    figures["move_vacuum_s"] = vacuums
    figures["jobs_table"] = states
    figures["prune"] = prunes


# ---- 4: the old way ----


def old_way(conn: psycopg.Connection[Any], args: argparse.Namespace, day: date,
            gate: c.QuietGate, out: Any, figures: dict[str, Any],
            new_prune_ms: float) -> None:
    q = Queue(conn)
    n = args.jobs
    done: list[dict[str, Any]] = []
    for round_no in range(args.repeats):
        build(conn, n, day)
        before = table_state(conn)
        gate.wait()
        deleted, finished = 0, False
        with Work(conn) as work:
            while time.perf_counter() - work.t0 < args.old_cap_seconds:
                got = q.prune_jobs(BATCH)
                if got < 0:
                    time.sleep(0.01)
                    continue
                deleted += got
                if got < BATCH:
                    finished = True
                    break
        after = table_state(conn)
        t0 = time.perf_counter()
        conn.execute("VACUUM workhorse.jobs")
        vacuum = time.perf_counter() - t0
        done.append({"deleted": deleted, "finished": finished, "wall": work.wall,
                     "cpu": work.cpu, "wal": work.wal, "dead_after": after["dead"],
                     "dead_before": before["dead"], "vacuum": vacuum})
        out.line(f"old way {round_no + 1}/{args.repeats}: deleted {deleted:,} in "
                 f"{work.wall:.1f} s{'' if finished else ' (capped)'}")
    walls = [d["wall"] for d in done]
    rates = [d["deleted"] / d["wall"] for d in done]
    all_done = all(d["finished"] for d in done)
    table = c.Table(f"4. the old way: the same {n:,} jobs left in jobs, prune_jobs({BATCH}) "
                    f"until a batch is short (retention on jobs.expires_at; cap "
                    f"{args.old_cap_seconds:g} s; median of {len(done)})",
                    ["measure", "median", "runs"])
    if all_done:
        table.add("wall time, s", f"{med(walls):.1f}", runs(walls, lambda v: f"{v:.1f}"))
    else:
        table.add("wall time, s", f"> {args.old_cap_seconds:g} (cap)",
                  runs(walls, lambda v: f"{v:.1f}"))
    table.add("jobs deleted", f"{med([d['deleted'] for d in done]):,.0f}",
              runs([d["deleted"] for d in done], lambda v: f"{v:,.0f}"))
    table.add("jobs/s", c.rate(med(rates)), runs(rates, c.rate))
    table.add("µs a job (wall)", f"{1e6 / med(rates):,.1f}", "")
    cpu_per = [d["cpu"] / d["deleted"] for d in done if d["deleted"]]
    table.add("backend CPU, µs a job", f"{med(cpu_per) * 1e6:,.1f}",
              runs(cpu_per, lambda v: f"{v * 1e6:,.1f}"))
    wal_per = [d["wal"] / d["deleted"] for d in done if d["deleted"]]
    table.add("WAL, bytes a job", f"{med(wal_per):,.0f}", runs(wal_per, lambda v: f"{v:,.0f}"))
    table.add("dead tuples left in jobs", f"{med([d['dead_after'] for d in done]):,.0f}",
              runs([d["dead_after"] for d in done], lambda v: f"{v:,.0f}"))
    table.add("VACUUM of jobs afterwards, s", f"{med([d['vacuum'] for d in done]):.2f}",
              runs([d["vacuum"] for d in done], lambda v: f"{v:.2f}"))
    if all_done and not math.isnan(new_prune_ms):
        table.notes.append(f"against the day's drop (section 3, retention): "
                           f"{med(walls) * 1000 / new_prune_ms:,.0f}x the wall time")
    elif not all_done:
        table.notes.append(f"at the rate reached, all {n:,} would take about "
                           f"{n / med(rates):,.0f} s")
    out.table(table)
    figures["old_way"] = done


# ---- 5: reads ----


def read_round(url: str, conn: psycopg.Connection[Any], ids: dict[str, int],
               since: datetime, until: datetime, calls: int, connects: int
               ) -> dict[str, list[float]]:
    q = Queue(conn)
    got: dict[str, list[float]] = {}
    for name in ("live", "history"):
        job_id = ids[name]
        found = _ops.execute(conn, _ops.get_job(job_id))
        assert found is not None and found.id == job_id, (name, job_id)
        got[f"get {name}"] = c.timed_calls(
            lambda job_id=job_id: _ops.execute(conn, _ops.get_job(job_id)), calls)
    cold = []
    for _ in range(connects):
        with psycopg.connect(url, autocommit=True) as fresh:
            t0 = time.perf_counter()
            _ops.execute(fresh, _ops.get_job(ids["history"]))
            cold.append(time.perf_counter() - t0)
    got["get history, new connection"] = cold
    q.list_jobs(limit=50)
    got["list_jobs(limit=50)"] = c.timed_calls(lambda: q.list_jobs(limit=50), calls)
    t0 = time.perf_counter()
    rows = sum(1 for _ in itertools.islice(q.export_history(since, until), EXPORT_ROWS))
    got["export"] = [time.perf_counter() - t0]
    got["export rows"] = [float(rows)]
    return got


def explain_export_page(conn: psycopg.Connection[Any], since: datetime, until: datetime
                        ) -> dict[str, float]:
    """EXPLAIN (ANALYZE, BUFFERS) of one export page from the middle of the day, as
    `_ops.history_page` runs it: the server's time, and the time and buffers of its read of
    `jobs` (the union's live side)."""
    middle = since + (until - since) / 2
    params = {"since": since, "until": until, "queue": None, "after_at": middle,
              "after_id": -1, "limit": _ops.EXPORT_PAGE}
    query = psycopg.sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + \
        _sql.statement("history_export")
    row = conn.execute(query, params).fetchone()
    assert row is not None
    doc = row[0][0] if isinstance(row[0], list) else json.loads(row[0])[0]
    found = {"server_ms": float(doc["Execution Time"]), "planning_ms": float(
        doc["Planning Time"]), "jobs_ms": 0.0, "jobs_buffers": 0.0, "jobs_seq": 0.0}

    def walk(node: dict[str, Any]) -> None:
        if node.get("Relation Name") == "jobs":
            found["jobs_ms"] += float(node["Actual Total Time"]) * float(node["Actual Loops"])
            found["jobs_buffers"] += float(node.get("Shared Hit Blocks", 0)) + float(
                node.get("Shared Read Blocks", 0))
            found["jobs_seq"] += node["Node Type"] == "Seq Scan"
        for child in node.get("Plans", []):
            walk(child)

    walk(doc["Plan"])
    return found


def reads(conn: psycopg.Connection[Any], url: str, args: argparse.Namespace, day: date,
          gate: c.QuietGate, out: Any, figures: dict[str, Any]) -> None:
    q = Queue(conn)
    build(conn, args.jobs, day)
    move_all(q, conn)
    settle(conn)
    since, until = day_bounds(day)
    row = conn.execute(
        "SELECT (SELECT id FROM workhorse.jobs WHERE status = 'ready' ORDER BY id"
        "        OFFSET %s LIMIT 1),"
        "       (SELECT id FROM workhorse.job_history WHERE finished_at >= %s"
        "        ORDER BY finished_at, id OFFSET %s LIMIT 1)",
        (READY // 2, since, args.jobs // 2)).fetchone()
    assert row is not None and None not in row
    ids = {"live": int(row[0]), "history": int(row[1])}
    calls = 100 if args.quick else 200
    connects = 10
    results: dict[str, dict[str, list[float]]] = {}
    plans: dict[str, dict[str, float]] = {}
    jobs_heap: dict[str, int] = {}
    for label, extra in (("1 day", False), (f"{1 + SMALL_DAYS} days", True),
                         (f"{1 + SMALL_DAYS} days, jobs compacted", None)):
        if extra is None:
            # jobs as a steady state would have it: its heap sized for the live rows, not for
            # the day that was loaded into it and moved out.
            conn.execute("VACUUM FULL workhorse.jobs")
            settle(conn)
        elif extra:
            for back in range(1, SMALL_DAYS + 1):
                fill_finished(conn, SMALL_DAY_JOBS,
                              day_bounds(day - timedelta(days=back))[0] + timedelta(hours=12),
                              span=3600.0)
            moved = move_all(q, conn)["moved"]
            settle(conn)
            days = len(history_days(conn))
            out.line(f"moved {moved} jobs of {SMALL_DAYS} small days: {days} day partitions")
        pooled: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            gate.wait()
            for name, values in read_round(url, conn, ids, since, until, calls,
                                           connects).items():
                pooled.setdefault(name, []).extend(values)
        results[label] = pooled
        plans[label] = explain_export_page(conn, since, until)
        jobs_heap[label] = table_state(conn)["heap"]
    labels = list(results)
    table = c.Table(f"5. reads, client wall time, ms (p50 and p99 of {args.repeats} x {calls} "
                    f"calls; new connection: {args.repeats} x {connects}; export: median of "
                    f"{args.repeats})",
                    ["read", *itertools.chain.from_iterable(
                        (f"{lab}: p50", "p99") for lab in labels)])

    def add(label: str, cells: Callable[[str], tuple[str, str]]) -> None:
        table.add(label, *itertools.chain.from_iterable(cells(lab) for lab in labels))

    for name, label in (("get live", "get_job, a live job"),
                        ("get history", "get_job, a history job"),
                        ("get history, new connection",
                         "get_job, a history job, first statement of a new connection"),
                        ("list_jobs(limit=50)", "list_jobs(limit=50)")):
        add(label, lambda lab, name=name: (c.ms(c.percentile(results[lab][name], 50)),
                                           c.ms(c.percentile(results[lab][name], 99))))
    rows = {lab: int(results[lab]["export rows"][0]) for lab in labels}
    add(f"export of {rows[labels[0]]:,} rows, s",
        lambda lab: (f"{med(results[lab]['export']):.2f}", ""))
    add("export, rows/s", lambda lab: (c.rate(rows[lab] / med(results[lab]["export"])), ""))
    add("export page of 1,000 (EXPLAIN ANALYZE): server ms",
        lambda lab: (f"{plans[lab]['server_ms']:.1f}", ""))
    add("... of which reading jobs: ms / buffers",
        lambda lab: (f"{plans[lab]['jobs_ms']:.1f} / {plans[lab]['jobs_buffers']:,.0f}"
                     f"{' (Seq Scan)' if plans[lab]['jobs_seq'] else ''}", ""))
    add("jobs' heap", lambda lab: (mb(jobs_heap[lab]), ""))
    table.notes.append(
        "get_job reads jobs first and job_history only for an id jobs lacks; job_history is"
        " searched by id, which is not its partition key, so every day's id index is planned"
        " and probed.")
    table.notes.append(
        "\"jobs compacted\": after VACUUM FULL of jobs, whose heap otherwise keeps the size of"
        " the day that was loaded into it and moved out (an export page reads jobs' side of"
        " the union with whatever plan the line above shows).")
    out.table(table)
    figures["reads"] = {lab: {k: v for k, v in r.items()} for lab, r in results.items()}
    figures["export_page_plans"] = plans


# ---- main ----


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     conflict_handler="resolve")
    c.add_common_args(parser, "wh_bench_history")
    parser.add_argument("--database-url", default=None,
                        help=f"server (default: ${c.ENV_URL}, else {DEFAULT_URL}); a scratch "
                        "database is created on it")
    parser.add_argument("--format", choices=("rich", "plain", "json"), default=None,
                        help="tables (default: rich on a terminal, plain Markdown otherwise), "
                        "or one JSON document with the raw figures")
    parser.add_argument("--quick", action="store_true", help="a day of 100,000 jobs")
    parser.add_argument("--jobs", type=int, default=None,
                        help="finished jobs in the day (default 1,000,000; quick 100,000)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="times each timing is taken (median reported; default 3)")
    parser.add_argument("--old-cap-seconds", type=float, default=60.0,
                        help="the old way's prune stops after this long (default 60)")
    parser.add_argument("--quiet-wait", type=float, default=None,
                        help="before each measurement wait up to this many seconds for the "
                        "machine to be quiet (default 30, quick 5)")
    parser.add_argument("--only", choices=("move", "old", "reads"), default=None,
                        help="one part only (move covers sections 1-3)")
    args = parser.parse_args()
    args.jobs = args.jobs or (100_000 if args.quick else 1_000_000)
    if args.jobs < 1 or args.repeats < 1:
        parser.error("--jobs and --repeats must be at least 1")
    server = args.database_url or os.environ.get(c.ENV_URL) or DEFAULT_URL
    source = ("--database-url" if args.database_url
              else f"${c.ENV_URL}" if os.environ.get(c.ENV_URL) else "default")
    out: Any = JsonPrinter() if args.format == "json" else c.Printer(args.format)
    gate = c.QuietGate(args.quiet_wait if args.quiet_wait is not None
                       else 5.0 if args.quick else 30.0)
    figures: dict[str, Any] = {"jobs": args.jobs, "repeats": args.repeats}
    day = datetime.now(UTC).date() - timedelta(days=2)
    started = time.perf_counter()
    out.heading(f"bench_history ({'quick' if args.quick else 'full'}: a day of {args.jobs:,}"
                " jobs)")
    with c.scratch_database(server, args.db_name, args.keep_db) as url, \
            psycopg.connect(url, autocommit=True) as conn:
        import workhorse

        facts = {"database": f"{c.describe_url(url)} ({source})", "run at": c.stamp(),
                 "workhorse": str(Path(workhorse.__file__).resolve().parent),
                 "the day": f"{day.isoformat()} (UTC), {args.jobs:,} succeeded jobs",
                 "live workload": f"{READY:,} ready + {RECENT:,} succeeded in the last 30 min"}
        facts.update(c.server_facts(conn))
        out.facts("environment", facts)
        t0 = time.perf_counter()
        build(conn, args.jobs, day)
        size = table_state(conn)
        out.line(f"built the day and the live workload in {time.perf_counter() - t0:.0f} s: "
                 f"jobs {mb(size['heap'])} heap, {mb(size['total'])} with indexes and TOAST, "
                 f"{size['heap'] / (args.jobs + READY + RECENT):,.0f} bytes a row")
        figures["first_build_s"] = time.perf_counter() - t0
        _PREBUILT.append(True)
        prune_ms = math.nan
        if args.only in (None, "move"):
            move_and_prune(conn, args, day, gate, out, figures)
            prune_ms = med([p["wall"] for p in figures["prune"]["retention"]]) * 1000
        if args.only in (None, "old"):
            old_way(conn, args, day, gate, out, figures, prune_ms)
        if args.only in (None, "reads"):
            reads(conn, url, args, day, gate, out, figures)
        out.line(f"after the run: {c.machine_load(conn)}")
        out.line(gate.summary())
    out.line(f"bench_history finished in {time.perf_counter() - started:.0f} s")
    if isinstance(out, JsonPrinter):
        out.finish(figures)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
