"""One fault scenario: a private cluster, a backlog of journaled jobs, real supervisors, a fault
in the middle, then the checkers; each scenario adds a row to the fault table."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import _journal
import faults_app
import psycopg
from _cluster import PrivateCluster, query
from apps.harness import Worker

from workhorse import Queue

HERE = Path(__file__).resolve().parent
WORKER_OPTIONS = ("--slots", "2", "--concurrency", "4", "--lease", "3s",
                  "--dequeue-timeout", "2s", "--grace", "20s")


AUDIT = """
CREATE TABLE public.job_audit (
    at timestamptz NOT NULL DEFAULT clock_timestamp(), id bigint, token text,
    old_status text, new_status text, old_fence bigint, new_fence bigint, result jsonb,
    backend integer DEFAULT pg_backend_pid(),
    app text DEFAULT current_setting('application_name'));
CREATE FUNCTION public.job_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.job_audit (id, token, old_status, new_status, old_fence, new_fence, result)
    VALUES (NEW.id, NEW.payload->'args'->>0, OLD.status, NEW.status, OLD.fence, NEW.fence,
            NEW.result);
    RETURN NEW;
END $$;
CREATE TRIGGER job_audit AFTER UPDATE OF status, fence, result ON workhorse.jobs
FOR EACH ROW EXECUTE FUNCTION public.job_audit();
"""


@dataclass
class Row:
    fault: str
    jobs: int
    peak: int
    limit: int
    peak_per_key: int
    per_key_limit: int
    lost: int
    duplicate_runs: int
    stale_results: int
    recovery_s: float | None

    def line(self) -> str:
        recovery = "-" if self.recovery_s is None else f"{self.recovery_s:.2f}s"
        return (f"| {self.fault} | {self.jobs} | {self.peak}/{self.limit} "
                f"(key {self.peak_per_key}/{self.per_key_limit}) | {self.lost} | "
                f"{self.duplicate_runs} | {self.stale_results} | {recovery} |")


class Scenario:
    def __init__(self, cluster: PrivateCluster, tmp_path: Path, fault: str) -> None:
        self.cluster = cluster
        self.url = cluster.url()
        self.tmp_path = tmp_path
        self.fault = fault
        self.journal = tmp_path / "journal.log"
        self.workers: list[Worker] = []
        self.tokens: list[str] = []
        with psycopg.connect(self.url, autocommit=True) as conn:
            Queue(conn).sync_concurrency_policies(faults_app.app.name,
                                                  faults_app.app.policy_definitions())
            if os.environ.get("FAULTS_AUDIT"):  # to debug a finding: every change of a job
                conn.execute(AUDIT)

    def enqueue(self, count: int, task: Any = None) -> None:
        task = task or faults_app.work
        start = len(self.tokens)
        calls = []
        for n in range(start, start + count):
            token = f"j{n}"
            self.tokens.append(token)
            seconds = 0.02 + (n * 7 % 31) / 1000  # 20-50 ms
            calls.append(task.call((token, f"k{n % faults_app.KEYS}", seconds)))
        with psycopg.connect(self.url, autocommit=True) as conn, faults_app.app.using(conn):
            faults_app.app.enqueue_many(calls)

    def worker(self, *args: str, url: str | None = None, prefix: tuple[str, ...] = (),
               new_session: bool = False, env: dict[str, str] | None = None) -> Worker:
        worker = Worker(url or self.url, "faults_app:app", self.tmp_path /
                        f"worker{len(self.workers)}.log", *(args or WORKER_OPTIONS),
                        env={"FAULTS_JOURNAL": str(self.journal), **(env or {})}, cwd=HERE,
                        prefix=prefix, new_session=new_session)
        self.workers.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(f"--- worker {w.pid} ---\n{w.output()[-6000:]}" for w in self.workers)

    def wait_finished(self, count: int, timeout: float = 60.0) -> None:
        """Until `count` executions have returned (read from the journal: the server may be
        down)."""
        deadline = time.monotonic() + timeout
        while _journal.finished(self.journal) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.fault}: fewer than {count} executions returned "
                                     f"after {timeout}s\n{self.logs()}")
            time.sleep(0.05)

    def wait_busy(self, pids: set[int] | None = None, fresh: float = 0.005,
                  timeout: float = 20.0) -> int:
        """A pid (of `pids`) whose handler started within the last `fresh` seconds: a fault
        injected now finds it running (handlers take 20 ms or more), so that it holds capacity
        and the fault's recovery can be measured. Returns that pid."""
        def busy() -> int | None:
            now = time.monotonic()
            return next((e.pid for e in _journal.running_at(
                _journal.read(self.journal).values(), now, pids) if now - e.start <= fresh), None)
        deadline = time.monotonic() + timeout
        while (pid := busy()) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.fault}: no handler started in {pids} for "
                                     f"{timeout}s\n{self.logs()}")
            time.sleep(0.001)
        return pid

    def succeeded(self) -> int:
        return int(query(self.url, "SELECT count(*) FROM workhorse.jobs "
                         "WHERE status = 'succeeded'")[0][0])

    def wait_all_succeeded(self, timeout: float = 90.0) -> float:
        deadline = time.monotonic() + timeout
        while (done := self.succeeded()) < len(self.tokens):
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.fault}: {done}/{len(self.tokens)} succeeded after "
                                     f"{timeout}s\n{self.logs()}")
            time.sleep(0.2)
        return time.monotonic()

    def stop(self) -> list[int | None]:
        """SIGTERM to every live supervisor: the exit codes (None for one killed earlier)."""
        codes: list[int | None] = []
        for w in self.workers:
            if w.proc.returncode is not None:
                codes.append(None)
                continue
            codes.append(w.stop(30))
        return codes

    def kill_all(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                try:
                    os.killpg(w.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    w.proc.kill()
            w.kill()

    def check(
        self, limits: _journal.Limits, *, ends: dict[str, float] | None = None,
        recovery_s: float | None = None,
    ) -> tuple[Row, _journal.Overlap, _journal.Jobs]:
        executions = _journal.read(self.journal)
        rows = query(self.url, "SELECT payload->'args'->>0, status::text, result, "
                     "EXTRACT(epoch FROM finished_at)::float8 "
                     "FROM workhorse.jobs")
        found = _journal.jobs(rows, executions.values())
        if found.stale:  # say what the database holds for them
            stale = [t.split(":")[0] for t in found.stale]
            for row in query(self.url, "SELECT id, payload->'args'->>0, status::text, result, "
                             "attempts, fence, started_at, finished_at FROM workhorse.jobs "
                             "WHERE payload->'args'->>0 = ANY(%s)", stale):
                found.stale.append(f"  db: {row}")
            if os.environ.get("FAULTS_AUDIT"):
                for row in query(self.url, "SELECT * FROM public.job_audit WHERE token = ANY(%s)"
                                 " ORDER BY at", stale):
                    found.stale.append(f"  audit: {row}")
        seen = _journal.overlap(executions.values(), limits, ends=ends)
        limit, per_key = limits.changes[0][1], limits.changes[0][2]
        row = Row(self.fault, len(self.tokens), seen.peak, limit or 0, seen.peak_per_key,
                  per_key or 0, len(found.lost), sum(found.duplicates.values()),
                  len(found.stale), recovery_s)
        table = os.environ.get("FAULTS_TABLE")
        if table:
            with open(table, "a") as out:
                out.write(json.dumps(asdict(row)) + "\n")
        print(row.line())
        return row, seen, found


def limits(limit: int = faults_app.LIMIT, per_key: int = faults_app.PER_KEY) -> _journal.Limits:
    return _journal.Limits([(0.0, limit, per_key)])


def assert_sound(row: Row, seen: _journal.Overlap, found: _journal.Jobs, logs: str,
                 late_pids: frozenset[int] | set[int] = frozenset()) -> None:
    """The guarantees every fault must keep. `late_pids`: the processes that were frozen or cut
    off, which may start a job claimed before the fault after it was done elsewhere (a known
    defect: the slot starts a claim whose lease ran out in transit; its result is refused)."""
    late = [f"{e.token} run {e.run} in pid {e.pid}" for e in found.after_done
            if e.pid not in late_pids]
    assert late == [], f"executions that began after their job was done: {late}"
    assert seen.violations == [], "\n".join(seen.violations[:20])
    assert found.lost == [], found.lost[:20]
    assert found.stale == [], found.stale[:20]
    assert found.never_ran == [], found.never_ran[:20]
    assert row.peak <= row.limit and row.peak_per_key <= row.per_key_limit
