"""Durable jobs and the rules that outlive a run (issue #42; docs/design.md "Durable
execution", "Children", "Job keys"): a child outlives its retention while its parent has not
finished (else the parent, resuming, would enqueue it again); a unique job stays unique while it
is suspended; a signal makes its job keep it until both are pruned together."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from workhorse import App, JobStatus, Queue, Unique, current_job
from workhorse.testing import drain


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    app = App("dr", database_url=database_url)
    yield app
    app.close()


def test_a_child_is_not_pruned_while_its_parent_has_not_finished(
        app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="dr.kid", queue="dr-kids")
    def kid(n: int) -> int:
        return n

    @app.task(name="dr.parent", queue="dr")
    def parent() -> Any:
        step = current_job().step
        first = step.child("first", kid.s(1))
        step.sleep("pause", "1h")
        return first

    handle = parent.delay()
    drain(app, queues=["dr"])
    drain(app, queues=["dr-kids"])
    drain(app, queues=["dr"])  # the child's result is recorded; the parent sleeps
    assert handle.job().status is JobStatus.SUSPENDED
    conn.execute("UPDATE workhorse.jobs SET expires_at = now() - interval '1 second'"
                 " WHERE parent_id = %s", (handle.id,))
    q = Queue(conn)
    q.prune_jobs()
    assert conn.execute("SELECT count(*) FROM workhorse.jobs WHERE parent_id = %s",
                        (handle.id,)).fetchone() == (1,)  # kept: its parent has not finished
    drain(app, queues=["dr"], with_scheduled=True)
    assert handle.get(timeout=5) == 1
    q.prune_jobs()
    assert conn.execute("SELECT count(*) FROM workhorse.jobs WHERE parent_id = %s",
                        (handle.id,)).fetchone() == (0,)  # now it goes


def test_a_unique_job_stays_unique_while_it_is_suspended(app: App) -> None:
    @app.task(name="dr.sync_user", queue="dr", unique=Unique())
    def sync_user(user: int) -> int:
        current_job().step.sleep("settle", "1h")
        return user

    first = sync_user.delay(7)
    drain(app, queues=["dr"])
    assert first.job().status is JobStatus.SUSPENDED
    again = sync_user.delay(7)
    assert again.duplicate and again.id == first.id


def test_a_signal_keeps_its_job_in_the_live_table_and_goes_with_it(
        app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="dr.plain", queue="dr")
    def plain() -> int:
        return 1

    handle = plain.delay()
    app.signal(handle, "late", {"n": 1})  # never waited for
    drain(app, queues=["dr"])
    q = Queue(conn)
    assert q.move_to_history(after=0) == 0  # durable: it stays where its signal is
    conn.execute("UPDATE workhorse.jobs SET expires_at = now() - interval '1 second'"
                 " WHERE id = %s", (handle.id,))
    q.prune_jobs()
    assert conn.execute("SELECT count(*) FROM workhorse.job_signals").fetchone() == (0,)
