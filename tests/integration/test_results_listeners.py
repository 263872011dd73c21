"""Results notices go only to registered waiters (issue #40): an outcome sends its results
NOTIFY only while a session registered by `listen_results` is alive, since every NOTIFY costs its
commit PostgreSQL's notification lock and wakes every listening session of the database (each
supervisor's wake-up listener). Real sessions on a real server; a bare LISTEN, which registers
nothing, is the observer, so that it sees what an outcome sent and nothing else."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from workhorse import App, EnqueueOptions, Queue, _ops, _results, _sql

CHANNEL = "workhorse_results"


def _observer(database_url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(database_url, autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")
    return conn


def _heard(observer: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in observer.notifies(timeout=0.3, stop_after=20)]


def _end_one(queue: Queue) -> int:
    job_id = queue.enqueue("t", {"args": [], "kwargs": {}}, EnqueueOptions(queue="r"))
    [claimed] = queue.claim("r", 1, 30)
    queue.complete(claimed.id, claimed.fence, None)
    return job_id


def _registered(queue: Queue) -> set[int]:
    return {row[0] for row in queue.conn.execute(
        "SELECT backend_pid FROM workhorse.result_listeners").fetchall()}


@pytest.mark.parametrize("registered", [False, True])
def test_an_outcome_notifies_only_while_a_waiter_is_registered(
        database_url: str, queue: Queue, registered: bool) -> None:
    """With no registered waiter an ending job sends no results notice; with one it does (so the
    observer can tell the two apart)."""
    with _observer(database_url) as observer, \
            psycopg.connect(database_url, autocommit=True) as waiter:
        if registered:
            _ops.execute(waiter, _ops.listen_results())
            assert waiter.info.backend_pid in _registered(queue)
        _heard(observer)
        job_id = _end_one(queue)
        heard = _heard(observer)
        if registered:
            assert str(job_id) in ",".join(heard).split(",")
        else:
            assert heard == []


def test_registrations_of_sessions_that_are_gone_are_dropped(
        database_url: str, queue: Queue) -> None:
    """A waiter's registration outlives its session until the next registration or housekeeping
    drops it: then outcomes stop sending notices nobody hears."""
    with psycopg.connect(database_url, autocommit=True) as gone:
        _ops.execute(gone, _ops.listen_results())
        gone_pid = gone.info.backend_pid
    deadline = time.monotonic() + 10
    while queue.conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                             (gone_pid,)).fetchone() is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert gone_pid in _registered(queue)
    _ops.execute(queue.conn, _ops.housekeeping())
    assert gone_pid not in _registered(queue)
    with psycopg.connect(database_url, autocommit=True) as live:
        _ops.execute(live, _ops.listen_results())
        with psycopg.connect(database_url, autocommit=True) as again:
            _ops.execute(again, _ops.listen_results())
        assert live.info.backend_pid in _registered(queue)


def test_a_waiting_get_registers_and_is_woken(database_url: str, queue: Queue) -> None:
    """JobHandle.get's waiter registers its listening session (so outcomes notify it), and a
    job's end returns the waiting get."""
    app = App("listeners", database_url=database_url)
    try:
        job_id = queue.enqueue("t", {"args": [], "kwargs": {}}, EnqueueOptions(queue="r"))
        outcome: dict[str, Any] = {}
        getting = threading.Thread(
            target=lambda: outcome.update(result=app.handle(job_id).get(timeout=20)))
        getting.start()
        waiter = _results.waiter(database_url)
        deadline = time.monotonic() + 10
        while waiter.listening is not True:
            assert time.monotonic() < deadline, "the results thread never started listening"
            time.sleep(0.02)
        assert _registered(queue), "the results waiter did not register its session"
        [claimed] = queue.claim("r", 1, 30)
        queue.complete(claimed.id, claimed.fence, 7)
        ended = time.monotonic()
        getting.join(20)
        assert outcome == {"result": 7}
        assert time.monotonic() - ended < _results.POLL_INTERVAL + 1.0
    finally:
        app.close()


def test_the_statement_sends_the_live_listen() -> None:
    assert _sql.function_name("listen_results") in _sql.statement("listen_results").as_string()
