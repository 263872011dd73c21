"""`depends_on` on an existing workflow (docs/design.md "Workflows"): the API edge turns the
handle into its workflow's id with no I/O, and the enqueue reads the workflow's result members
on the caller's connection, inside the caller's transaction. An async enqueue makes no blocking
call, and a workflow the caller inserted in the same, uncommitted transaction is seen."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from workhorse import (
    App,
    AsyncQueue,
    EnqueueOptions,
    JobHandle,
    JobNotFoundError,
    JobStatus,
    Queue,
    WorkflowHandle,
    chain,
    group,
)
from workhorse.handle import dependencies
from workhorse.testing import drain

QUEUES = ["wfd"]


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    app = App("wfd", database_url=database_url)

    @app.task(name="wfd.add", queue="wfd")
    def add(a: int, b: int = 0) -> int:
        return a + b

    yield app
    app.close()


@pytest.fixture
def no_reads_beside(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any read of a workflow on a connection of the app's own (a pooled one: blocking under
    async code, and outside the caller's transaction) fails the test."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a workflow was read beside the caller's connection")

    monkeypatch.setattr(app, "workflow_row", refused)
    monkeypatch.setattr(app, "workflow_jobs", refused)


def _payload(*args: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": {}}


def test_dependencies_turn_handles_into_ids_without_io() -> None:
    class Unreachable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"dependencies() called {name}")

    nowhere = Unreachable()
    found = dependencies([3, JobHandle(4, nowhere), 3, WorkflowHandle(9, nowhere),
                          WorkflowHandle(10, nowhere, ((5, 6), (6,), "one"))])
    assert [getattr(d, "workflow_id", d) for d in found] == [3, 4, 9, 6]


def test_async_queue_reads_the_workflow_on_its_own_transaction(
        app: App, database_url: str, no_reads_beside: None) -> None:
    add = app.get_task("wfd.add")

    async def go() -> tuple[WorkflowHandle, int, Any]:
        aconn = await psycopg.AsyncConnection.connect(database_url)
        try:
            # Not committed: only this transaction sees the workflow.
            parent = await chain(add.s(1, 1), add.s(1)).enqueue_async(connection=aconn)
            [child] = await AsyncQueue(aconn).enqueue_many(
                [("wfd.add", _payload(5), EnqueueOptions(queue="wfd", depends_on=[parent]))])
            job = await AsyncQueue(aconn).get_job(child)
            await aconn.commit()
        finally:
            await aconn.close()
        return parent, child, job

    parent, child, job = asyncio.run(go())
    assert job.status is JobStatus.WAITING
    assert job.depends_on == [parent.member_ids[-1]]  # the chain's last member: its result
    drain(app, QUEUES)
    assert app.handle(child).get(timeout=10) == 5


def test_sync_apply_async_reads_the_workflow_inside_the_callers_transaction(
        app: App, database_url: str, no_reads_beside: None) -> None:
    add = app.get_task("wfd.add")
    with psycopg.connect(database_url) as conn:
        parent = group(add.s(1), add.s(2)).apply_async(connection=conn)
        child = add.apply_async((7,), depends_on=[parent], connection=conn)
        job = Queue(conn).get_job(child.id)
        assert job is not None and job.status is JobStatus.WAITING
        assert sorted(job.depends_on) == sorted(parent.member_ids)
        conn.rollback()  # the caller's transaction: nothing of either is left
        assert Queue(conn).get_job(child.id) is None


def test_an_unknown_workflow_is_refused_with_nothing_written(app: App, database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        with pytest.raises(JobNotFoundError, match="no workflow 999999999"):
            Queue(conn).enqueue("wfd.add", _payload(1), EnqueueOptions(
                queue="wfd", depends_on=[WorkflowHandle(999_999_999, app)]))
        conn.rollback()
        before = conn.execute("SELECT count(*) FROM workhorse.jobs").fetchone()
        with pytest.raises(JobNotFoundError):
            app.get_task("wfd.add").apply_async(
                (1,), depends_on=[WorkflowHandle(999_999_999, app)], connection=conn)
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM workhorse.jobs").fetchone() == before
