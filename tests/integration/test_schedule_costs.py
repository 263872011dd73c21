"""A scheduled occurrence's job gets its task's cost, rate_cost and weight (docs/design.md "Fair
share and job cost", issue #26): the app resolves cost callables with the schedule's args/kwargs
when the schedule is declared, the sync stores the values on the schedule, and the firing pass (the
fire_schedules function of 0.3.0) sets them on every job it makes, raising the queue's feature level
as an enqueue with costs does. Against a real PostgreSQL, through the supervisors' own firing code
(`Scheduler.fire`).

Shown to fail on the broken variant: firing through 0.2.0's statement (the first
fire_schedules function, what a 0.2.0 supervisor runs) makes jobs of cost 1, and
`test_the_checker_fails_on_the_0_2_0_firing` asserts that the same checker then sees
(1, 1, 1)."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest
from sql_names import released_statement

from workhorse import (
    App,
    ConcurrencyPolicyDefinition,
    InvalidOptionsError,
    InvalidScheduleError,
    Queue,
    ScheduleDefinition,
    _sql,
)
from workhorse.worker.scheduler import Scheduler, schedules_banner


def rewind(conn: psycopg.Connection[Any], name: str) -> None:
    """As if the schedule's next occurrence (a 10 s grid) were 15 s ago: one pass fires it."""
    conn.execute(
        "UPDATE workhorse.schedules SET next_run_at = "
        "to_timestamp(floor(extract(epoch FROM now() - interval '15 seconds') / 10) * 10) "
        "WHERE name = %s", (name,))


def fired_costs(conn: psycopg.Connection[Any], name: str) -> set[tuple[int, int, int]]:
    rows = conn.execute(
        "SELECT cost, rate_cost, weight FROM workhorse.jobs WHERE meta->>'schedule' = %s",
        (name,)).fetchall()
    assert rows, f"schedule {name} fired no job"
    return {(int(c), int(r), int(w)) for c, r, w in rows}


def level(conn: psycopg.Connection[Any], queue: str) -> int:
    row = conn.execute("SELECT feature_level FROM workhorse.queue_levels WHERE queue = %s",
                       (queue,)).fetchone()
    return 1 if row is None else int(row[0])


def _app(database_url: str) -> App:
    app = App("gpu-app", database_url)
    app.queue("gpu", max_active=8)

    @app.periodic(every="10s", args=({"gpus": 3, "tokens": 2},), queue="gpu", weight=4,
                  name="train", cost=lambda r: r["gpus"], rate_cost=lambda r: r["tokens"])
    def train(r: dict[str, int]) -> None: ...

    @app.task(queue="gpu", cost=lambda n: n)
    def infer(n: int) -> None: ...

    app.schedule(infer, every="10s", args=(5,), name="infer-5")
    app.schedule(infer, every="10s", args=(1,), name="infer-1")
    return app


def test_a_fired_job_has_its_schedules_cost(database_url: str, conn: Any, queue: Queue) -> None:
    app = _app(database_url)
    try:
        assert (app.schedules["train"].cost, app.schedules["train"].rate_cost,
                app.schedules["train"].weight) == (3, 2, 4)
        assert app.schedules["infer-5"].cost == 5 and app.schedules["infer-1"].cost == 1
        report = app.sync()
        assert report.schedules is not None
        stored = {s.name: s for s in queue.list_schedules("gpu-app")}
        assert {n: (s.cost, s.rate_cost, s.weight) for n, s in stored.items()} == {
            "train": (3, 2, 4), "infer-5": (5, 1, 1), "infer-1": (1, 1, 1)}
        assert all(stored[n].definition == app.schedules[n] for n in stored)
        assert len(schedules_banner(app, list(stored.values()))) == 1  # no drift reported
        assert sorted(app.sync().schedules.unchanged) == ["infer-1", "infer-5", "train"]

        assert level(conn, "gpu") == 1
        for name in stored:
            rewind(conn, name)
        firing = Scheduler("gpu-app").fire(conn)
        assert len(firing.fired) >= 3
        assert fired_costs(conn, "train") == {(3, 2, 4)}
        assert fired_costs(conn, "infer-5") == {(5, 1, 1)}
        assert fired_costs(conn, "infer-1") == {(1, 1, 1)}
        assert level(conn, "gpu") == 2  # as an enqueue with costs raises it
        # The claim counts the units the jobs carry.
        claimed = queue.claim("gpu", 10, 60)
        units = sum(fired.cost for job in claimed if (fired := queue.get_job(job.id)))
        [health] = [p for p in queue.health().policies if p.queue == "gpu"]
        assert (health.active_units, health.active_jobs) == (units, len(claimed))
        assert 6 <= units <= 8 and units > len(claimed)

        # A changed cost is an update (the next occurrence fires with it).
        app.schedules["infer-5"] = dataclasses.replace(app.schedules["infer-5"], cost=2)
        assert app.sync().schedules.updated == ["infer-5"]
        changed = {s.name: s for s in queue.list_schedules("gpu-app")}["infer-5"]
        assert changed.cost == 2
    finally:
        app.close()


def test_the_checker_fails_on_the_0_2_0_firing(conn: Any, queue: Queue,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    queue.sync_schedules("a", [ScheduleDefinition("s", "tasks.tick", every="10s", queue="q",
                                                  cost=3, rate_cost=2, weight=4)])
    rewind(conn, "s")
    statement = _sql.statement
    monkeypatch.setattr(_sql, "statement", lambda name: (
        released_statement(name) if name == "fire_schedules" else statement(name)))
    assert Scheduler("a").fire(conn).fired
    assert fired_costs(conn, "s") == {(1, 1, 1)}  # what the checker above would reject
    assert level(conn, "q") == 1


def test_a_cost_the_policy_can_never_fit_is_refused_at_sync(database_url: str,
                                                           queue: Queue) -> None:
    app = App("small", database_url)
    app.queue("gpu", max_active=2)

    @app.periodic(every="10s", queue="gpu", cost=3)
    def train() -> None: ...

    try:
        with pytest.raises(InvalidOptionsError, match="can never start on queue gpu"):
            app.sync()
        assert queue.list_schedules("small") == []
        assert queue.list_concurrency_policies("small") == []  # one transaction: nothing
    finally:
        app.close()


def test_a_policy_lowered_after_the_sync_holds_the_job_and_fires_the_others(
        conn: Any, queue: Queue) -> None:
    queue.sync_concurrency_policies("a", [ConcurrencyPolicyDefinition("gpu", 8)])
    queue.sync_schedules("a", [
        ScheduleDefinition("big", "tasks.tick", every="10s", queue="gpu", cost=5),
        ScheduleDefinition("small", "tasks.tick", every="10s", queue="gpu"),
    ])
    queue.sync_concurrency_policies("a", [ConcurrencyPolicyDefinition("gpu", 4)])
    rewind(conn, "big")
    rewind(conn, "small")
    assert Scheduler("a").fire(conn).fired  # the pass does not fail on "big"
    assert fired_costs(conn, "big") == {(5, 1, 1)}
    claimed = queue.claim("gpu", 10, 60)
    assert claimed and all(queue.get_job(j.id).cost == 1 for j in claimed)  # type: ignore[union-attr]
    held = conn.execute("SELECT DISTINCT status, error->>'type' FROM workhorse.jobs "
                        "WHERE meta->>'schedule' = 'big'").fetchall()
    assert held == [("held", "CostExceedsLimitError")]


@pytest.mark.parametrize("options", [
    {"cost": 0}, {"cost": 10**7}, {"cost": True}, {"cost": "3"}, {"rate_cost": -1},
    {"weight": 0}, {"weight": 1001}, {"cost": lambda: 1 / 0}, {"cost": lambda: 2.5},
])
def test_bad_schedule_costs_raise_and_register_nothing(options: dict[str, Any]) -> None:
    app = App("bad")
    with pytest.raises(InvalidScheduleError):
        @app.periodic(every="10s", **options)
        def tick() -> None: ...
    assert app.schedules == {} and app.tasks == {}


@pytest.mark.parametrize("fields", [
    {"cost": 0}, {"cost": 1_000_001}, {"rate_cost": True}, {"weight": "3"}, {"weight": 1001},
])
def test_bad_schedule_definitions_are_typed(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidScheduleError):
        ScheduleDefinition("s", "tasks.tick", every="10s", **fields)


def test_app_schedule_resolves_the_tasks_cost_with_its_arguments() -> None:
    app = App("sched-costs")

    @app.task(cost=lambda gpus: gpus, rate_cost=lambda gpus: 10 * gpus, weight=2)
    def train(gpus: int) -> None: ...

    definition = app.schedule(train, every="1h", args=(4,), name="train-4")
    assert (definition.cost, definition.rate_cost, definition.weight) == (4, 40, 2)
    for bad in (0, 2_000_000):  # a callable's result out of bounds: typed, nothing declared
        with pytest.raises(InvalidScheduleError, match="train-bad"):
            app.schedule(train, every="1h", args=(bad,), name="train-bad")
    assert list(app.schedules) == ["train-4"]
