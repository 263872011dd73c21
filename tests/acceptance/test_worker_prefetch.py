"""Claiming ahead (--prefetch), with real supervisors: short jobs of an ungoverned queue are
claimed ahead of a free place; what never started goes back, ready with its attempt unused, on
SIGTERM and on a pause; a governed queue is never claimed ahead."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from apps import brisk
from apps.harness import Worker, scalar, wait_for

from workhorse import Queue

pytestmark = [pytest.mark.slow, pytest.mark.fleet]

JOBS = 4000
ONE_PLACE = ["--slots", "1", "--concurrency", "1", "--dequeue-timeout", "5s"]


def _fill(conn: psycopg.Connection[Any], task: Any, n: int = JOBS) -> None:
    with brisk.app.using(conn):
        brisk.app.enqueue_many(task.call((i,)) for i in range(n))


class PeakActive:
    """Samples the queue's active jobs from the database while a worker runs."""

    def __init__(self, url: str, queue: str) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, queue), daemon=True)

    def _run(self, url: str, queue: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not self._stop.wait(0.005):
                n = scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                 "WHERE queue = %s AND status = 'active'", queue)
                self.peak = max(self.peak, n)

    def __enter__(self) -> PeakActive:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _unstarted_jobs_are_ready_with_attempts_unused(conn: psycopg.Connection[Any]) -> None:
    rows = dict(conn.execute(
        "SELECT status || ':' || attempts, count(*) FROM workhorse.jobs GROUP BY 1").fetchall())
    assert set(rows) <= {"succeeded:1", "ready:0"}, rows
    assert rows.get("ready:0", 0) > 0, rows  # the drain really cut the backlog short


def test_sigterm_gives_back_what_was_claimed_ahead(database_url, conn, tmp_path):
    _fill(conn, brisk.tick)
    worker = Worker(database_url, "apps.brisk:app", tmp_path / "w.log", *ONE_PLACE)
    with PeakActive(database_url, "brisk") as sampler:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE status = 'succeeded'") >= 300,
                 60, "300 jobs to succeed", worker)
        code = worker.stop()
    assert code == 0, worker.output()
    # One place, and yet more than one job active at once: the slot claimed ahead.
    assert sampler.peak > 1, sampler.peak
    _unstarted_jobs_are_ready_with_attempts_unused(conn)


def test_a_pause_gives_back_what_was_claimed_ahead(database_url, conn, tmp_path):
    _fill(conn, brisk.tick)
    worker = Worker(database_url, "apps.brisk:app", tmp_path / "w.log", *ONE_PLACE)
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE status = 'succeeded'") >= 300,
                 60, "300 jobs to succeed", worker)
        Queue(conn).pause("brisk")
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE status = 'active'") == 0,
                 20, "no job active after the pause", worker)
        done = scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'")
        time.sleep(0.5)
        assert scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                            "WHERE status = 'succeeded'") == done  # nothing starts any more
        _unstarted_jobs_are_ready_with_attempts_unused(conn)
    finally:
        assert worker.stop() == 0, worker.output()


def test_a_governed_queue_is_never_claimed_ahead(database_url, conn, tmp_path):
    Queue(conn).sync_concurrency_policies(brisk.app.name, brisk.app.policy_definitions())
    _fill(conn, brisk.governed_tick, 1500)
    worker = Worker(database_url, "apps.brisk:app", tmp_path / "w.log", *ONE_PLACE)
    with PeakActive(database_url, "brisk-governed") as sampler:
        try:
            wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                          "WHERE status = 'succeeded'") == 1500,
                     90, "every job to succeed", worker)
        finally:
            assert worker.stop() == 0, worker.output()
    assert sampler.peak == 1, sampler.peak  # one place: one job active, never more
