"""The app a real worker serves in test_databases_fleet.py (docs/design.md "Several databases"):
queue `dbf-a` (max_active 2) in the app's default database and `dbf-b` (max_active 3) in its
database `b`, one task on each. Each handler works DBF_WORK seconds (default 0.03) and then
records its run in a table of its own queue's database (`dbf_runs`, committed): its job,
attempt, process, process group and time.time() as it started and as it ended. A record that
cannot be written (its database restarting) is tried again until it is, within a minute.

Environment: WORKHORSE_DATABASES (`default=url,b=url`), DBF_WORK.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

from workhorse import App, current_job

QUEUE_A, QUEUE_B = "dbf-a", "dbf-b"
MAX_A, MAX_B = 2, 3
TASK_A, TASK_B = "dbf.a", "dbf.b"

SCHEMA = """
CREATE TABLE dbf_runs (
    job_id bigint NOT NULL, queue text NOT NULL, attempt integer NOT NULL,
    pid integer NOT NULL, pgid integer NOT NULL,
    start double precision NOT NULL, finish double precision NOT NULL)
"""
RECORD = ("INSERT INTO dbf_runs (job_id, queue, attempt, pid, pgid, start, finish) "
          "VALUES (%s, %s, %s, %s, %s, %s, %s)")
RECORD_FOR = 60.0  # seconds a record is tried again for while its database is away

_local = threading.local()


def _connection(url: str) -> psycopg.Connection[Any]:
    """This thread's connection to `url` (one a database, per process and thread)."""
    cached: dict[str, psycopg.Connection[Any]] = getattr(_local, "conns", {})
    if getattr(_local, "pid", None) != os.getpid():
        cached = {}
        _local.pid = os.getpid()
    _local.conns = cached
    conn = cached.get(url)
    if conn is None or conn.closed or conn.broken:
        conn = cached[url] = psycopg.connect(url, autocommit=True, connect_timeout=3)
    return conn


def record(app: App, database: str, start: float, finish: float) -> None:
    job = current_job()
    values = (job.id, job.queue, job.attempt, os.getpid(), os.getpgid(0), start, finish)
    url = app.database_url_of(database)
    deadline = time.monotonic() + RECORD_FOR
    while True:
        try:
            _connection(url).execute(RECORD, values)
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def fleet_app(databases: dict[str, str] | None = None) -> App:
    """The app; the test builds its own copy over the two databases to sync and enqueue."""
    app = App("dbfleet", databases=databases)
    a = app.queue(QUEUE_A, max_active=MAX_A)
    b = app.queue(QUEUE_B, max_active=MAX_B, database="b")
    work = float(os.environ.get("DBF_WORK", "0.03"))

    @app.task(name=TASK_A, queue=a, max_attempts=1)
    def on_a(n: int) -> int:
        start = time.time()
        time.sleep(work)
        record(app, "default", start, time.time())
        return n

    @app.task(name=TASK_B, queue=b, max_attempts=1)
    def on_b(n: int) -> int:
        start = time.time()
        time.sleep(work)
        record(app, "b", start, time.time())
        return n

    return app


# What the worker serves (`_databases_fleet_app:app`), on the databases WORKHORSE_DATABASES names.
app = fleet_app()
