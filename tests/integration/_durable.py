"""Plain helpers of the durable-execution tests (test_durable*.py; importable as `_durable`)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from workhorse import App, JobStatus
from workhorse.types import Job


class Effects:
    """Side effects that must happen once: one line per call in a file (what a real effect
    outside the database, a charge or a mail, leaves behind)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def __call__(self, label: str, value: Any = None) -> Any:
        with self.path.open("a") as out:
            out.write(f"{label}\n")
        return value

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines()

    def count(self, label: str | None = None) -> int:
        lines = self.lines()
        return len(lines) if label is None else lines.count(label)


def job(app: App, job_id: int) -> Job:
    found = app.get_job(job_id)
    assert found is not None
    return found


def scalar(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params or None).fetchone()
    return None if row is None else row[0]


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    value = scalar(conn, "SELECT clock_timestamp()")
    assert isinstance(value, datetime)
    return value


def assert_holds_nothing(found: Job) -> None:
    """A suspended job: no lease, its attempt given back (invariant 12)."""
    assert found.status is JobStatus.SUSPENDED, found.status
    assert found.lease_until is None, found.lease_until
    assert found.attempts == 0, found.attempts
