"""Start and watch real `workhorse worker` supervisors (`python -m workhorse worker ...`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent.parent  # tests/acceptance: `apps.*` imports from here
T = TypeVar("T")


class Worker:
    """One supervisor process; its output goes to a file that failures print."""

    def __init__(self, database_url: str, app: str, log: Path, *args: str,
                 env: dict[str, str] | None = None, cwd: Path = HERE,
                 prefix: Sequence[str] = (), new_session: bool = False) -> None:
        """`prefix` runs the worker under another command (`ip netns exec NS`); with
        `new_session` it leads its own process group (so a test can kill -9 the group)."""
        self.log = log
        environment = {**os.environ, "WORKHORSE_DATABASE_URL": database_url,
                       "PYTHONUNBUFFERED": "1", **(env or {})}
        environment.pop("WORKHORSE_DEFAULT_CONCURRENCY_LIMIT", None)
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "workhorse", "worker", app, *args],
            cwd=cwd, env=environment, stdout=self._out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=new_session,
        )
        self.pid = self.proc.pid

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(errors="replace")

    def slots(self) -> list[int]:
        return children(self.pid)

    def wait_for_slots(self, count: int, timeout: float = 120.0) -> list[int]:
        # Generous: a supervisor on a machine busy with other work took more than 20 s to fork
        # its first slot. What this catches is a slot that never comes.
        return wait_for(lambda: (s := self.slots()) and len(s) == count and s,
                        timeout, f"{count} slots", self)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._out.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._out.close()


def children(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is `pid`."""
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


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def wait_for(check: Callable[[], T], timeout: float, what: str,
             *workers: Worker, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- worker {w.pid} ---\n{w.output()}" for w in workers)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")
        time.sleep(interval)


def scalar(conn: Any, query: str, *params: Any) -> Any:
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None
