"""Durable execution (issue #42, docs/design.md "Durable execution", invariant 12) on a real
PostgreSQL, through `workhorse.testing.drain` (the worker's claim, executor, step store and
recorder, in this process): steps, sleeps, signals, retention and feature levels. Children are in
test_durable_children.py, a real worker fleet against invariant 12 in test_durable_fleet.py.

- `step.run`: a side effect (a line in a file) runs once per job and name across every run of the
  job: a resume after a suspension, a retry after a failure; sync and async handlers; the value a
  run sees is the JSON round trip of what the function returned, also in the run that called it.
  A step that raises records nothing, and the task's retry rules apply to the job; `retry=` retries
  inside the step; a name used twice in one run, a result that is not JSON, and a step recorded as
  one kind then called as another raise typed errors.
- `step.sleep`: the job is `suspended` on `sleep` with `wake_at`, holding no lease and no attempt;
  a drain before the time does not run it, after it does; `drain(with_scheduled=True)` makes it due
  now (a wait's timeout it leaves alone); an aware datetime is kept to the microsecond, a naive one
  raises InvalidOptionsError.
- signals: one sent before the wait is taken by it with no suspension; one sent while the job is
  suspended makes it `ready` in the sender's transaction (another connection sees `suspended` until
  the commit); a keyed repeat returns False and is never taken; two waits on one signal name take
  two signals, oldest first; a finished or missing job, or bad input, raises and writes nothing; a
  wait with a timeout suspends with `wake_at`, raises SignalTimeoutError after it, and raises it
  again on a later run (recorded), even when the signal has come since.
- retention: `prune_jobs` takes a durable job's steps and signals with it; `move_to_history` leaves
  durable jobs in `jobs`.
- feature levels: a queue whose job records a step, or suspends, is at level 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _durable import Effects, assert_holds_nothing, db_now, job, scalar

from workhorse import (
    App,
    InvalidOptionsError,
    JobStatus,
    PayloadError,
    Queue,
    SignalTimeoutError,
    _ops,
    current_job,
)
from workhorse.retry import RetryPolicy
from workhorse.testing import drain

Q = "du"


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    app = App("du", database_url=database_url)
    yield app
    app.close()


@pytest.fixture
def effects(tmp_path: Path) -> Effects:
    return Effects(tmp_path / "effects")


def durable_rows(conn: psycopg.Connection[Any], job_id: int) -> tuple[int, int]:
    """(steps, signals) rows of the job."""
    return (scalar(conn, "SELECT count(*) FROM workhorse.job_steps WHERE job_id = %s", job_id),
            scalar(conn, "SELECT count(*) FROM workhorse.job_signals WHERE job_id = %s", job_id))


# The value the step's function returns, and what every run must see instead: its JSON round
# trip (a tuple is a list; the first run too sees the recorded value, not the object).
RETURNED = {"items": (1, 2), "amount": 12.5, "note": "charged"}
ROUND_TRIP = json.loads(json.dumps(RETURNED))


# ---- 1. step.run ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_step_runs_once_across_a_suspension_and_its_resume(
        app: App, effects: Effects, kind: str) -> None:
    seen: list[Any] = []

    def charge(n: int) -> Any:
        return effects("charge", dict(RETURNED, n=n))

    if kind == "sync":
        @app.task(name="du.once", queue=Q)
        def once(n: int) -> Any:
            step = current_job().step
            value = step.run("charge", charge, n)
            seen.append(value)
            effects("run")
            return [value, step.wait_for("go", signal="go")]
    else:
        async def charge_async(n: int) -> Any:
            await asyncio.sleep(0)
            return charge(n)

        @app.task(name="du.once", queue=Q)
        async def once(n: int) -> Any:
            step = current_job().step
            value = await step.run("charge", charge_async, n)
            seen.append(value)
            effects("run")
            return [value, await step.wait_for("go", signal="go")]

    handle = once.delay(7)
    drain(app)
    assert_holds_nothing(job(app, handle.id))
    assert job(app, handle.id).suspended_on == "signal"
    assert app.signal(handle, "go", "ok") is True
    drain(app)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED, done.error
    expected = dict(ROUND_TRIP, n=7)
    assert done.result == [expected, "ok"]
    assert effects.count("run") == 2 and effects.count("charge") == 1
    # Both runs saw the round trip, the first one too (it is what the second one replays).
    assert seen == [expected, expected] and isinstance(seen[0]["items"], list)
    steps = handle.steps()
    assert [(s.name, s.kind, s.result) for s in steps] == [
        ("charge", "run", expected), ("go", "wait", "ok")]
    assert all(s.recorded_at is not None for s in steps)
    assert done.attempts == 1  # the suspension used no attempt


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_step_runs_once_across_retries_of_a_failing_job(
        app: App, effects: Effects, kind: str) -> None:
    def send(n: int) -> int:
        return effects("send", n * 10)

    def after(value: int) -> int:
        effects("run")
        if effects.count("run") < 3:
            raise RuntimeError("boom after the step")
        return value

    if kind == "sync":
        @app.task(name="du.flaky", queue=Q, max_attempts=3, retry_backoff=0)
        def flaky(n: int) -> int:
            return after(current_job().step.run("send", send, n))
    else:
        @app.task(name="du.flaky", queue=Q, max_attempts=3, retry_backoff=0)
        async def flaky(n: int) -> int:
            return after(await current_job().step.run("send", send, n))

    handle = flaky.delay(4)
    report = drain(app, with_scheduled=True)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == 40, done.error
    assert (report.retried, done.attempts) == (2, 3)
    assert effects.count("run") == 3 and effects.count("send") == 1


def test_a_step_that_raises_records_nothing_and_the_tasks_retries_apply(
        app: App, effects: Effects) -> None:
    def refuse() -> None:
        effects("call")
        raise ValueError("the card was declined")

    @app.task(name="du.declined", queue=Q, max_attempts=2, retry_backoff=0)
    def declined() -> None:
        current_job().step.run("charge", refuse)

    @app.task(name="du.not_retried", queue=Q, max_attempts=3, retry_backoff=0,
              retry_on=(KeyError,))
    def not_retried() -> None:
        current_job().step.run("charge", refuse)

    retried, once = declined.delay(), not_retried.delay()
    drain(app, with_scheduled=True)
    first, second = job(app, retried.id), job(app, once.id)
    assert first.status is JobStatus.FAILED and first.attempts == 2
    assert first.error is not None and first.error["type"] == "ValueError"
    # retry_on does not name ValueError: one attempt.
    assert second.status is JobStatus.FAILED and second.attempts == 1
    assert effects.count("call") == 3  # once per attempt: nothing was recorded to replay
    assert retried.steps() == [] and once.steps() == []


def test_a_retry_policy_retries_inside_the_step(app: App, effects: Effects) -> None:
    def shaky(label: str, fails: int) -> str:
        effects(label)
        if effects.count(label) <= fails:
            raise ConnectionError(f"{label}: try again")
        return f"{label} done"

    def wrong() -> None:
        effects("wrong")
        raise KeyError("not retried by this policy")

    @app.task(name="du.shaky", queue=Q, max_attempts=1)
    def shaky_task() -> Any:
        step = current_job().step
        value = step.run("call", shaky, "call", 2,
                         retry=RetryPolicy(max_attempts=3, backoff=0,
                                           retry_on=(ConnectionError,)))
        with contextlib.suppress(KeyError):
            step.run("wrong", wrong, retry=RetryPolicy(max_attempts=5, backoff=0,
                                                       retry_on=(ConnectionError,)))
        return value

    @app.task(name="du.exhausted", queue=Q, max_attempts=1)
    def exhausted() -> Any:
        return current_job().step.run("call", shaky, "more", 5,
                                      retry=RetryPolicy(max_attempts=3, backoff=0))

    good, bad = shaky_task.delay(), exhausted.delay()
    drain(app)
    done = job(app, good.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == "call done", done.error
    assert done.attempts == 1 and effects.count("call") == 3 and effects.count("wrong") == 1
    assert [s.name for s in good.steps()] == ["call"]  # the one that raised recorded nothing
    failed = job(app, bad.id)
    assert failed.status is JobStatus.FAILED and failed.error is not None
    assert failed.error["type"] == "ConnectionError" and effects.count("more") == 3
    assert bad.steps() == []


def test_a_name_twice_in_a_run_a_result_not_json_and_a_changed_kind_raise(
        app: App, effects: Effects) -> None:
    @app.task(name="du.twice", queue=Q, max_attempts=1)
    def twice() -> None:
        step = current_job().step
        step.run("a", effects, "a1", 1)
        step.run("a", effects, "a2", 2)

    @app.task(name="du.not_json", queue=Q, max_attempts=1)
    def not_json() -> None:
        current_job().step.run("obj", effects, "obj", object())

    @app.task(name="du.async_twice", queue=Q, max_attempts=1)
    async def async_twice() -> None:
        step = current_job().step
        await step.sleep("s", 0)
        await step.run("s", effects, "s2", 2)

    @app.task(name="du.changed", queue=Q, max_attempts=2, retry_backoff=0)
    def changed() -> None:
        step = current_job().step
        if current_job().attempt == 1:
            step.run("x", effects, "x", 1)
            raise RuntimeError("deploy")
        step.sleep("x", 0)  # a new release made step "x" a sleep

    handles = {name: task.delay() for name, task in
               [("twice", twice), ("not_json", not_json), ("async_twice", async_twice),
                ("changed", changed)]}
    drain(app, with_scheduled=True)
    errors = {name: job(app, h.id).error for name, h in handles.items()}
    assert {name: (e or {}).get("type") for name, e in errors.items()} == {
        "twice": "InvalidOptionsError", "not_json": "PayloadError",
        "async_twice": "InvalidOptionsError", "changed": "InvalidOptionsError"}, errors
    assert "used twice" in errors["twice"]["message"]  # type: ignore[index]
    assert "recorded as a run step" in errors["changed"]["message"]  # type: ignore[index]
    assert effects.count("a2") == 0 and effects.count("s2") == 0  # refused before the call
    assert effects.count("obj") == 1 and handles["not_json"].steps() == []
    assert [s.name for s in handles["twice"].steps()] == ["a"]
    assert [(s.name, s.kind) for s in handles["changed"].steps()] == [("x", "run")]
    assert job(app, handles["changed"].id).attempts == 2


# ---- 2. sleep -----------------------------------------------------------------------------------


def test_a_sleep_suspends_until_its_time_and_with_scheduled_makes_it_due(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    @app.task(name="du.nap", queue=Q)
    def nap(duration: Any) -> str:
        effects("run")
        current_job().step.sleep("nap", duration)
        return "awake"

    before = db_now(conn)
    long, short = nap.delay("1h"), nap.delay(0.5)
    drain(app)
    after = db_now(conn)
    for handle, seconds in ((long, 3600), (short, 0.5)):
        found = job(app, handle.id)
        assert_holds_nothing(found)
        assert found.suspended_on == "sleep" and found.wake_at is not None
        assert before + timedelta(seconds=seconds) <= found.wake_at
        assert found.wake_at <= after + timedelta(seconds=seconds)
        [step] = handle.steps()
        assert (step.name, step.kind, step.pending, step.wake_at) == (
            "nap", "sleep", True, found.wake_at)
    assert effects.count("run") == 2
    drain(app)  # before its time: not run
    assert effects.count("run") == 2 and job(app, short.id).status is JobStatus.SUSPENDED
    wake_at = job(app, short.id).wake_at
    assert wake_at is not None
    while db_now(conn) < wake_at:
        pass
    drain(app)
    assert job(app, short.id).status is JobStatus.SUCCEEDED and effects.count("run") == 3
    assert job(app, long.id).status is JobStatus.SUSPENDED  # an hour to go
    drain(app, with_scheduled=True)
    done = job(app, long.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == "awake"
    assert effects.count("run") == 4 and done.attempts == 1
    [step] = long.steps()
    assert step.recorded_at is not None and step.kind == "sleep"


def test_a_sleep_until_an_aware_datetime_and_a_naive_one_refused(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    @app.task(name="du.until", queue=Q, max_attempts=1)
    def until(at: str) -> str:
        effects(at)
        current_job().step.sleep("until", datetime.fromisoformat(at))
        return at

    plus_five = timezone(timedelta(hours=5))
    future = (db_now(conn) + timedelta(days=2)).astimezone(plus_five)
    past = datetime.now(UTC) - timedelta(minutes=1)
    naive = datetime.now() + timedelta(hours=1)  # naive: the point
    later, gone, bad = (until.delay(at.isoformat()) for at in (future, past, naive))
    drain(app)
    found = job(app, later.id)
    assert_holds_nothing(found)
    assert found.wake_at == future  # to the microsecond, whatever its offset
    # A time already past: no suspension at all, the sleep is recorded as done.
    assert job(app, gone.id).status is JobStatus.SUCCEEDED
    assert [s.pending for s in gone.steps()] == [False]
    refused = job(app, bad.id)
    assert refused.status is JobStatus.FAILED and refused.error is not None
    assert refused.error["type"] == "InvalidOptionsError" and "aware" in refused.error["message"]
    assert bad.steps() == [] and refused.wake_at is None
    drain(app, with_scheduled=True)
    assert job(app, later.id).status is JobStatus.SUCCEEDED
    assert effects.count() == 4  # later twice, gone and bad once


# ---- 3. signals ---------------------------------------------------------------------------------


def waiter(app: App, effects: Effects) -> Any:
    @app.task(name="du.wait", queue=Q)
    def wait() -> Any:
        effects("run")
        return current_job().step.wait_for("approve", signal="approval")

    return wait


def test_a_signal_sent_before_the_wait_is_taken_without_a_suspension(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    handle = waiter(app, effects).delay()
    assert app.signal(handle.id, "approval", {"by": "ana"}) is True
    drain(app)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == {"by": "ana"}
    assert effects.count("run") == 1
    assert scalar(conn, "SELECT consumed_by FROM workhorse.job_signals WHERE job_id = %s",
                  handle.id) == "approve"


def test_a_signal_to_a_suspended_job_makes_it_ready_in_the_senders_transaction(
        app: App, database_url: str, conn: psycopg.Connection[Any], effects: Effects) -> None:
    wait = waiter(app, effects)
    handle = wait.delay()
    drain(app)
    found = job(app, handle.id)
    assert_holds_nothing(found)
    assert (found.suspended_on, found.wake_at) == ("signal", None)
    [step] = handle.steps()
    assert (step.kind, step.signal, step.pending) == ("wait", "approval", True)

    def status() -> str:
        return str(scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s", handle.id))

    with psycopg.connect(database_url) as sender:
        assert Queue(sender).signal(handle.id, "approval", [1, 2], key="k") is True
        assert scalar(sender, "SELECT status FROM workhorse.jobs WHERE id = %s",
                      handle.id) == "ready"
        assert status() == "suspended"  # not committed yet
        drain(app)  # nothing to run yet: the drain does not see it
        assert effects.count("run") == 1
        sender.commit()
    assert status() == "ready"
    drain(app)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == [1, 2]
    assert effects.count("run") == 2 and done.attempts == 1

    # A rolled-back signal leaves nothing: no row, no wake-up.
    again = wait.delay()
    drain(app)
    with psycopg.connect(database_url) as sender:
        assert Queue(sender).signal(again.id, "approval", 1) is True
        sender.rollback()
    assert durable_rows(conn, again.id) == (1, 0)
    assert job(app, again.id).status is JobStatus.SUSPENDED


def test_a_keyed_repeat_is_ignored_and_two_waits_take_two_signals_oldest_first(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    @app.task(name="du.two", queue=Q)
    def two() -> Any:
        step = current_job().step
        effects("run")
        first = step.wait_for("first", signal="go")
        effects("between")
        return [first, step.wait_for("second", signal="go")]

    handle = two.delay()
    drain(app)
    assert job(app, handle.id).suspended_on == "signal"
    assert app.signal(handle, "go", "one", key="k1") is True
    assert app.signal(handle, "go", "one again", key="k1") is False  # ignored
    assert app.signal(handle, "go", "two", key="k2") is True
    assert app.signal(handle, "other", "not this one", key="k1") is True  # another name
    drain(app)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == ["one", "two"], done.error
    # The first signal woke it; the second was there when the second wait came: one more run.
    assert effects.count("run") == 2 and effects.count("between") == 1
    rows = conn.execute("SELECT name, signal_key, payload, consumed_by FROM workhorse.job_signals"
                        " WHERE job_id = %s ORDER BY id", (handle.id,)).fetchall()
    assert rows == [("go", "k1", "one", "first"), ("go", "k2", "two", "second"),
                    ("other", "k1", "not this one", None)]


def test_a_signal_to_a_finished_or_missing_job_raises_and_writes_nothing(
        app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="du.plain", queue=Q)
    def plain() -> int:
        return 1

    finished, canceled = plain.delay(), plain.delay()
    canceled.cancel()
    drain(app)
    assert job(app, finished.id).status is JobStatus.SUCCEEDED
    for target in (finished.id, canceled.id, 10**12):
        with pytest.raises(InvalidOptionsError, match=r"finished|does not exist"):
            app.signal(target, "go", 1)
        with pytest.raises(InvalidOptionsError):
            Queue(conn).signal(target, "go", 1, key="k")
    assert scalar(conn, "SELECT count(*) FROM workhorse.job_signals") == 0


def test_bad_signal_input_raises_typed_errors_and_writes_nothing(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    handle = waiter(app, effects).delay()
    drain(app)
    bad: list[tuple[dict[str, Any], type[Exception]]] = [
        ({"name": ""}, InvalidOptionsError),
        ({"name": "n" * 201}, InvalidOptionsError),
        ({"name": 5}, InvalidOptionsError),
        ({"name": None}, InvalidOptionsError),
        ({"key": ""}, InvalidOptionsError),
        ({"key": "k" * 256}, InvalidOptionsError),
        ({"key": 7}, InvalidOptionsError),
        ({"payload": object()}, PayloadError),
        ({"payload": {1j: 2}}, PayloadError),
        ({"job": "1"}, InvalidOptionsError),
        ({"job": True}, InvalidOptionsError),
        ({"job": 2**63}, InvalidOptionsError),
    ]
    for change, error in bad:
        call = {"job": handle.id, "name": "approval", "payload": None, "key": None} | change
        with pytest.raises(error):
            app.signal(call["job"], call["name"], call["payload"], call["key"])
        with pytest.raises(error):
            Queue(conn).signal(call["job"], call["name"], call["payload"], call["key"])
    assert scalar(conn, "SELECT count(*) FROM workhorse.job_signals") == 0
    assert job(app, handle.id).status is JobStatus.SUSPENDED
    # At their bounds they are fine.
    assert app.signal(handle.id, "a" * 200, None, key="k" * 255) is True


def test_a_wait_times_out_once_and_the_timeout_is_replayed(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    @app.task(name="du.timeout", queue=Q)
    def timed() -> Any:
        step = current_job().step
        try:
            value = step.wait_for("approve", signal="approval", timeout=0.5)
        except SignalTimeoutError as exc:
            value = f"timed out: {exc}"
        effects(value)
        step.sleep("then", 0.3)
        return value

    before = db_now(conn)
    handle = timed.delay()
    drain(app)
    found = job(app, handle.id)
    assert_holds_nothing(found)
    assert found.suspended_on == "signal" and found.wake_at is not None
    assert before + timedelta(seconds=0.5) <= found.wake_at <= db_now(conn) + timedelta(
        seconds=0.5)
    # with_scheduled makes sleeps due, not a wait's timeout (it would time the wait out).
    drain(app, with_scheduled=True)
    assert job(app, handle.id).status is JobStatus.SUSPENDED and effects.count() == 0
    wake_at = found.wake_at
    while db_now(conn) < wake_at:
        pass
    drain(app)  # the timeout: the wait raises, the job goes on to its sleep
    now = job(app, handle.id)
    assert (now.status, now.suspended_on) == (JobStatus.SUSPENDED, "sleep")
    [timed_out] = effects.lines()
    assert timed_out.startswith("timed out: no signal 'approval'")
    # The signal comes late: it is stored, and the recorded timeout still stands.
    assert app.signal(handle, "approval", "too late") is True
    assert job(app, handle.id).status is JobStatus.SUSPENDED  # it sleeps, it waits for nothing
    drain(app, with_scheduled=True)
    done = job(app, handle.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == timed_out
    assert effects.lines() == [timed_out, timed_out]
    wait = handle.steps()[0]
    assert wait.kind == "wait" and wait.error is not None
    assert wait.error["type"] == "SignalTimeoutError" and wait.result is None
    assert scalar(conn, "SELECT count(*) FROM workhorse.job_signals WHERE job_id = %s "
                        "AND consumed_at IS NULL", handle.id) == 1


# ---- 6. retention -------------------------------------------------------------------------------


def test_pruning_a_durable_job_takes_its_steps_and_signals(
        app: App, conn: psycopg.Connection[Any], effects: Effects) -> None:
    @app.task(name="du.pruned", queue=Q)
    def pruned() -> Any:
        step = current_job().step
        step.run("a", effects, "a", 1)
        return step.wait_for("w", signal="go")

    gone, kept = pruned.delay(), pruned.delay()
    for handle in (gone, kept):
        app.signal(handle, "go", 1)
        app.signal(handle, "spare", 2)  # never taken: it goes with its job too
    drain(app)
    assert durable_rows(conn, gone.id) == (2, 2) and durable_rows(conn, kept.id) == (2, 2)
    conn.execute("UPDATE workhorse.jobs SET finished_at = finished_at - interval '2 days' "
                 "WHERE id = %s", (gone.id,))
    assert Queue(conn).prune_jobs(older_than=86400, statuses=["succeeded"]) == 1
    assert app.get_job(gone.id) is None
    assert durable_rows(conn, gone.id) == (0, 0)
    assert durable_rows(conn, kept.id) == (2, 2)


def test_durable_jobs_stay_out_of_history(app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="du.stepped", queue=Q)
    def stepped() -> int:
        return int(current_job().step.run("a", int, "3"))

    @app.task(name="du.napped", queue=Q)
    def napped() -> int:
        current_job().step.sleep("nap", 0)
        return 4

    @app.task(name="du.flat", queue=Q)
    def flat() -> int:
        return 5

    durable = [stepped.delay(), napped.delay()]
    plain = flat.delay()
    drain(app)
    assert _ops.execute(conn, _ops.move_to_history(100, 0)) == 1
    assert scalar(conn, "SELECT array_agg(id) FROM workhorse.job_history") == [plain.id]
    assert scalar(conn, "SELECT array_agg(id ORDER BY id) FROM workhorse.jobs") == sorted(
        h.id for h in durable)
    assert [h.get(timeout=5) for h in [*durable, plain]] == [3, 4, 5]
    assert [s.name for s in durable[0].steps()] == ["a"]


# ---- 7. feature levels --------------------------------------------------------------------------


def test_a_queue_is_at_level_2_once_a_job_records_a_step_or_suspends(
        app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="du.l.plain", queue="l-plain")
    def plain() -> int:
        return 1

    @app.task(name="du.l.step", queue="l-step")
    def stepped() -> int:
        return int(current_job().step.run("a", int, "2"))

    @app.task(name="du.l.sleep", queue="l-sleep")
    def sleeping() -> None:
        current_job().step.sleep("nap", "1h")

    @app.task(name="du.l.wait", queue="l-wait")
    def waiting() -> None:
        current_job().step.wait_for("w", signal="go")

    for task in (plain, stepped, sleeping, waiting):
        task.delay()

    def levels() -> dict[str, int]:
        return dict(conn.execute(
            "SELECT queue, feature_level FROM workhorse.queue_levels").fetchall())

    assert all(level < 2 for level in levels().values()), levels()
    drain(app)
    found = levels()
    assert {q: found.get(q, 1) for q in ("l-plain", "l-step", "l-sleep", "l-wait")} == {
        "l-plain": 1, "l-step": 2, "l-sleep": 2, "l-wait": 2}, found
