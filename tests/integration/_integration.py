"""Plain helpers for the database-layer tests (importable as `_integration`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
CLAIMER = HERE / "_claimer.py"
REPO = HERE.parent.parent


def count(conn: psycopg.Connection[Any], where: str = "true", *params: Any) -> int:
    row = conn.execute(f"SELECT count(*) FROM workhorse.jobs WHERE {where}", params).fetchone()
    assert row is not None
    return int(row[0])


def spawn(
    mode: str, database_url: str, *, script: Path = CLAIMER, **options: Any
) -> subprocess.Popen[str]:
    """Launch `script MODE` (by default `_claimer.py`) as its own OS process; `start` releases
    it, `collect` reads the JSON report it prints at the end."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(script), mode, database_url, json.dumps(options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def start(processes: list[subprocess.Popen[str]], delay: float = 0.05) -> float:
    """Wait until every process has connected, then start them all at one instant; returns it."""
    for process in processes:
        assert process.stdout is not None
        line = process.stdout.readline()
        if line.strip() != "ready":
            for other in processes:
                other.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"{process.args[2]} did not start: {line!r}\n{err}")
    start_at = time.time() + delay
    for process in processes:
        assert process.stdin is not None
        process.stdin.write(f"{start_at}\n")
        process.stdin.flush()
    return start_at


def collect(processes: list[subprocess.Popen[str]], timeout: float = 400) -> list[dict[str, Any]]:
    """Wait for every process; fail with its stderr if one did not exit cleanly."""
    deadline = time.monotonic() + timeout
    reports = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=max(deadline - time.monotonic(), 1))
            assert process.returncode == 0, f"{process.args[2]} exited {process.returncode}:\n{err}"
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return reports


def lock_wait(
    conn: psycopg.Connection[Any],
    pid: int,
    finished: Callable[[], bool],
    timeout: float = 30.0,
    *,
    blocked_by: int | None = None,
) -> str | None:
    """Poll `pg_stat_activity` until backend `pid` waits on a lock, and return what it waits on
    (`wait_event`, such as "advisory"); None when `finished()` says its work ended first, or
    after `timeout`. So "it waits for the lock" is seen, not inferred from its being slow.

    With `blocked_by`, only a wait that backend causes counts (`pg_blocking_pids`): a brief wait
    on something unrelated, such as a catalog lock another test's DDL holds, is not "waiting for
    the claim" (it made a sync of another queue look blocked once in CI)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT wait_event_type, wait_event, %s::integer = ANY(pg_blocking_pids(pid))"
            " FROM pg_stat_activity WHERE pid = %s",
            (blocked_by, pid),
        ).fetchone()
        if row is not None and row[0] == "Lock" and (blocked_by is None or row[2]):
            return str(row[1])
        if finished():
            return None
        time.sleep(0.01)
    return None


def install_broken(conn: psycopg.Connection[Any], function: str, old: str, new: str) -> None:
    """A deliberately broken copy of one of the schema's functions in this test's database:
    `old` (which must be in its body exactly once) replaced by `new`. A checker run on it must
    fail, or it could not have failed at all."""
    from workhorse import _sql

    text = _sql.function_files()[function]
    assert text.count(old) == 1, (function, old)
    conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                 .replace(old, new))
