"""What handlers in the test apps record, in the test's own database.

`probe_counters` holds overlap counters: a handler increments its rows as it starts and
decrements them as it ends, each in its own autocommit UPDATE (the row lock serializes them), and
the row keeps its peak and how often it went over `lim`. `probe_runs` has one row per handler
execution. Each process keeps one connection (async for async handlers, one per thread for sync
ones), made after the fork.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg

SCHEMA = """
CREATE TABLE probe_counters (
    name text PRIMARY KEY, cur integer NOT NULL DEFAULT 0, peak integer NOT NULL DEFAULT 0,
    lim integer NOT NULL, violations integer NOT NULL DEFAULT 0);
CREATE TABLE probe_runs (
    token text NOT NULL, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE probe_flags (name text PRIMARY KEY);
"""

ENTER = """
UPDATE probe_counters SET cur = cur + 1, peak = greatest(peak, cur + 1),
       violations = violations + (cur + 1 > lim)::integer
WHERE name = %s
"""
LEAVE = "UPDATE probe_counters SET cur = cur - 1 WHERE name = %s"
RUN = "INSERT INTO probe_runs (token, pid) VALUES (%s, %s)"

# The probe's writes need no durability: skip the WAL flush, so they cost the workers little.
FAST = "-c synchronous_commit=off"
_async: dict[int, psycopg.AsyncConnection[Any]] = {}
_local = threading.local()


def url() -> str:
    # PROBE_DATABASE_URL: the server itself, when the worker goes through PgBouncer (which
    # refuses the `options` startup parameter that FAST needs).
    return os.environ.get("PROBE_DATABASE_URL") or os.environ["WORKHORSE_DATABASE_URL"]


async def aconn() -> psycopg.AsyncConnection[Any]:
    conn = _async.get(os.getpid())
    if conn is None or conn.closed:
        conn = await psycopg.AsyncConnection.connect(url(), autocommit=True, options=FAST)
        _async[os.getpid()] = conn
    return conn


def conn() -> psycopg.Connection[Any]:
    current = getattr(_local, "conn", None)
    if current is None or current.closed or getattr(_local, "pid", None) != os.getpid():
        current = psycopg.connect(url(), autocommit=True, options=FAST)
        _local.conn, _local.pid = current, os.getpid()
    return current


async def enter(*names: str) -> None:
    c = await aconn()
    for name in names:
        await c.execute(ENTER, (name,))


async def leave(*names: str) -> None:
    c = await aconn()
    for name in names:
        await c.execute(LEAVE, (name,))


async def ran(token: str) -> None:
    await (await aconn()).execute(RUN, (token, os.getpid()))


def ran_sync(token: str) -> int:
    """Record a run; returns how many runs this token has had, this one included."""
    c = conn()
    c.execute(RUN, (token, os.getpid()))
    row = c.execute("SELECT count(*) FROM probe_runs WHERE token = %s", (token,)).fetchone()
    return int(row[0]) if row else 0


def flag(name: str) -> bool:
    row = conn().execute("SELECT 1 FROM probe_flags WHERE name = %s", (name,)).fetchone()
    return row is not None


def setup(database: psycopg.Connection[Any], counters: dict[str, int] | None = None) -> None:
    database.execute(SCHEMA)
    for name, limit in (counters or {}).items():
        database.execute("INSERT INTO probe_counters (name, lim) VALUES (%s, %s)", (name, limit))
