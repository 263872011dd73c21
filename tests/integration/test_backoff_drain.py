"""Back-pressure under `workhorse.testing.drain()` (docs/budgets.md "Back-pressure": drain waits
out the backoff, as workers do): a handler that raises Backoff of its queue, its key or its budget
runs again once the backoff ends, with its attempt given back, and the drain returns only when
the work is done; a backoff that holds nothing back (`current_job().backoff()` of a job whose
scope has no work left) does not keep the drain waiting."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from workhorse import App, Backoff, BudgetDefinition, Queue, current_job
from workhorse.testing import DrainReport, drain

RETRY_AFTER = 0.6


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    app = App("bo-drain", database_url=database_url)
    yield app
    app.close()


@pytest.mark.parametrize("scope", ["queue", "key", "budget"])
def test_drain_waits_out_a_backoff_of_each_scope(app: App, queue: Queue, scope: str) -> None:
    queue.sync_budgets(app.name, [BudgetDefinition("api", max_active=5)])
    runs: list[int] = []

    @app.task(queue="bo-drain", concurrency_key=lambda n: "hot", budget="api")
    def call(n: int) -> int:
        runs.append(n)
        if len(runs) == 1:
            raise Backoff(RETRY_AFTER, scope=scope)
        return n

    handle = call.delay(1)
    began = time.monotonic()
    assert drain(app, timeout=30) == DrainReport(succeeded=1)
    assert time.monotonic() - began >= RETRY_AFTER * 0.9
    job = handle.job()
    assert job is not None and job.attempts == 1 and runs == [1, 1]


def test_a_backoff_that_holds_nothing_back_does_not_keep_drain_waiting(
        app: App, queue: Queue) -> None:
    @app.task(queue="bo-drain", concurrency_key=lambda n: f"k{n}")
    def tell(n: int) -> int:
        current_job().backoff(60, scope="key")  # its key has no other job
        return n

    for n in range(3):
        tell.delay(n)
    began = time.monotonic()
    assert drain(app, timeout=30) == DrainReport(succeeded=3)
    assert time.monotonic() - began < 10
    assert {(b.scope, b.key) for b in queue.backoffs()} == {("key", "k0"), ("key", "k1"),
                                                            ("key", "k2")}
