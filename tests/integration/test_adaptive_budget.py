"""An adaptive budget (issue #41 item 1, docs/design.md "Back-pressure"): `app.budget(name,
max_active=N, adaptive=True)`. A Backoff of the budget halves its effective max_active (at least
1) once per backoff; after a quiet `retry_after` past the backoff's end it grows by one unit per
further `retry_after`, back to N; claims and holds both admit within the effective limit;
clearing the backoff restores N at once; housekeeping keeps the row until the budget is back.
On a real database, with clocks short enough to watch (retry_after 0.5 s)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from workhorse import App, HoldTimeoutError, InvalidPolicyError, Queue, _ops, _sql

QUIET = 0.5


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    app = App("aimd", database_url=database_url)
    app.budget("api", max_active=8, adaptive=True)

    @app.task(name="a.call", queue="calls", budget="api")
    def call(n: int) -> int:
        return n

    app.sync()
    for i in range(60):
        call.delay(i)
    yield app
    app.close()


def running(queue: Queue) -> list[Any]:
    return list(queue.conn.execute(
        "SELECT id, fence FROM workhorse.jobs WHERE status = 'active'").fetchall())


def finish_all(queue: Queue) -> None:
    for job_id, fence in running(queue):
        queue.complete(job_id, fence, None)


def admitted_now(queue: Queue) -> int:
    """Claims as many as the budget lets start now, then finishes them: the effective limit."""
    finish_all(queue)
    took = len(queue.claim("calls", 50, 30))
    finish_all(queue)
    return took


def back_off(queue: Queue, seconds: float = QUIET) -> None:
    [job] = queue.claim("calls", 1, 30)
    queue._run(_ops.backoff(job.id, job.fence, seconds, None, None, True), transaction=True)


def wait_until_over(queue: Queue) -> float:
    """Sleeps past the backoff's end; returns the seconds since it ended (database clock)."""
    [until] = queue.conn.execute("SELECT until FROM workhorse.backoffs").fetchone() or [None]
    while queue.backoffs():
        time.sleep(0.02)
    [(since,)] = queue.conn.execute(
        "SELECT EXTRACT(epoch FROM clock_timestamp() - %s)::float8", (until,)).fetchall()
    return float(since)


def test_a_backoff_halves_the_effective_limit_once_and_it_grows_back(
        app: App, queue: Queue, conn: psycopg.Connection[Any]) -> None:
    assert admitted_now(queue) == 8
    back_off(queue)
    back_off_again = queue.conn.execute("SELECT count(*) FROM workhorse.backoffs").fetchone()
    assert back_off_again == (1,)
    assert queue.claim("calls", 50, 30) == []  # backed off: nothing starts
    [(until,)] = conn.execute("SELECT until FROM workhorse.backoffs").fetchall()
    wait_until_over(queue)

    def expected(since: float) -> int:  # halved to 4, one back per quiet period past the end
        return min(8, 4 + max(0, math.floor(since / QUIET)))

    def since_end() -> float:
        [(since,)] = conn.execute(
            "SELECT EXTRACT(epoch FROM clock_timestamp() - %s)::float8", (until,)).fetchall()
        return float(since)

    seen = []
    for pause in (0.0, QUIET * 1.2, QUIET * 3.2, QUIET * 2):
        time.sleep(pause)
        finish_all(queue)
        # The claim reads the clock between these two readings: a slow machine moves both.
        before = since_end()
        took = len(queue.claim("calls", 50, 30))
        after = since_end()
        assert expected(before) <= took <= expected(after), (before, took, after)
        seen.append(took)
    assert seen[0] < 8 and seen[-1] == 8  # halved at first, back at the limit, never above
    finish_all(queue)
    _ops.execute(conn, _ops.housekeeping())
    assert conn.execute("SELECT count(*) FROM workhorse.backoffs").fetchone() == (0,)


def test_a_second_backoff_while_one_is_in_force_does_not_halve_again(
        app: App, queue: Queue) -> None:
    first, second = queue.claim("calls", 2, 30)
    for job in (first, second):  # a burst of 429s is one signal
        queue._run(_ops.backoff(job.id, job.fence, 1.0, None, None, True), transaction=True)
    wait_until_over(queue)
    assert admitted_now(queue) == 4
    back_off(queue, QUIET)  # a new backoff after the first ended halves again
    wait_until_over(queue)
    assert admitted_now(queue) == 2


def test_the_halving_floor_is_one(app: App, queue: Queue) -> None:
    for expected in (4, 2, 1, 1):
        back_off(queue, 1.0)
        wait_until_over(queue)
        assert admitted_now(queue) == expected


def test_housekeeping_keeps_a_recovering_budgets_row(app: App, queue: Queue,
                                                     conn: psycopg.Connection[Any]) -> None:
    back_off(queue, 1.0)
    wait_until_over(queue)
    _ops.execute(conn, _ops.housekeeping())
    assert conn.execute("SELECT adaptive_max FROM workhorse.backoffs").fetchone() == (4,)
    assert admitted_now(queue) == 4


def test_clearing_the_backoff_restores_the_limit_at_once(app: App, queue: Queue) -> None:
    back_off(queue, 1.0)
    wait_until_over(queue)
    assert admitted_now(queue) == 4
    queue.clear_budget_backoff("api")
    assert admitted_now(queue) == 8


def test_holds_count_within_the_effective_limit(app: App, queue: Queue) -> None:
    back_off(queue, 1.0)
    wait_until_over(queue)
    finish_all(queue)
    with app.budget("api").hold(units=4, timeout=1):
        with pytest.raises(HoldTimeoutError), app.budget("api").hold(timeout=0.1):
            pass
        assert queue.claim("calls", 50, 30) == []


def test_a_budget_that_is_not_adaptive_keeps_its_limit(database_url: str, queue: Queue) -> None:
    app = App("plain", database_url=database_url)
    app.budget("db", max_active=6)

    @app.task(name="p.q", queue="dbq", budget="db")
    def q(n: int) -> int:
        return n

    app.sync()
    try:
        for i in range(20):
            q.delay(i)
        [job] = queue.claim("dbq", 1, 30)
        queue._run(_ops.backoff(job.id, job.fence, 0.2, None, None, True), transaction=True)
        time.sleep(0.3)
        assert len(queue.claim("dbq", 50, 30)) == 6
    finally:
        app.close()


def test_adaptive_is_declared_synced_and_listed(app: App, queue: Queue) -> None:
    [budget] = queue.list_budgets("aimd")
    assert (budget.max_active, budget.adaptive) == (8, True)
    assert budget.definition.adaptive
    other = App("aimd", database_url=app.database_url)
    other.budget("api", max_active=8)
    assert other.sync().budgets.updated == ["api"]  # adaptive off is a change
    [budget] = queue.list_budgets("aimd")
    assert not budget.adaptive
    other.close()


@pytest.mark.parametrize("kwargs", [
    {"adaptive": True}, {"adaptive": True, "rate_limit": "5/s"}, {"adaptive": 1},
    {"adaptive": "yes", "max_active": 3},
])
def test_bad_adaptive_declarations_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidPolicyError):
        App("bad").budget("api", **kwargs)


def test_declaring_it_twice_with_and_without_adaptive_is_refused() -> None:
    app = App("twice")
    app.budget("api", max_active=4, adaptive=True)
    with pytest.raises(InvalidPolicyError, match="adaptive"):
        app.budget("api", max_active=4)


def test_the_halving_check_fails_on_a_claim_that_ignores_it(app: App, queue: Queue) -> None:
    """The checker above, against an effective limit that is always the declared one."""
    name = _sql.function_name("_adaptive_max")
    queue.conn.execute(f"""
        CREATE OR REPLACE FUNCTION workhorse.{name}(
            p_max integer, p_halved integer, p_until timestamptz, p_quiet double precision,
            p_now timestamptz) RETURNS integer
        LANGUAGE sql IMMUTABLE AS $$ SELECT p_max $$""")
    back_off(queue, 0.2)
    wait_until_over(queue)
    assert admitted_now(queue) == 8  # not halved: the first test's check would fail


def test_health_reports_the_effective_limit(app: App, queue: Queue) -> None:
    back_off(queue, 1.0)
    wait_until_over(queue)
    [api] = [b for b in queue.health().budgets if b.name == "api"]
    assert (api.max_active, api.effective_max_active) == (8, 4)
    queue.claim("calls", 50, 30)
    [api] = [b for b in queue.health().budgets if b.name == "api"]
    assert api.active_units == 4 and api.blocked_ready > 0
    [reason] = [r for r in api.reasons if r.code == "budget_full"]
    assert "max_active=4, halved from 8" in reason.detail
