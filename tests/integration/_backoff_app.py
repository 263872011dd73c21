"""The apps that real workers run in the back-pressure tests (test_backoff_worker.py,
test_backoff_fleet.py). Each handler records its run in the test's database (`bo_runs`): its job,
attempt, process, wall clock and the `started_at` its claim stamped (the database's clock), in
one INSERT from the job's row while this attempt holds it.

Environment: WORKHORSE_DATABASE_URL (the worker's and the records'), BO_API_URL (the simulated
downstream of the fleet test), BO_SLEEP (seconds a fleet handler works).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import psycopg

import workhorse
from workhorse import Backoff, current_job

SCHEMA = """
CREATE TABLE bo_runs (
    job_id bigint NOT NULL, task text NOT NULL, queue text NOT NULL, ckey text,
    attempt integer NOT NULL, pid integer NOT NULL, wall double precision NOT NULL,
    started_at timestamptz, budget text, note text);
CREATE INDEX bo_runs_job ON bo_runs (job_id);
CREATE TABLE bo_arm (name text PRIMARY KEY);
-- Every backoff written, as it was written (housekeeping deletes them once they end).
CREATE TABLE bo_backoffs AS SELECT * FROM workhorse.backoffs WITH NO DATA;
CREATE FUNCTION bo_log_backoff() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bo_backoffs SELECT NEW.*;
    RETURN NEW;
END $$;
CREATE TRIGGER bo_log AFTER INSERT OR UPDATE ON workhorse.backoffs
    FOR EACH ROW EXECUTE FUNCTION bo_log_backoff();
"""

RECORD = """
INSERT INTO bo_runs (job_id, task, queue, ckey, attempt, pid, wall, started_at, budget, note)
SELECT j.id, j.task, j.queue, NULLIF(j.ckey, ''), j.attempts, %s, %s, j.started_at, j.budget, %s
FROM workhorse.jobs j WHERE j.id = %s
RETURNING (SELECT count(*) FROM bo_runs r WHERE r.job_id = %s) + 1  -- (not seeing this row)
"""
# Take the one-shot trigger `name` if the test set it: exactly one handler gets it.
DISARM = "DELETE FROM bo_arm WHERE name = %s RETURNING name"
FAST = "-c synchronous_commit=off"  # the records need no durability

_local = threading.local()
_async: dict[int, psycopg.AsyncConnection[Any]] = {}


def _conn() -> psycopg.Connection[Any]:
    current = getattr(_local, "conn", None)
    if current is None or current.closed or getattr(_local, "pid", None) != os.getpid():
        current = psycopg.connect(os.environ["WORKHORSE_DATABASE_URL"], autocommit=True,
                                  options=FAST)
        _local.conn, _local.pid = current, os.getpid()
    return current


async def _aconn() -> psycopg.AsyncConnection[Any]:
    conn = _async.get(os.getpid())
    if conn is None or conn.closed:
        conn = await psycopg.AsyncConnection.connect(
            os.environ["WORKHORSE_DATABASE_URL"], autocommit=True, options=FAST)
        _async[os.getpid()] = conn
    return conn


def record(note: str = "") -> int:
    """Record this run; returns the runs of its job so far, this one included."""
    job = current_job()
    row = _conn().execute(RECORD, (os.getpid(), time.time(), note, job.id, job.id)).fetchone()
    return int(row[0]) if row else 0


async def arecord(note: str = "") -> int:
    job = current_job()
    conn = await _aconn()
    cur = await conn.execute(RECORD, (os.getpid(), time.time(), note, job.id, job.id))
    row = await cur.fetchone()
    return int(row[0]) if row else 0


def armed(name: str) -> bool:
    return _conn().execute(DISARM, (name,)).fetchone() is not None


# ---- one worker: test_backoff_worker.py ------------------------------------------------------

worker_app = workhorse.App("bo-worker")
api = worker_app.budget("bo-api", max_active=10)
RAISE_AFTER = 1.5


@worker_app.task(queue="bo-raise")
def raise_once(token: str) -> str:
    """Its first run raises Backoff (its queue, the default scope for a job of no budget)."""
    if record() == 1:
        raise Backoff(retry_after=RAISE_AFTER)
    return token


@worker_app.task(queue="bo-ctx", concurrency_key=lambda token, key: key)
def backs_off_sync(token: str, key: str) -> str:
    """A sync handler backs its key off for 2 s and goes on to succeed."""
    record()
    current_job().backoff(2, scope="key")
    return token


@worker_app.task(queue="bo-actx", budget=api)
async def backs_off_async(token: str) -> str:
    """An async handler backs its budget off (the default scope) for 2 s and succeeds."""
    await arecord()
    current_job().backoff("2s")
    await asyncio.sleep(0)
    return token


@worker_app.task(queue="bo-ctx", concurrency_key=lambda token, key: key)
def plain_keyed(token: str, key: str) -> str:
    record()
    return token


@worker_app.task(queue="bo-actx")
async def plain_async(token: str, budget: str | None = None) -> str:
    await arecord()
    return token


@worker_app.task(queue="bo-bad")
def raises_a_scope_it_lacks(token: str) -> str:
    record()
    raise Backoff(1, scope="key")


@worker_app.task(queue="bo-bad")
def asks_for_a_scope_it_lacks(token: str) -> str:
    """current_job().backoff() with no budget to back off: refused (logged), the job succeeds."""
    record()
    current_job().backoff(1, scope="budget")
    return token


# ---- the fleets: test_backoff_fleet.py -------------------------------------------------------

fleet_app = workhorse.App("bo-fleet")
fleet_api = fleet_app.budget("api", max_active=4)
fleet_other = fleet_app.budget("other", max_active=4)
SLEEP = float(os.environ.get("BO_SLEEP", "0.05"))


@fleet_app.task(queue="bo-a", budget=fleet_api)
def call_api(n: int) -> int:
    """Calls the simulated downstream; a 429 backs the budget off for its Retry-After."""
    record()
    try:
        with urllib.request.urlopen(os.environ["BO_API_URL"], timeout=10) as reply:
            reply.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 429:
            raise Backoff(retry_after=float(exc.headers["Retry-After"])) from None
        raise
    time.sleep(SLEEP)
    return n


@fleet_app.task(queue="bo-b", budget=fleet_other)
def call_other(n: int) -> int:
    record()
    time.sleep(SLEEP)
    return n


keys_app = workhorse.App("bo-keys")


@keys_app.task(queue="bo-keys", max_active_per_key=2, concurrency_key=lambda n, key: key)
def per_key(n: int, key: str) -> int:
    """The key "hot" backs itself off once, when the test arms it."""
    record()
    if key == "hot" and armed("hot"):
        raise Backoff(retry_after=2, scope="key")
    time.sleep(SLEEP)
    return n
