"""Real supervisors for the back-pressure tests (test_backoff_worker.py, test_backoff_fleet.py):
`python -m workhorse worker _backoff_app:<app>` of this checkout, each its own OS process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
T = TypeVar("T")


class Supervisor:
    """One `workhorse worker` supervisor; its output goes to a file that failures print."""

    def __init__(self, database_url: str, app: str, log: Path, *args: str,
                 env: dict[str, str] | None = None) -> None:
        path = os.environ.get("PYTHONPATH")
        self.log = log
        self._out = log.open("wb")
        environment = {**os.environ, "WORKHORSE_DATABASE_URL": database_url,
                       "PYTHONUNBUFFERED": "1",
                       # The workhorse of this checkout, and `_backoff_app` (from the cwd).
                       "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO),
                       **(env or {})}
        environment.pop("WORKHORSE_DEFAULT_CONCURRENCY_LIMIT", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "worker", app, *args],
            cwd=HERE, env=environment, stdout=self._out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self._signaled = False

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(errors="replace")

    def slots(self) -> list[int]:
        return children(self.pid)

    def signal(self) -> None:
        """SIGTERM once: a second one stops the supervisor hard (or, once it has drained, kills
        it before its exit code is set)."""
        if not self._signaled and self.proc.poll() is None:
            self._signaled = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (drain), then the exit code; killed (-9) when it does not exit in time."""
        try:
            self.signal()
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                return -9
        finally:
            self._out.close()


def stop_all(supervisors: list[Supervisor]) -> list[int]:
    """Signal them all at once (they drain side by side), then collect their exit codes."""
    for supervisor in supervisors:
        supervisor.signal()
    return [supervisor.stop() for supervisor in supervisors]


def children(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is `pid`: a supervisor's slots."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return sorted(found)


def wait_for(check: Callable[[], T], timeout: float, what: str, *workers: Supervisor,
             interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- worker {w.pid} ---\n{w.output()[-6000:]}" for w in workers)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")
        time.sleep(interval)


def rows(conn: psycopg.Connection[Any], query: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(query, params).fetchall()


def scalar(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None
