"""A suspended job holds no budget unit (issue #42's done-when, invariants 12 and 13): jobs of a
named budget of 2 units, suspended by durable sleeps and waits, count 0 in the budget's active
units and leave both units to other jobs of the budget, on another queue too; a resumed job is
admitted through the budget again, never beyond it. Measured by the claim itself
(`Queue.claim`) and by health's `active_units`; the same checks fail on a copy of the live
suspend function that keeps the job active."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from _integration import install_broken

from workhorse import App, JobStatus, Queue, _sql, current_job
from workhorse.testing import drain


def _units(queue: Queue, budget: str) -> int:
    found = [b for b in queue.health().budgets if b.name == budget]
    return found[0].active_units if found else 0


def _world(database_url: str) -> tuple[App, Any, Any]:
    app = App("durable-budget", database_url)
    gpu = app.budget("gpu", max_active=2)

    @app.task(queue="renders", budget=gpu, cost=1)
    def render(n: int) -> int:
        step = current_job().step
        step.sleep("cool", "1h")
        step.wait_for("go", signal="go")
        return n

    @app.task(queue="previews", budget=gpu)
    def preview(n: int) -> int:
        return n

    app.sync()
    return app, render, preview


def test_suspended_jobs_of_a_budget_hold_none_of_its_units(database_url: str,
                                                          conn: psycopg.Connection[Any]) -> None:
    app, render, preview = _world(database_url)
    renders = [render.delay(n) for n in range(10)]
    drain(app, timeout=30)  # each claimed through the budget, two at a time, then suspended
    queue = Queue(conn)
    assert {h.job().status for h in renders} == {JobStatus.SUSPENDED}
    assert _units(queue, "gpu") == 0
    # Both units are free for the budget's other queue: a claim there takes two, not fewer.
    for n in range(3):
        preview.delay(n)
    claimed = queue.claim("previews", 3, 30)
    assert len(claimed) == 2
    assert _units(queue, "gpu") == 2
    for job in claimed:
        queue.complete(job.id, job.fence)
    # Timers due: the renders come back through the budget, two at a time, and suspend again
    # at their wait, each of them holding nothing once more.
    drain(app, timeout=30, with_scheduled=True)
    assert {h.job().suspended_on for h in renders} == {"signal"}
    assert _units(queue, "gpu") == 0
    for handle in renders:
        app.signal(handle, "go")
    resumed = queue.claim("renders", 10, 30)
    assert len(resumed) == 2  # the budget, not the ten ready renders, decides
    assert _units(queue, "gpu") == 2


def test_the_unit_check_fails_on_a_suspension_that_keeps_the_job_active(
        database_url: str, conn: psycopg.Connection[Any]) -> None:
    """The checker can fail: a suspend that leaves the job `active` with its lease."""
    install_broken(conn, _sql.function_name("suspend"),
                   "SET status = CASE WHEN v_met THEN 'ready' ELSE 'suspended' END,\n"
                   "        suspended_on = CASE WHEN v_met THEN NULL ELSE p_reason END,\n"
                   "        wake_at = CASE WHEN v_met THEN NULL ELSE p_wake_at END,\n"
                   "        attempts = j.attempts - 1,\n        lease_until = NULL,",
                   "SET status = 'active',")
    app, render, _ = _world(database_url)
    render.delay(1)
    drain(app, timeout=10)
    with pytest.raises(AssertionError):
        assert _units(Queue(conn), "gpu") == 0
