"""Durable children (issue #42, docs/design.md "Durable execution": children) on a real
PostgreSQL, through `workhorse.testing.drain`: `step.children` returns the results in the order of
its signatures whatever order the children ran in; a failed child raises TaskFailedError in the
parent, a canceled one TaskCanceledError, again on every later run (recorded); the children of a
(parent, step) are enqueued once however often the parent runs; they carry `parent_id` and may
live on another queue (which reaches feature level 2 with the parent's); canceling a suspended
parent cancels its unfinished children and theirs, and leaves the finished ones alone, and a
parent whose cancel was requested while it ran takes the children it enqueued then with it; the
last child's outcome makes the parent `ready` in its own transaction, once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _durable import Effects, assert_holds_nothing, job, scalar

from workhorse import App, JobStatus, Queue, TaskCanceledError, TaskFailedError, current_job
from workhorse.testing import drain

Q = "dc"
KIDS = "dc-kids"


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    app = App("dc", database_url=database_url)
    yield app
    app.close()


@pytest.fixture
def effects(tmp_path: Path) -> Effects:
    return Effects(tmp_path / "effects")


def children_of(conn: psycopg.Connection[Any], parent: int) -> list[tuple[int, str, str]]:
    """(id, status, parent_step) of the parent's children, in enqueue order."""
    return [(int(i), str(s), str(p)) for i, s, p in conn.execute(
        "SELECT id, status, parent_step FROM workhorse.jobs WHERE parent_id = %s ORDER BY id",
        (parent,)).fetchall()]


def test_children_results_come_in_order_and_the_parent_waits_holding_nothing(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    @app.task(name="dc.square", queue=KIDS)
    def square(n: int) -> dict[str, int]:
        effects(f"kid{n}")
        return {"n": n, "square": n * n}

    @app.task(name="dc.parent", queue=Q)
    def parent(count: int) -> Any:
        effects("parent")
        # The later children first: a higher priority runs first.
        kids = current_job().step.children(
            "squares", [square.s(n).set(priority=n) for n in range(count)])
        return [kid["square"] for kid in kids]

    handle = parent.delay(5)
    drain(app, queues=[Q])
    found = job(app, handle.id)
    assert_holds_nothing(found)
    assert (found.suspended_on, found.wake_at) == ("children", None)
    kids = children_of(conn, handle.id)
    assert [(s, p) for _, s, p in kids] == [("ready", "squares")] * 5
    for kid, _, _ in kids:
        assert job(app, kid).parent_id == handle.id
    [step] = handle.steps()
    assert (step.name, step.kind, step.pending) == ("squares", "children", True)
    # Four of five children done: the parent still waits.
    drain(app, queues=[KIDS])
    ran = [int(line[3:]) for line in effects.lines() if line[:3] == "kid"]
    assert ran == [4, 3, 2, 1, 0]  # the last first
    assert job(app, handle.id).status is JobStatus.READY
    drain(app)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == [0, 1, 4, 9, 16], done.error
    assert effects.count("parent") == 2 and done.attempts == 1
    assert handle.steps()[0].result == [{"n": n, "square": n * n} for n in range(5)]
    levels = dict(conn.execute("SELECT queue, feature_level FROM workhorse.queue_levels"
                               ).fetchall())
    assert levels.get(Q) == 2 and levels.get(KIDS) == 2, levels


def test_the_last_child_wakes_the_parent_in_its_own_transaction_once(
        app: App, database_url: str, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="dc.kid", queue=KIDS)
    def kid(n: int) -> int:
        return n

    @app.task(name="dc.parent", queue=Q, max_attempts=1)
    def parent() -> Any:
        runs.append(1)
        return current_job().step.children("kids", [kid.s(1), kid.s(2)])

    runs: list[int] = []

    handle = parent.delay()
    drain(app, queues=[Q])
    first, second = (i for i, _, _ in children_of(conn, handle.id))
    # Cancel the two children in one transaction the test holds open: the parent is ready in
    # it, and suspended to everyone else until it commits.
    with psycopg.connect(database_url) as other:
        assert Queue(other).cancel_jobs([first]) == [first]
        assert scalar(other, "SELECT status FROM workhorse.jobs WHERE id = %s",
                      handle.id) == "suspended"  # one child left
        assert Queue(other).cancel_jobs([second]) == [second]
        assert scalar(other, "SELECT status FROM workhorse.jobs WHERE id = %s",
                      handle.id) == "ready"
        assert job(app, handle.id).status is JobStatus.SUSPENDED
        other.commit()
    assert job(app, handle.id).status is JobStatus.READY
    drain(app)
    done = job(app, handle.id)
    assert done.status is JobStatus.FAILED and done.error is not None
    assert done.error["type"] == "TaskCanceledError", done.error
    assert len(runs) == 2  # woken once


def test_a_failed_child_raises_task_failed_and_a_canceled_one_task_canceled(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    @app.task(name="dc.kid", queue=KIDS, max_attempts=1)
    def kid(fail: bool) -> str:
        if fail:
            raise LookupError("no such label")
        return "ok"

    @app.task(name="dc.blocked", queue=KIDS)
    def blocked() -> Any:
        return current_job().step.wait_for("w", signal="never")

    @app.task(name="dc.parent", queue=Q)
    def parent(which: str) -> Any:
        step = current_job().step
        signatures = ([kid.s(False), kid.s(True)] if which == "fails"
                      else [kid.s(False), blocked.s()])
        try:
            step.children("kids", signatures)
        except (TaskFailedError, TaskCanceledError) as exc:
            effects(f"{which}: {type(exc).__name__}")
            step.sleep("after", "1h")  # one more run: the error is replayed
            return f"{type(exc).__name__}: {exc}"
        return "no error"

    fails, canceled = parent.delay("fails"), parent.delay("canceled")
    drain(app)  # everything but `blocked`, suspended on its signal, and the parent on it
    assert job(app, fails.id).status is JobStatus.SUSPENDED  # on its sleep now
    assert job(app, canceled.id).suspended_on == "children"
    [blocked_id] = [i for i, s, _ in children_of(conn, canceled.id) if s == "suspended"]
    assert app.cancel([blocked_id]) == [blocked_id]
    assert job(app, canceled.id).status is JobStatus.READY
    drain(app, with_scheduled=True)
    failed_child = children_of(conn, fails.id)[1][0]
    done = job(app, fails.id)
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert done.result.startswith("TaskFailedError: child job")
    assert "LookupError: no such label" in done.result and str(failed_child) in done.result
    done = job(app, canceled.id)
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert done.result.startswith("TaskCanceledError: child job")
    # Each run after the children ended raised the same error: twice each.
    assert effects.count("fails: TaskFailedError") == 2
    assert effects.count("canceled: TaskCanceledError") == 2
    kids = fails.steps()[0]
    assert kids.error is not None and kids.error["type"] == "TaskFailedError"
    assert kids.error["child"] == failed_child


def test_children_are_enqueued_once_per_parent_and_step_however_often_it_runs(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    @app.task(name="dc.kid", queue=KIDS)
    def kid(n: int) -> int:
        effects(f"kid{n}")
        return n

    @app.task(name="dc.parent", queue=Q, max_attempts=5, retry_backoff=0)
    def parent() -> Any:
        attempt = current_job().attempt
        effects("parent")
        step = current_job().step
        try:
            first = step.children("first", [kid.s(1), kid.s(2)])
        except BaseException as suspended:  # the Suspended the step raises
            if effects.count("parent") == 1:
                # A parent that runs again before its children end (here: it fails instead
                # of suspending, and is retried) finds them enqueued already.
                raise RuntimeError(f"attempt {attempt} ends here") from suspended
            raise
        if effects.count("parent") == 3:
            raise RuntimeError("a failure after the step: retried")
        second = step.child("second", kid.s(3))
        return [first, second]

    handle = parent.delay()
    report = drain(app, with_scheduled=True)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == [[1, 2], 3], done.error
    assert report.retried == 2
    kids = children_of(conn, handle.id)
    assert [p for _, _, p in kids] == ["first", "first", "second"]
    assert [effects.count(f"kid{n}") for n in (1, 2, 3)] == [1, 1, 1]
    # run 1 failed, run 2 suspended, run 3 failed after the step, run 4 suspended on the
    # second, run 5 succeeded.
    assert effects.count("parent") == 5


def test_canceling_a_suspended_parent_cancels_its_unfinished_children_and_theirs(
        app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="dc.done", queue=KIDS)
    def finished() -> str:
        return "done"

    @app.task(name="dc.waits", queue=KIDS)
    def waits() -> Any:
        return current_job().step.wait_for("w", signal="never")

    @app.task(name="dc.middle", queue=KIDS)
    def middle() -> Any:
        return current_job().step.children("grandchildren", [waits.s(), finished.s()])

    @app.task(name="dc.parent", queue=Q)
    def parent() -> Any:
        return current_job().step.children("kids", [finished.s(), middle.s(), waits.s()])

    @app.task(name="dc.other", queue=Q)
    def other() -> Any:
        return current_job().step.child("kid", waits.s())

    handle, bystander = parent.delay(), other.delay()
    drain(app)
    done_kid, middle_kid, waiting_kid = (i for i, _, _ in children_of(conn, handle.id))
    grand_waiting, grand_done = (i for i, _, _ in children_of(conn, middle_kid))
    assert job(app, middle_kid).parent_id == handle.id
    assert job(app, grand_waiting).parent_id == middle_kid
    statuses = {i: job(app, i).status for i in (handle.id, done_kid, middle_kid, waiting_kid,
                                                grand_waiting, grand_done)}
    assert statuses == {handle.id: "suspended", done_kid: "succeeded", middle_kid: "suspended",
                        waiting_kid: "suspended", grand_waiting: "suspended",
                        grand_done: "succeeded"}
    assert handle.cancel() is JobStatus.CANCELED
    statuses = {i: job(app, i).status for i in statuses}
    assert statuses == {handle.id: "canceled", done_kid: "succeeded", middle_kid: "canceled",
                        waiting_kid: "canceled", grand_waiting: "canceled",
                        grand_done: "succeeded"}
    # Another parent's child is not touched.
    [(other_kid, status, _)] = children_of(conn, bystander.id)
    assert status == "suspended" and job(app, bystander.id).status is JobStatus.SUSPENDED
    drain(app, with_scheduled=True)
    assert job(app, handle.id).status is JobStatus.CANCELED
    assert job(app, other_kid).status is JobStatus.SUSPENDED


def test_a_parent_canceled_while_it_runs_takes_the_children_it_enqueues_then(
        app: App, conn: psycopg.Connection[Any]) -> None:
    """An operator cancels the parent while its handler runs, before it reaches its children
    step: the parent ends `canceled` at its suspension, and the children it enqueued there do
    not run (docs/design.md "Children": canceling a parent cancels its children that have not
    finished)."""
    @app.task(name="dc.kid", queue=KIDS)
    def kid(n: int) -> int:
        return n

    @app.task(name="dc.parent", queue=Q)
    def parent() -> Any:
        me = current_job().id
        assert app.cancel([me]) == [me]  # an operator, on another connection
        return current_job().step.children("kids", [kid.s(1), kid.s(2)])

    handle = parent.delay()
    drain(app, queues=[Q])
    assert job(app, handle.id).status is JobStatus.CANCELED
    kids = children_of(conn, handle.id)
    assert len(kids) in (0, 2), kids
    assert all(status == "canceled" for _, status, _ in kids), kids
    drain(app)
    assert all(status == "canceled" for _, status, _ in children_of(conn, handle.id))


def test_an_async_parent_awaits_its_children_and_a_failed_one(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    """An async handler's `await step.children(...)` and `await step.child(...)`: the same
    suspension, results in order, a failed child's TaskFailedError, each child enqueued once."""
    @app.task(name="dc.double", queue=KIDS)
    async def double(n: int) -> int:
        effects(f"kid{n}")
        return n * 2

    @app.task(name="dc.broken", queue=KIDS, max_attempts=1)
    async def broken() -> None:
        raise RuntimeError("no")

    @app.task(name="dc.async_parent", queue=Q)
    async def parent() -> Any:
        effects("parent")
        step = current_job().step
        doubled = await step.children("doubles", [double.s(n) for n in (1, 2, 3)])
        try:
            await step.child("broken", broken.s())
        except TaskFailedError as exc:
            failed = str(exc)
        return {"doubled": doubled, "failed": failed}

    handle = parent.delay()
    drain(app)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert done.result["doubled"] == [2, 4, 6]
    assert "RuntimeError" in done.result["failed"]
    assert effects.count("parent") == 3  # first run, after the doubles, after the broken child
    assert sorted(line for line in effects.lines() if line.startswith("kid")) == [
        "kid1", "kid2", "kid3"]
    assert [(s, p) for _, s, p in children_of(conn, handle.id)] == [
        ("succeeded", "doubles")] * 3 + [("failed", "broken")]


@pytest.mark.parametrize("broken", [False, True], ids=["intact", "unlocked-look"])
def test_a_child_ending_while_its_parent_suspends_still_wakes_it(
        app: App, database_url: str, conn: psycopg.Connection[Any], broken: bool) -> None:
    """The race of a child's completion with its parent's suspension, both in flight: the
    completion locks the parent before it looks (whether or not any parent is suspended yet),
    so the suspension waits for it and then sees the child done: the parent is ready, never
    left suspended with every child finished. Fails when a job's end decides by an unlocked
    look at whether any parent waits (the suspension then commits first, unseen)."""
    import threading

    from workhorse import _sql

    @app.task(name="dc.racing_kid", queue=KIDS)
    def kid(n: int) -> int:
        return n

    @app.task(name="dc.racing_parent", queue=Q)
    def parent() -> Any:
        return current_job().step.child("k", kid.s(1))

    if broken:
        from _integration import install_broken

        install_broken(conn, _sql.function_name("_ended"),
                       "WHERE c.id = ANY(p_ids) AND c.parent_id IS NOT NULL)",
                       "WHERE c.status = 'suspended' AND c.suspended_on = 'children')")
    handle = parent.delay()
    drain(app, queues=[Q])  # the child is enqueued, the parent suspended
    (kid_id,) = conn.execute("SELECT id FROM workhorse.jobs WHERE parent_id = %s",
                             (handle.id,)).fetchone() or ()
    # Back to the instant between the children's enqueue and the suspension: the parent active
    # under fence 1001 with no pending step, its child active under fence 1002.
    conn.execute("DELETE FROM workhorse.job_steps WHERE job_id = %s", (handle.id,))
    conn.execute("UPDATE workhorse.jobs SET status = 'active', suspended_on = NULL, fence = 1001,"
                 " attempts = attempts + 1, lease_until = now() + interval '1 hour'"
                 " WHERE id = %s", (handle.id,))
    conn.execute("UPDATE workhorse.jobs SET status = 'active', fence = 1002, attempts = 1,"
                 " lease_until = now() + interval '1 hour', started_at = now() WHERE id = %s",
                 (kid_id,))
    complete = _sql.function_name("complete")
    suspend = _sql.function_name("suspend")
    with psycopg.connect(database_url) as completion:  # not autocommit: held open
        completion.execute(
            f"SELECT * FROM workhorse.{complete}(ARRAY[%s]::bigint[], ARRAY[1002]::bigint[],"
            " ARRAY['1']::text[], NULL, ARRAY['{}']::text[])", (kid_id,))
        suspended: list[Any] = []

        def suspend_parent() -> None:
            with psycopg.connect(database_url, autocommit=True) as other:
                suspended.append(other.execute(
                    f"SELECT workhorse.{suspend}(%s, 1001, 'k', 'child', 'children', NULL, NULL,"
                    " '{}')", (handle.id,)).fetchone())

        thread = threading.Thread(target=suspend_parent)
        thread.start()
        thread.join(0.5)
        completion.commit()
        thread.join(10)
    assert not thread.is_alive()
    assert suspended and suspended[0][0] in ("ready", "suspended")
    if broken:  # the checker can fail: the suspension committed unseen, the wake-up lost
        assert job(app, handle.id).status is JobStatus.SUSPENDED
        return
    assert job(app, handle.id).status is JobStatus.READY, suspended
    drain(app, queues=[Q])
    assert job(app, handle.id).status is JobStatus.SUCCEEDED


def test_a_child_that_expires_wakes_its_parent(app: App) -> None:
    """A child not started by its expiry ends `expired` at its queue's next claim, and that end
    wakes its parent like any other: the parent's step raises TaskCanceledError."""
    import time

    @app.task(name="dc.stale_kid", queue=KIDS, expires=0.2)
    def kid(n: int) -> int:
        return n

    @app.task(name="dc.waits_for_stale", queue=Q)
    def parent() -> str:
        try:
            current_job().step.child("k", kid.s(1))
        except TaskCanceledError:
            return "expired child"
        return "ran"

    handle = parent.delay()
    drain(app, queues=[Q])
    time.sleep(0.4)
    drain(app, queues=[KIDS])  # the claim ends the child expired
    assert job(app, handle.id).status is JobStatus.READY
    drain(app, queues=[Q])
    assert handle.get(timeout=5) == "expired child"


def test_a_child_with_a_duplicate_rule_is_refused_not_adopted(
        app: App, conn: psycopg.Connection[Any]) -> None:
    """A child is always a new job: a unique child that finds another parent's child is refused
    (InvalidOptionsError, nothing enqueued or adopted) instead of taking that job over."""
    from workhorse import Unique

    @app.task(name="dc.unique_kid", queue=KIDS, unique=Unique())
    def kid(n: int) -> int:
        return n

    @app.task(name="dc.unique_parent", queue=Q, max_attempts=3)
    def parent(tag: str) -> Any:
        return current_job().step.child("k", kid.s(1))

    first, second = parent.delay("A"), parent.delay("B")
    drain(app, queues=[Q])
    kids = conn.execute("SELECT id, parent_id FROM workhorse.jobs WHERE task = 'dc.unique_kid'"
                        ).fetchall()
    assert kids == [(kids[0][0], first.id)]  # one child, still the first parent's
    refused = job(app, second.id)
    assert refused.status is JobStatus.FAILED and refused.attempts == 1, refused
    assert refused.error is not None and "must be a new job" in refused.error["message"]
    assert job(app, first.id).status is JobStatus.SUSPENDED


def test_canceling_a_parent_while_its_child_completes_does_not_deadlock(
        app: App, database_url: str, conn: psycopg.Connection[Any]) -> None:
    """A child's completion holds its row and then locks its parent's (to wake it); a cancel of
    the parent locks the children first, the deepest first, so it waits for that completion
    instead of holding the parent it wants. (Locking parent and children together in (queue,
    id) order, as the cancel did first, deadlocked here: PostgreSQL aborted the cancel.)"""
    import threading

    from workhorse import _sql

    @app.task(name="dc.finishing_kid", queue="z-kids")  # sorts after the parent's queue
    def kid(n: int) -> int:
        return n

    @app.task(name="dc.canceled_parent", queue="a-parents")
    def parent() -> Any:
        return current_job().step.child("k", kid.s(1))

    handle = parent.delay()
    drain(app, queues=["a-parents"])
    (kid_id,) = conn.execute("SELECT id FROM workhorse.jobs WHERE parent_id = %s",
                             (handle.id,)).fetchone() or ()
    conn.execute("UPDATE workhorse.jobs SET status = 'active', fence = 2002, attempts = 1,"
                 " lease_until = now() + interval '1 hour', started_at = now() WHERE id = %s",
                 (kid_id,))
    complete = _sql.function_name("complete")
    cancel = _sql.function_name("cancel_jobs")
    outcome: dict[str, Any] = {}
    with psycopg.connect(database_url) as completion:  # not autocommit: held open
        completion.execute("SELECT 1 FROM workhorse.jobs WHERE id = %s FOR NO KEY UPDATE",
                           (kid_id,))

        def cancel_parent() -> None:
            try:
                with psycopg.connect(database_url, autocommit=True) as other:
                    outcome["cancel"] = other.execute(
                        f"SELECT workhorse.{cancel}(ARRAY[%s]::bigint[], '{{}}')",
                        (handle.id,)).fetchall()
            except psycopg.Error as exc:
                outcome["cancel"] = exc

        thread = threading.Thread(target=cancel_parent)
        thread.start()
        thread.join(0.5)
        completion.execute(
            f"SELECT * FROM workhorse.{complete}(ARRAY[%s]::bigint[], ARRAY[2002]::bigint[],"
            " ARRAY['1']::text[], NULL, ARRAY['{}']::text[])", (kid_id,))
        completion.commit()
        thread.join(10)
    assert not isinstance(outcome.get("cancel"), psycopg.Error), outcome
    assert job(app, handle.id).status is JobStatus.CANCELED
    assert job(app, kid_id).status is JobStatus.SUCCEEDED
