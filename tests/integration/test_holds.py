"""Budget holds outside tasks (issue #41 item 3; docs/design.md "Holds", invariant 13), one
process on a real database: a hold takes units through the claim's own admission, so a hold and
a claim see each other's units; a hold waits for room, for a backoff's end and for a rate's next
start; its lease is renewed while held and its units come back when the lease ends; bad input is
refused before anything is written. The fleet (8 supervisors and 4 holders) and the kill -9 of
a holder are in test_holds_fleet.py.

Shown failing on broken variants: the claim's free units without the holds (two tests fail), and
the hold's admission without the active jobs, the rate or the backoff (four fail)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_cli import cli, ok_json

from workhorse import (
    App,
    HoldTimeoutError,
    InvalidOptionsError,
    Queue,
    _ops,
)
from workhorse._holds import Holding


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    app = App("holders", database_url=database_url)
    app.budget("api", max_active=2)

    @app.task(name="h.call", queue="calls", budget="api")
    def call(n: int) -> int:
        return n

    app.sync()
    yield app
    app.close()


def claim(queue: Queue, n: int = 5) -> list[int]:
    return [job.id for job in queue.claim("calls", n, 30)]


def enqueue(app: App, n: int) -> None:
    task = app.get_task("h.call")
    for i in range(n):
        task.delay(i)


def held_units(queue: Queue, budget: str = "api") -> int:
    return sum(h.units for h in queue.list_holds(budget))


def test_a_hold_and_a_claim_share_the_budget(app: App, queue: Queue) -> None:
    enqueue(app, 4)
    with app.budget("api").hold() as first:
        assert first.id is not None and held_units(queue) == 1
        assert len(claim(queue)) == 1  # one of the two units is held
        # The budget is full now (a job and a hold): a second hold waits and times out.
        with (pytest.raises(HoldTimeoutError, match=r"not granted within 0\.1s"),
              app.budget("api").hold(timeout=0.1)):
            pass
    assert held_units(queue) == 0
    assert len(claim(queue)) == 1  # the released unit goes to a claim


def test_a_hold_waits_for_units_a_job_frees(app: App, queue: Queue) -> None:
    enqueue(app, 2)
    jobs = queue.claim("calls", 2, 30)
    assert len(jobs) == 2

    def finish_later() -> None:
        time.sleep(0.3)
        with psycopg.connect(app.database_url, autocommit=True) as conn:
            Queue(conn).complete(jobs[0].id, jobs[0].fence, None)

    threading.Thread(target=finish_later).start()
    began = time.monotonic()
    with app.budget("api").hold(timeout=5) as holding:
        waited = time.monotonic() - began
        assert holding.id is not None
    assert 0.25 <= waited < 3


def test_async_hold(app: App, queue: Queue) -> None:
    async def take() -> tuple[int | None, int]:
        async with app.budget("api").hold(units=2, timeout=1) as holding:
            return holding.id, held_units(queue)

    hold_id, units = asyncio.run(take())
    assert hold_id is not None and units == 2
    assert held_units(queue) == 0


def test_the_lease_is_renewed_while_held(app: App, queue: Queue) -> None:
    with app.budget("api").hold(lease=1.2) as holding:
        first = holding.lease_until
        time.sleep(2.6)  # more than twice the lease: only renewals keep it
        assert not holding.lost
        assert holding.lease_until is not None and first is not None
        assert holding.lease_until > first
        assert held_units(queue) == 1


def test_a_lapsed_hold_counts_no_more(app: App, queue: Queue, conn: psycopg.Connection[Any]
                                      ) -> None:
    """A dead holder stops renewing: its units come back when the lease ends (simulated here by
    ending the lease in the database; the kill -9 is in test_holds_fleet.py)."""
    enqueue(app, 3)
    with app.budget("api").hold(units=2):
        assert claim(queue) == []
        conn.execute("UPDATE workhorse.budget_holds SET lease_until = clock_timestamp()")
        assert len(claim(queue)) == 2  # the budget's two units, free again
    _ops.execute(conn, _ops.housekeeping())
    assert conn.execute("SELECT count(*) FROM workhorse.budget_holds").fetchone() == (0,)


def test_a_lost_hold_is_marked_and_releases_nothing(app: App, queue: Queue,
                                                    conn: psycopg.Connection[Any]) -> None:
    holding = app.budget("api").hold(lease=0.3)
    with holding:
        conn.execute("UPDATE workhorse.budget_holds SET lease_until = clock_timestamp()")
        deadline = time.monotonic() + 3
        while not holding.lost and time.monotonic() < deadline:
            time.sleep(0.05)
        assert holding.lost
    assert holding.id is None


def test_a_backoff_stops_holds_until_it_ends(app: App, queue: Queue) -> None:
    enqueue(app, 1)
    [job] = queue.claim("calls", 1, 30)
    queue._run(_ops.backoff(job.id, job.fence, 0.5, "budget", None, True), transaction=True)
    began = time.monotonic()
    with app.budget("api").hold(timeout=3):
        waited = time.monotonic() - began
    assert 0.4 <= waited < 2.5


def test_a_hold_counts_one_start_against_the_rate(database_url: str, queue: Queue) -> None:
    app = App("rated", database_url=database_url)
    app.budget("rated-api", rate_limit="2/3s")
    app.sync()
    try:
        for _ in range(2):
            with app.budget("rated-api").hold(timeout=0.1):
                pass
        # The third start in the window is refused.
        with pytest.raises(HoldTimeoutError), app.budget("rated-api").hold(timeout=0.1):
            pass
        began = time.monotonic()
        with app.budget("rated-api").hold(timeout=6):  # waits for the rate's next start
            assert time.monotonic() - began > 0.3
    finally:
        app.close()


def test_an_undeclared_budget_limits_nothing(app: App, queue: Queue) -> None:
    with app.budget("nobody-declared").hold(units=50) as a, \
            app.budget("nobody-declared").hold(units=50) as b:
        assert a.id is not None and b.id is not None
        [first, second] = queue.list_holds("nobody-declared")
        assert (first.units, first.holder) == (50, "workhorse-hold:holders")
        assert first.pid > 0 and second.acquired_at >= first.acquired_at


def test_a_hold_that_can_never_fit_is_refused(app: App, queue: Queue) -> None:
    with pytest.raises(InvalidOptionsError, match="can never fit"), app.budget("api").hold(units=3):
        pass
    assert queue.list_holds() == []


@pytest.mark.parametrize("kwargs", [
    {"units": 0}, {"units": -1}, {"units": 1_000_001}, {"units": 1.5}, {"units": True},
    {"units": "1"}, {"lease": 0}, {"lease": -1}, {"lease": "2d"}, {"lease": "soon"},
    {"lease": float("nan")}, {"timeout": -1}, {"timeout": "forever"}, {"key": ""},
    {"key": "x" * 256}, {"key": "a\x00b"}, {"key": 7},
])
def test_bad_hold_arguments_are_refused_before_anything_is_written(
        app: App, queue: Queue, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptionsError):
        app.budget("api").hold(**kwargs)
    assert queue.list_holds() == []


@pytest.mark.parametrize("name", ["", "x" * 256, "a\x00b"])
def test_bad_budget_names_are_refused(app: App, name: str) -> None:
    with pytest.raises(InvalidOptionsError):
        app.budget(name).hold()


def test_a_spec_made_by_hand_cannot_hold() -> None:
    from workhorse._holds import AppBudget
    with pytest.raises(InvalidOptionsError, match="not bound to an App"):
        AppBudget("api", max_active=1).hold()


def test_the_declared_budget_is_the_one_held(app: App) -> None:
    declared = app.budget("api")
    assert declared.max_active == 2  # the declaration, bound to the app
    assert isinstance(declared.hold(), Holding)


def test_health_counts_holds_in_the_budgets_units(app: App, queue: Queue) -> None:
    enqueue(app, 3)
    with app.budget("api").hold():
        claim(queue, 1)
        [api] = [b for b in queue.health().budgets if b.name == "api"]
        assert (api.active_units, api.held_units, api.effective_max_active) == (2, 1, 2)
        assert api.blocked_ready == 2  # full: the two left ready are held back
        [reason] = [r for r in api.reasons if r.code == "budget_full"]
        assert "1 held outside tasks" in reason.detail
    with app.budget("undeclared-elsewhere").hold(units=3):
        [other] = [b for b in queue.health().budgets if b.name == "undeclared-elsewhere"]
        assert (other.namespace, other.active_units, other.held_units) == (None, 3, 3)


def test_budgets_show_lists_the_holds_with_their_holder(app: App, database_url: str) -> None:
    with app.budget("api").hold(key="acme") as held:
        shown = ok_json(database_url, "budgets", "show", "api")
        assert shown["budget"]["held_units"] == 1 and shown["budget"]["active_units"] == 1
        [hold] = shown["holds"]
        assert (hold["id"], hold["units"], hold["key"], hold["holder"]) == (
            held.id, 1, "acme", "workhorse-hold:holders")
        assert hold["pid"] > 0
        text = cli(database_url, "budgets", "show", "api")
        # (A table's cells may wrap at the runner's width: the JSON above has them whole.)
        assert text.exit_code == 0 and "holds" in text.output and "acme" in text.output
    assert ok_json(database_url, "budgets", "show", "api")["holds"] == []
    nobody = cli(database_url, "budgets", "show", "nobody")
    assert nobody.exit_code == 0 and "limits nothing" in nobody.output
    assert cli(database_url, "budgets", "show", "").exit_code == 1
