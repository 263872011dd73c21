"""Soak: a mixed workload for N minutes under periodic faults, on a private PostgreSQL cluster.

    .venv/bin/python benchmarks/soak.py              # 10 minutes
    .venv/bin/python benchmarks/soak.py --minutes 2

Two supervisors (2 slots x concurrency 4, 3 s leases, each its own process group) serve two
governed queues (max_active=5, max_active_per_key=2): `work` (async, 20-50 ms sleeps) and
`blocking` (sync, 20-50 ms of CPU). A producer enqueues a steady stream. Every `--fault-every`
seconds one fault, in turn: kill -9 of a supervisor's process group (restarted), `pg_ctl restart
-m fast`, `pg_terminate_backend` of every worker connection, kill -9 of a supervisor alone
(restarted), `pg_ctl restart -m immediate`.

Every `--report-every` seconds it prints jobs/s, the backlog, the peak overlap against the limit
(from the handlers' journal, see tests/faults/faults_app.py) and the workers' RSS; at the end,
lost jobs, duplicate runs, stale results and admissions over the limit. It asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "faults"))  # the fault suite's cluster, app, checkers
sys.path.insert(0, str(ROOT / "tests" / "acceptance"))  # apps.harness.Worker

import _journal  # noqa: E402
import faults_app  # noqa: E402
import psycopg  # noqa: E402
from _cluster import PrivateCluster, query, server_bindir  # noqa: E402
from apps.harness import Worker, children  # noqa: E402

from workhorse import Queue  # noqa: E402

OPTIONS = ("--slots", "2", "--concurrency", "4", "--lease", "3s", "--dequeue-timeout", "2s",
           "--grace", "20s")
FAULTS = ("kill -9 group", "pg restart -m fast", "terminate backends", "kill -9 supervisor",
          "pg restart -m immediate")


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        bindir = server_bindir()
        if bindir is None:
            raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        self.cluster = PrivateCluster(bindir).init()
        self.cluster.start()
        self.url = self.cluster.create_database()
        self.dir = Path(tempfile.mkdtemp(prefix="wh-soak-"))
        self.journal = self.dir / "journal.log"
        self.workers: list[Worker | None] = [None, None]
        self.killed: dict[int, float] = {}  # pid -> when it was killed (its runs end then)
        self.enqueued = 0
        self.stop_producing = threading.Event()
        self.started = time.monotonic()
        with psycopg.connect(self.url, autocommit=True) as conn:
            Queue(conn).sync_concurrency_policies(faults_app.app.name,
                                                  faults_app.app.policy_definitions())

    # ---- fleet -----------------------------------------------------------------------------

    def start_worker(self, index: int) -> None:
        self.workers[index] = Worker(
            self.url, "faults_app:app", self.dir / f"worker{index}-{time.monotonic():.0f}.log",
            *OPTIONS, env={"FAULTS_JOURNAL": str(self.journal)}, cwd=ROOT / "tests" / "faults",
            new_session=True)

    def pids(self) -> list[int]:
        found = []
        for w in self.workers:
            if w is not None and w.proc.poll() is None:
                found += [w.pid, *children(w.pid)]
        return found

    def produce(self) -> None:
        """`--rate` jobs/s, 70% async, 30% sync, in batches of a tenth of a second."""
        batch = max(1, self.args.rate // 10)
        while not self.stop_producing.is_set():
            calls = []
            for _ in range(batch):
                n = self.enqueued
                self.enqueued += 1
                seconds = 0.02 + (n * 7 % 31) / 1000
                if n % 10 < 7:
                    calls.append(faults_app.work.call((f"w{n}", f"w-k{n % 4}", seconds)))
                else:
                    calls.append(faults_app.blocking.call((f"b{n}", f"b-k{n % 4}", seconds)))
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=3) as conn, \
                        faults_app.app.using(conn):
                    faults_app.app.enqueue_many(calls)
            except psycopg.Error:  # the server is restarting: enqueue them again
                self.enqueued -= len(calls)
                time.sleep(0.2)
                continue
            time.sleep(0.1)

    # ---- faults ----------------------------------------------------------------------------

    def fault(self, n: int) -> str:
        what = FAULTS[n % len(FAULTS)]
        index = n % 2
        worker = self.workers[index]
        if what.startswith("kill -9") and worker is not None:
            now = time.monotonic()
            slots = children(worker.pid)
            if what == "kill -9 group":
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
                for pid in slots:
                    self.killed[pid] = now
            else:
                worker.proc.kill()  # its slots drain and leave by themselves
            worker.proc.wait(10)
            self.start_worker(index)
        elif what == "pg restart -m fast":
            self.cluster.restart("fast")
        elif what == "pg restart -m immediate":
            self.cluster.restart("immediate")
        elif what == "terminate backends":
            query(self.url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE application_name LIKE 'workhorse%%' AND pid <> pg_backend_pid()")
        return what

    # ---- figures ---------------------------------------------------------------------------

    def succeeded(self) -> int:
        return int(query(self.url, "SELECT count(*) FROM workhorse.jobs "
                         "WHERE status = 'succeeded'")[0][0])

    def overlap(self) -> dict[str, _journal.Overlap]:
        executions = list(_journal.read(self.journal).values())
        ends = {e.run: self.killed[e.pid] for e in executions
                if e.end is None and e.pid in self.killed}
        limits = _journal.Limits([(0.0, faults_app.LIMIT, faults_app.PER_KEY)])
        return {queue: _journal.overlap([e for e in executions if e.token[0] == prefix],
                                        limits, ends=ends)
                for queue, prefix in (("work", "w"), ("blocking", "b"))}

    def report(self, last: tuple[float, int]) -> tuple[float, int]:
        now = time.monotonic()
        done = self.succeeded()
        rate = (done - last[1]) / max(now - last[0], 1e-9)
        seen = self.overlap()
        rss = [rss_kib(p) for p in self.pids()]
        peaks = " ".join(f"{q} {o.peak}/{faults_app.LIMIT} key {o.peak_per_key}/"
                         f"{faults_app.PER_KEY} over {len(o.violations)}"
                         for q, o in seen.items())
        print(f"{now - self.started:6.0f}s  {rate:6.1f} jobs/s  done {done:6d}  backlog "
              f"{self.enqueued - done:5d}  peak {peaks}  rss total {sum(rss) / 1024:.0f} MiB "
              f"max {max(rss, default=0) / 1024:.0f} MiB ({len(rss)} procs)", flush=True)
        return now, done

    # ---- run -------------------------------------------------------------------------------

    def run(self) -> None:
        args = self.args
        print(f"soak: {args.minutes:g} min, {args.rate} jobs/s, a fault every "
              f"{args.fault_every:g}s; limit {faults_app.LIMIT}, per key {faults_app.PER_KEY}; "
              f"server {self.cluster.bindir}; journal {self.journal}", flush=True)
        for index in range(2):
            self.start_worker(index)
        producer = threading.Thread(target=self.produce, daemon=True)
        producer.start()
        end = self.started + args.minutes * 60
        next_fault = self.started + args.fault_every
        next_report = self.started + args.report_every
        faults = 0
        last = (time.monotonic(), 0)
        try:
            while time.monotonic() < end:
                now = time.monotonic()
                if now >= next_fault:
                    began = time.monotonic()
                    what = self.fault(faults)
                    faults += 1
                    print(f"{began - self.started:6.0f}s  fault {faults}: {what} "
                          f"({time.monotonic() - began:.2f}s)", flush=True)
                    next_fault += args.fault_every
                if now >= next_report:
                    last = self.report(last)
                    next_report += args.report_every
                time.sleep(0.2)
            self.stop_producing.set()
            producer.join(10)
            drain_from = time.monotonic()
            while self.succeeded() < self.enqueued and time.monotonic() - drain_from < 120:
                time.sleep(0.5)
            print(f"drained the backlog in {time.monotonic() - drain_from:.1f}s", flush=True)
            codes = [w.stop(30) if w is not None else None for w in self.workers]
        finally:
            for w in self.workers:
                if w is not None and w.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(w.pid, signal.SIGKILL)
        self.summary(faults, codes)

    def summary(self, faults: int, codes: list[int | None]) -> None:
        executions = _journal.read(self.journal)
        rows = query(self.url, "SELECT payload->'args'->>0, status::text, result, "
                     "EXTRACT(epoch FROM finished_at)::float8 "
                     "FROM workhorse.jobs")
        found = _journal.jobs(rows, executions.values())
        seen = self.overlap()
        elapsed = time.monotonic() - self.started
        print(f"\n== soak summary ({elapsed / 60:.1f} min, {faults} faults) ==")
        print(f"jobs enqueued {self.enqueued}, in the database {len(rows)}, executions "
              f"{len(executions)}; {len(rows) / elapsed:.1f} jobs/s overall")
        for queue, o in seen.items():
            print(f"{queue}: peak {o.peak}/{faults_app.LIMIT}, per key {o.peak_per_key}/"
                  f"{faults_app.PER_KEY}, admissions over the limit {len(o.violations)}")
            for v in o.violations[:5]:
                print(f"  {v}")
        print(f"lost (not succeeded) {len(found.lost)}; duplicate runs "
              f"{sum(found.duplicates.values())} (of {len(found.duplicates)} jobs, after kill -9 "
              f"or an expired lease); stale results recorded {len(found.stale)}; exit codes "
              f"{codes}")
        for item in (found.lost + found.stale)[:10]:
            print(f"  {item}")

    def close(self) -> None:
        self.cluster.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=100, help="jobs enqueued per second")
    parser.add_argument("--fault-every", type=float, default=45.0, help="seconds")
    parser.add_argument("--report-every", type=float, default=30.0, help="seconds")
    soak = Soak(parser.parse_args())
    try:
        soak.run()
    finally:
        soak.close()


if __name__ == "__main__":
    main()
