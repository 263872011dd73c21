"""The app real supervisors run in test_durable_orders_fleet.py (durable execution, issue #42):
an order fulfilment with three steps, a durable sleep, a signal wait and two children.

    order(n):  step.run("reserve") -> step.run("charge") -> step.sleep("cool-off", 2 s)
               -> step.wait_for("approve", signal="approval") -> step.children("labels",
               [label(n, 1), label(n, 2)]) -> step.run("ship") -> a summary of them all
    label(n, k): step.run("print") -> its result

`do.order` is a sync handler, `do.order_async` the same in an async one (its steps awaited,
their functions async); the test enqueues both.

Every execution of a step's function appends one row to `durable_side_effects` through a
connection of its own, committed before the function returns: what the test reads is every
execution, including those whose record a kill lost. The row carries the job's fence (the run
that executed it) and a fresh token, which is also the step's result, so that a recorded result
names the execution it came from.

Failpoints (`durable_faults`, rows the test inserts): a row (target, point) makes the slot that
reaches that point for that target kill its supervisor's whole process group with SIGKILL, once
(the row is marked fired, and committed, first). A target is an order job's id (as text), or
`label-N-K` for a child. Points:

- `in:STEP`: inside the step's function, after its side effect, before it returns;
- `before-record:STEP`: the function returned, its record not written yet;
- `after-record:STEP`: the record committed, the handler not told yet (STEP may be the sleep
  `cool-off` or the children `labels`, whose records the runner writes when they are over);
- `after-signal`: the wait consumed its signal and recorded it (one transaction), not returned;
- `after-spawn`: the children were enqueued and adopted, the parent not suspended yet;
- `child-end` (a label): its step recorded, its outcome not yet (the child ends, its parent
  not woken yet).

The points inside the runner (`*-record:*`, `after-signal`, `after-spawn`) wrap the slot's
`StepStore` methods; they are installed only in a supervisor started with DURABLE_FLEET_FAULTS=1
(never in the test's own process). With DURABLE_FLEET_BROKEN=replay, a deliberately broken
runner: a `step.run` ignores its record and calls its function again (the checker must fail).

Environment: WORKHORSE_DATABASE_URL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import uuid
from typing import Any

import psycopg

from workhorse import App, current_job

QUEUE = "durable-orders"
SLEEP = 2.0  # the cool-off, seconds
LABELS = (1, 2)
RUN_STEPS = ("reserve", "charge", "ship")
ORDER_STEPS = ("reserve", "charge", "cool-off", "approve", "labels", "ship")  # handler order
TASKS = ("do.order", "do.order_async")

TABLES = """
CREATE TABLE durable_side_effects (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_no integer NOT NULL,
    job_id bigint NOT NULL,
    step text NOT NULL,
    fence bigint NOT NULL,
    token text NOT NULL UNIQUE,
    pid integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE durable_faults (
    target text NOT NULL,
    point text NOT NULL,
    fired_at timestamptz,
    pid integer,
    PRIMARY KEY (target, point)
);
"""


def setup(conn: psycopg.Connection[Any]) -> None:
    """The side-effect and failpoint tables, in the test's database."""
    conn.execute(TABLES)


# ---- the process's own connections (one per thread; a forked slot opens its own) ------------

_local = threading.local()


def _db() -> psycopg.Connection[Any]:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or getattr(_local, "pid", None) != os.getpid():
        conn = psycopg.connect(os.environ["WORKHORSE_DATABASE_URL"], autocommit=True,
                               application_name="durable-orders-effects")
        _local.conn, _local.pid = conn, os.getpid()
    return conn


def failpoint(target: object, point: str) -> None:
    """SIGKILL this supervisor's group if the test set a failpoint (target, point) not fired."""
    row = _db().execute(
        "UPDATE durable_faults SET fired_at = clock_timestamp(), pid = %s "
        "WHERE target = %s AND point = %s AND fired_at IS NULL RETURNING 1",
        (os.getpid(), str(target), point)).fetchone()
    if row is not None:
        # The whole supervisor: the test starts each in a process group of its own, and starts
        # it again (a slot alone would be restarted by its supervisor, which gives up after 8
        # quick deaths in a row).
        os.killpg(os.getpgrp(), signal.SIGKILL)


def effect(order_no: int, step: str, job_id: int, fence: int, target: str) -> dict[str, Any]:
    """A step's side effect: one committed row, then its result (the row's token)."""
    token = uuid.uuid4().hex
    _db().execute(
        "INSERT INTO durable_side_effects (order_no, job_id, step, fence, token, pid) "
        "VALUES (%s, %s, %s, %s, %s, %s)", (order_no, job_id, step, fence, token, os.getpid()))
    failpoint(target, f"in:{step}")
    return {"order": order_no, "step": step, "token": token}


async def effect_async(order_no: int, step: str, job_id: int, fence: int,
                       target: str) -> dict[str, Any]:
    return await asyncio.to_thread(effect, order_no, step, job_id, fence, target)


def _fence(step: Any) -> int:
    """The fence of the run the handler is in (the runner's; JobContext does not show it)."""
    return int(step._run.fence)


def summary(order_no: int, reserve: Any, charge: Any, approval: Any, labels: Any,
            ship: Any) -> dict[str, Any]:
    return {"order": order_no, "reserve": reserve["token"], "charge": charge["token"],
            "approval": approval, "labels": [label["token"] for label in labels],
            "ship": ship["token"]}


def build(database_url: str | None = None) -> App:
    """The app; the test builds its own copy on the test's database to enqueue and signal."""
    app = App("durable-orders", database_url=database_url)

    @app.task(name="do.label", queue=QUEUE, max_attempts=100)
    def label(order_no: int, k: int) -> dict[str, Any]:
        job = current_job()
        step = job.step
        target = f"label-{order_no}-{k}"
        printed = step.run("print", effect, order_no, f"label-{k}", job.id, _fence(step), target)
        failpoint(target, "child-end")
        return dict(printed)

    @app.task(name="do.order", queue=QUEUE, max_attempts=100)
    def order(order_no: int) -> dict[str, Any]:
        job = current_job()
        step = job.step
        fence, me = _fence(step), str(job.id)
        reserve = step.run("reserve", effect, order_no, "reserve", job.id, fence, me)
        charge = step.run("charge", effect, order_no, "charge", job.id, fence, me)
        step.sleep("cool-off", SLEEP)
        approval = step.wait_for("approve", signal="approval")
        labels = step.children("labels", [label.s(order_no, k) for k in LABELS])
        ship = step.run("ship", effect, order_no, "ship", job.id, fence, me)
        return summary(order_no, reserve, charge, approval, labels, ship)

    @app.task(name="do.order_async", queue=QUEUE, max_attempts=100)
    async def order_async(order_no: int) -> dict[str, Any]:
        job = current_job()
        step = job.step
        fence, me = _fence(step), str(job.id)
        reserve = await step.run("reserve", effect_async, order_no, "reserve", job.id, fence, me)
        charge = await step.run("charge", effect_async, order_no, "charge", job.id, fence, me)
        await step.sleep("cool-off", SLEEP)
        approval = await step.wait_for("approve", signal="approval")
        labels = await step.children("labels", [label.s(order_no, k) for k in LABELS])
        ship = await step.run("ship", effect_async, order_no, "ship", job.id, fence, me)
        return summary(order_no, reserve, charge, approval, labels, ship)

    return app


def install_failpoints() -> None:
    """The failpoints inside the runner: around the slot's StepStore's record, wait and spawn."""
    from workhorse.durable import StepStore

    record, wait_signal, spawn = StepStore.record, StepStore.wait_signal, StepStore.spawn

    def recording(self: StepStore, job_id: int, fence: int, name: str, kind: str,
                  **options: Any) -> None:
        failpoint(job_id, f"before-record:{name}")
        record(self, job_id, fence, name, kind, **options)
        failpoint(job_id, f"after-record:{name}")

    def waiting(self: StepStore, job_id: int, fence: int, name: str,
                signal_name: str) -> tuple[bool, Any]:
        found = wait_signal(self, job_id, fence, name, signal_name)
        if found[0]:
            failpoint(job_id, "after-signal")
        return found

    def spawning(self: StepStore, job_id: int, fence: int, name: str, calls: Any) -> list[int]:
        ids = spawn(self, job_id, fence, name, calls)
        failpoint(job_id, "after-spawn")
        return ids

    StepStore.record = recording
    StepStore.wait_signal = waiting
    StepStore.spawn = spawning


def break_replay() -> None:
    """The broken runner: a `step.run` never finds its record (it runs again on every resume);
    sleeps, waits and children still replay, so the orders complete."""
    from workhorse.durable import _Run

    recorded_step = _Run.recorded_step

    def forgetting(self: _Run, name: str, kind: str) -> Any:
        step = recorded_step(self, name, kind)
        return None if kind == "run" else step

    _Run.recorded_step = forgetting


if os.environ.get("DURABLE_FLEET_FAULTS") == "1":
    install_failpoints()
if os.environ.get("DURABLE_FLEET_BROKEN") == "replay":
    break_replay()

# What the supervisors run (`_durable_orders_app:app`), on the database WORKHORSE_DATABASE_URL
# names.
app = build()
