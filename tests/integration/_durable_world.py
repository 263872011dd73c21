"""Suspended jobs for the tests of what operators see of durable execution (the CLI, health,
the dashboard): one app whose handlers stop at a sleep, a wait for a signal (with and without
a timeout) and their children, drained through the real claim path (workhorse.testing.drain)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

import workhorse
from workhorse import Queue, current_job
from workhorse.testing import drain

QUEUE = "orders"
EVIL = "<script>alert('step')</script>"
# A run step's result long enough to be cut short on a terminal and on the dashboard.
LONG = "x" * 3000


@dataclass
class World:
    app: workhorse.App
    sleeper: int      # a run step ("charge", recorded), then sleeping at "cool-off" for 2 h
    waiter: int       # waiting at "approve" for signal "approval", with a timeout of a day
    patient: int      # waiting at EVIL for signal EVIL, no timeout
    parent: int       # waiting at "kids" for its two children
    kids: list[int]   # each sleeping at "nap" for an hour


def suspended_world(database_url: str) -> World:
    """Six suspended jobs in queue QUEUE: 3 sleeping, 2 waiting for a signal, 1 for its
    children. The caller closes `app`."""
    app = workhorse.App("durable-ops", database_url)

    @app.task(name="ops.sleeper", queue=QUEUE)
    def sleeper() -> Any:
        step = current_job().step
        charged = step.run("charge", lambda: {"charged": 12, "note": LONG})
        step.sleep("cool-off", "2h")
        return charged["charged"]

    @app.task(name="ops.waiter", queue=QUEUE)
    def waiter() -> Any:
        return current_job().step.wait_for("approve", signal="approval", timeout="1d")

    @app.task(name="ops.patient", queue=QUEUE)
    def patient() -> Any:
        return current_job().step.wait_for(EVIL, signal=EVIL)

    @app.task(name="ops.kid", queue=QUEUE)
    def kid(n: int) -> int:
        current_job().step.sleep("nap", "1h")
        return n

    @app.task(name="ops.parent", queue=QUEUE)
    def parent() -> Any:
        return current_job().step.children("kids", [kid.s(1), kid.s(2)])

    handles = [sleeper.delay(), waiter.delay(), patient.delay(), parent.delay()]
    drain(app, [QUEUE])
    ids = [h.id for h in handles]
    with psycopg.connect(database_url, autocommit=True) as conn:
        kids = sorted(j.id for j in Queue(conn).list_jobs(queue=QUEUE, task="ops.kid"))
        statuses = {j.id: j.status.value for j in Queue(conn).list_jobs(queue=QUEUE)}
    assert set(statuses.values()) == {"suspended"} and len(statuses) == 6, statuses
    return World(app, *ids, kids=kids)
