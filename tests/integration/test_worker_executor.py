"""The executor (workhorse/worker/executor.py), in process against the real database: jobs are
enqueued and claimed for real, run by real handlers, and their outcomes recorded with `Queue`."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from workhorse import App, EnqueueOptions, JobStatus, PayloadError, Queue
from workhorse.types import ClaimedJob
from workhorse.worker._threads import HandlerThreads
from workhorse.worker.executor import Execution, Executor, Outcome, arguments, storable


def _claim_one(queue: Queue, task: str, payload: Any, **options: Any) -> ClaimedJob:
    job_id = queue.enqueue(task, payload, EnqueueOptions(queue="q", **options))
    [claimed] = queue.claim("q", 1, 30.0)
    assert claimed.id == job_id
    return claimed


def _executor(app: App, **options: Any) -> Executor:
    return Executor(app.tasks, app_name=app.name, default_lease=30.0, **options)


def _run(coroutine: Callable[[], Awaitable[Any]]) -> Any:
    box: list[Any] = []

    async def main() -> None:
        box.append(await coroutine())

    anyio.run(main)
    return box[0]


def _execute(executor: Executor, execution: Execution) -> Outcome | None:
    outcome: Outcome | None = _run(lambda: executor.run(execution))
    return outcome


def _record_failure(queue: Queue, outcome: Outcome) -> JobStatus:
    assert outcome.error is not None
    job = outcome.execution.job
    return queue.fail(job.id, job.fence, outcome.error, outcome.retry_at)


# ---- successes ----------------------------------------------------------------------------------


def test_sync_handler_gets_args_and_kwargs_and_its_result_is_json(queue: Queue) -> None:
    app = App("exec")
    seen: list[tuple[Any, ...]] = []

    @app.task(name="add")
    def add(a: int, b: int, *, scale: int = 1) -> dict[str, Any]:
        seen.append((a, b, scale, threading.current_thread() is threading.main_thread()))
        return {"sum": (a + b) * scale, "text": "é"}

    executor = _executor(app)
    claimed = _claim_one(queue, "add", {"args": [2, 3], "kwargs": {"scale": 10}})
    outcome = _execute(executor, executor.prepare(claimed))
    assert outcome is not None and outcome.succeeded
    assert outcome.result == '{"sum":50,"text":"é"}'
    assert outcome.error is None and outcome.retry_at is None and outcome.retry_delay is None
    assert seen == [(2, 3, 10, False)]  # in a worker thread, not on the loop's thread

    assert outcome.result is not None
    queue.complete(claimed.id, claimed.fence, json.loads(outcome.result))
    job = queue.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.result == {"sum": 50, "text": "é"} and job.attempts == 1


def test_async_handler_runs_on_the_loop(queue: Queue) -> None:
    app = App("exec")
    handles: list[bool] = []
    execution_box: list[Execution] = []

    @app.task(name="mul")
    async def mul(a: int, b: int) -> int:
        await asyncio.sleep(0)
        handles.append(execution_box[0].handle is asyncio.current_task())
        return a * b

    executor = _executor(app)
    claimed = _claim_one(queue, "mul", {"args": [5], "kwargs": {"b": 1}})
    execution = executor.prepare(claimed)
    execution_box.append(execution)
    outcome = _execute(executor, execution)
    assert outcome is not None and outcome.succeeded and outcome.result == "5"
    assert handles == [True] and execution.handle is None

    queue.complete(claimed.id, claimed.fence, json.loads(outcome.result))
    job = queue.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.result == 5


def test_missing_args_and_kwargs_default_to_empty(queue: Queue) -> None:
    app = App("exec")

    @app.task(name="none")
    def none() -> None:
        return None

    executor = _executor(app, traced=True)
    outcome = _execute(executor, executor.prepare(_claim_one(queue, "none", {})))
    assert outcome is not None and outcome.succeeded and outcome.result == "null"


def test_arguments() -> None:
    assert arguments({}) == ([], {})
    assert arguments({"args": [1, [2]], "kwargs": {"k": None}}) == ([1, [2]], {"k": None})
    for bad in ([1, 2], None, "x", {"args": "ab"}, {"args": [], "kwargs": [1]}, {"args": (1,)}):
        with pytest.raises(PayloadError, match="payload must be"):
            arguments(bad)


def test_sync_handlers_are_bounded_by_the_executors_threads(queue: Queue) -> None:
    app = App("exec")
    running = [0]
    peak = [0]
    lock = threading.Lock()

    @app.task(name="slow")
    def slow(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return i

    ids = queue.enqueue_many([("slow", {"args": [i]}, EnqueueOptions(queue="q")) for i in range(3)])
    claimed = queue.claim("q", 3, 30.0)
    assert sorted(job.id for job in claimed) == ids

    async def main() -> list[Outcome | None]:
        executor = _executor(app, threads=HandlerThreads(1))
        outcomes: list[Outcome | None] = [None] * len(claimed)

        async def one(index: int) -> None:
            outcomes[index] = await executor.run(executor.prepare(claimed[index]))

        async with anyio.create_task_group() as tg:
            for index in range(len(claimed)):
                tg.start_soon(one, index)
        return outcomes

    outcomes = _run(main)
    assert peak == [1]
    assert [o.result if o else None for o in outcomes] == [
        json.dumps(job.payload["args"][0]) for job in claimed]


# ---- failures -----------------------------------------------------------------------------------


def test_raising_handler_is_retried_while_attempts_remain(queue: Queue) -> None:
    app = App("exec")

    @app.task(name="boom")
    def boom(what: str) -> None:
        raise ValueError(f"it broke: {what}")

    executor = _executor(app)
    claimed = _claim_one(queue, "boom", {"args": ["x"]})
    assert (claimed.attempts, claimed.max_attempts) == (1, 3)
    before = datetime.now(UTC)
    outcome = _execute(executor, executor.prepare(claimed))
    after = datetime.now(UTC)
    assert outcome is not None and not outcome.succeeded and outcome.result is None
    assert outcome.error is not None
    assert set(outcome.error) == {"type", "message", "traceback"}
    assert outcome.error["type"] == "ValueError"
    assert outcome.error["message"] == "it broke: x"
    assert "in boom" in outcome.error["traceback"]
    assert outcome.error["traceback"].rstrip().endswith("ValueError: it broke: x")
    # The default backoff for a first failure: 1 s with equal jitter, so 0.5-1 s from now.
    assert outcome.retry_at is not None
    assert before + timedelta(seconds=0.5) <= outcome.retry_at <= after + timedelta(seconds=1)
    assert outcome.retry_delay is not None and 0 < outcome.retry_delay <= 1

    assert _record_failure(queue, outcome) is JobStatus.SCHEDULED
    job = queue.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.SCHEDULED
    assert job.error == outcome.error and job.run_at == outcome.retry_at


def test_task_backoff_sets_the_retry_time(queue: Queue) -> None:
    app = App("exec")

    @app.task(name="boom", retry_backoff=lambda attempt: 100.0 * attempt)
    def boom() -> None:
        raise RuntimeError("no")

    executor = _executor(app)
    job_id = queue.enqueue("boom", {}, EnqueueOptions(queue="q", max_attempts=5))
    for attempt in (1, 2):
        [claimed] = queue.claim("q", 1, 30.0)
        assert claimed.attempts == attempt
        before = datetime.now(UTC)
        outcome = _execute(executor, executor.prepare(claimed))
        assert outcome is not None and outcome.retry_at is not None
        delay = (outcome.retry_at - before).total_seconds()
        assert 100.0 * attempt - 1 < delay <= 100.0 * attempt + 1
        assert _record_failure(queue, outcome) is JobStatus.SCHEDULED
        # Make it due now, to claim the next attempt.
        queue.conn.execute("UPDATE workhorse.jobs SET run_at = now() WHERE id = %s", (job_id,))


def test_last_attempt_is_not_retried(queue: Queue) -> None:
    app = App("exec")

    @app.task(name="boom")
    async def boom() -> None:
        raise KeyError("gone")

    executor = _executor(app)
    claimed = _claim_one(queue, "boom", {}, max_attempts=1)
    outcome = _execute(executor, executor.prepare(claimed))
    assert outcome is not None and outcome.error is not None
    assert outcome.error["type"] == "KeyError" and outcome.error["message"] == "'gone'"
    assert outcome.retry_at is None and outcome.retry_delay is None

    assert _record_failure(queue, outcome) is JobStatus.FAILED
    job = queue.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.FAILED and job.error == outcome.error


def test_unknown_task_fails_without_retry(queue: Queue) -> None:
    app = App("exec")
    executor = _executor(app)
    claimed = _claim_one(queue, "nobody.home", {"args": []})
    execution = executor.prepare(claimed)
    assert execution.task is None and execution.lease == 30.0
    outcome = _execute(executor, execution)
    assert outcome is not None and outcome.error is not None
    assert outcome.error["type"] == "UnknownTaskError"
    assert outcome.error["message"] == "app 'exec' has no task named 'nobody.home'"
    assert outcome.retry_at is None  # attempts remain (1 of 3), but no retry could help

    assert _record_failure(queue, outcome) is JobStatus.FAILED
    job = queue.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.FAILED and job.attempts == 1


@pytest.mark.parametrize("payload", [[1, 2], {"args": "x"}, {"kwargs": [1]}, 7])
def test_bad_payload_fails_without_retry(queue: Queue, payload: Any) -> None:
    app = App("exec")
    calls: list[Any] = []

    @app.task(name="t")
    def t(*args: Any, **kwargs: Any) -> None:
        calls.append((args, kwargs))

    executor = _executor(app)
    claimed = _claim_one(queue, "t", payload)
    outcome = _execute(executor, executor.prepare(claimed))
    assert outcome is not None and outcome.error is not None
    assert outcome.error["type"] == "PayloadError"
    assert outcome.error["message"].startswith("payload must be")
    assert outcome.retry_at is None and calls == []
    assert _record_failure(queue, outcome) is JobStatus.FAILED


@pytest.mark.parametrize(
    ("value", "message"),
    [(object(), "result is not JSON-serialisable"), (float("nan"), "result is not JSON"),
     ("a\x00b", "result contains a NUL character"), ("\ud800", "result contains a lone")],
)
def test_non_json_result_fails_the_attempt(queue: Queue, value: Any, message: str) -> None:
    app = App("exec")

    @app.task(name="t")
    def t() -> Any:
        return value

    executor = _executor(app)
    claimed = _claim_one(queue, "t", {})
    outcome = _execute(executor, executor.prepare(claimed))
    assert outcome is not None and outcome.error is not None and outcome.result is None
    assert outcome.error["type"] == "PayloadError"
    assert outcome.error["message"].startswith(message)
    assert outcome.retry_at is not None  # the handler may return JSON next time
    assert _record_failure(queue, outcome) is JobStatus.SCHEDULED
    job = queue.get_job(claimed.id)
    assert job is not None and job.error == outcome.error and job.result is None


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_system_exit_fails_the_job(queue: Queue, kind: str) -> None:
    app = App("exec")

    if kind == "sync":
        @app.task(name="t")
        def t() -> None:
            raise SystemExit(3)
    else:
        @app.task(name="t")
        async def t_async() -> None:
            raise SystemExit(3)

    executor = _executor(app)
    claimed = _claim_one(queue, "t", {}, max_attempts=1)
    outcome = _execute(executor, executor.prepare(claimed))
    assert outcome is not None and outcome.error is not None
    assert outcome.error["type"] == "SystemExit" and outcome.error["message"] == "3"
    assert outcome.retry_at is None
    assert _record_failure(queue, outcome) is JobStatus.FAILED


@pytest.mark.parametrize("retry_on", [None, (KeyboardInterrupt,)])
def test_keyboard_interrupt_in_a_sync_handler_fails_the_attempt(
        queue: Queue, retry_on: tuple[type[BaseException], ...] | None) -> None:
    """It does not escape into the slot. It is no Exception, so under the default retry_on
    (every Exception) the job fails at once; a retry_on that names it retries."""
    app = App("exec")

    @app.task(name="t", **({"retry_on": retry_on} if retry_on else {}))
    def t() -> None:
        raise KeyboardInterrupt

    executor = _executor(app)
    claimed = _claim_one(queue, "t", {})
    outcome = _execute(executor, executor.prepare(claimed))
    assert outcome is not None and outcome.error is not None
    assert outcome.error["type"] == "KeyboardInterrupt"
    assert (outcome.retry_at is not None) == bool(retry_on)
    expected = JobStatus.SCHEDULED if retry_on else JobStatus.FAILED
    assert _record_failure(queue, outcome) is expected


# ---- lost leases --------------------------------------------------------------------------------


def test_lost_before_run_has_no_outcome_and_runs_nothing(queue: Queue) -> None:
    app = App("exec")
    calls: list[int] = []

    @app.task(name="t")
    def t() -> None:
        calls.append(1)

    executor = _executor(app)
    claimed = _claim_one(queue, "t", {})
    execution = executor.prepare(claimed)
    execution.lost = True
    assert _execute(executor, execution) is None
    assert calls == []
    job = queue.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.ACTIVE


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_lost_while_running_discards_the_outcome(queue: Queue, ending: str) -> None:
    app = App("exec")
    box: list[Execution] = []

    @app.task(name="t")
    def t() -> int:
        box[0].lost = True  # as the slot does when a heartbeat is refused
        if ending == "raises":
            raise ValueError("after the lease was lost")
        return 1

    executor = _executor(app)
    claimed = _claim_one(queue, "t", {})
    box.append(executor.prepare(claimed))
    assert _execute(executor, box[0]) is None
    job = queue.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.ACTIVE and job.error is None


def test_lost_async_handler_is_cancelled_and_has_no_outcome(queue: Queue) -> None:
    app = App("exec")
    cancelled: list[bool] = []

    @app.task(name="t")
    async def t() -> int:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return 1

    executor = _executor(app)
    claimed = _claim_one(queue, "t", {})
    execution = executor.prepare(claimed)

    async def main() -> tuple[Outcome | None, int]:
        async def run() -> tuple[Outcome | None, int]:
            outcome = await executor.run(execution)
            task = asyncio.current_task()
            assert task is not None
            return outcome, task.cancelling()

        task = asyncio.create_task(run())
        with anyio.fail_after(5):
            while execution.handle is None:
                await asyncio.sleep(0.001)
        assert execution.handle is task
        execution.lost = True  # what the slot's _mark_lost does
        execution.handle.cancel()
        with anyio.fail_after(5):
            return await task

    outcome, cancelling = _run(main)
    assert outcome is None and cancelled == [True]
    assert cancelling == 0  # the cancel was consumed: the task may go on
    assert execution.handle is None
    job = queue.get_job(claimed.id)
    assert job is not None and job.status is JobStatus.ACTIVE


def test_cancel_without_a_lost_lease_propagates(queue: Queue) -> None:
    app = App("exec")

    @app.task(name="t")
    async def t() -> int:
        await asyncio.sleep(30)
        return 1

    executor = _executor(app)
    execution = executor.prepare(_claim_one(queue, "t", {}))

    async def main() -> bool:
        task = asyncio.create_task(executor.run(execution))
        with anyio.fail_after(5):
            while execution.handle is None:
                await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.wait([task])
        return task.cancelled()

    assert _run(main) is True


# ---- prepare and storable -----------------------------------------------------------------------


def test_prepare_uses_the_task_lease_else_the_default(queue: Queue) -> None:
    app = App("exec")

    @app.task(name="long", lease="2m")
    def long() -> None: ...

    @app.task(name="short", lease=5)
    def short() -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    executor = Executor(app.tasks, app_name=app.name, default_lease=42.0)
    queue.enqueue_many([(name, {}, EnqueueOptions(queue="q")) for name in
                        ("long", "short", "plain", "unknown")])
    claimed = {job.task: job for job in queue.claim("q", 4, 30.0)}
    leases = {name: executor.prepare(job).lease for name, job in claimed.items()}
    assert leases == {"long": 120.0, "short": 5.0, "plain": 42.0, "unknown": 42.0}

    execution = executor.prepare(claimed["long"], governed=True)
    assert execution.governed and execution.task is app.tasks["long"]
    assert (execution.job_id, execution.fence) == (claimed["long"].id, claimed["long"].fence)
    assert execution.holds and not execution.lost and execution.handle is None
    assert not executor.prepare(claimed["plain"]).governed


def test_storable_escapes_nul_and_lone_surrogates(queue: Queue) -> None:
    raw = {"type": "Bad\x00Type", "message": "a\x00b \ud800 c", "traceback": "ok é", "n": 3}
    claimed = _claim_one(queue, "t", {}, max_attempts=1)
    with pytest.raises(PayloadError):
        queue.fail(claimed.id, claimed.fence, raw)
    document = storable(raw)
    assert document == {"type": "Bad\\x00Type", "message": "a\\x00b \\ud800 c",
                        "traceback": "ok é", "n": 3}
    assert queue.fail(claimed.id, claimed.fence, document) is JobStatus.FAILED
    job = queue.get_job(claimed.id)
    assert job is not None and job.error == document


def test_handler_error_with_nul_and_surrogate_is_recorded(queue: Queue) -> None:
    app = App("exec")

    @app.task(name="t")
    def t() -> None:
        raise ValueError("nul\x00 and \udcff")

    executor = _executor(app)
    claimed = _claim_one(queue, "t", {}, max_attempts=1)
    outcome = _execute(executor, executor.prepare(claimed))
    assert outcome is not None and outcome.error is not None
    assert outcome.error["message"] == "nul\\x00 and \\udcff"
    assert _record_failure(queue, outcome) is JobStatus.FAILED
    job = queue.get_job(claimed.id)
    assert job is not None and job.error is not None
    assert job.error["message"] == "nul\\x00 and \\udcff"
    assert "\\x00" in job.error["traceback"] and "\x00" not in job.error["traceback"]


def test_outcome_for_a_direct_execution(queue: Queue) -> None:
    claimed = _claim_one(queue, "t", {})
    execution = Execution(claimed, None, 30.0)
    outcome = Outcome(execution, result="5")
    assert outcome.succeeded and outcome.execution.job_id == claimed.id
    failed = Outcome(execution, error={"type": "X", "message": "", "traceback": ""},
                     retry_at=datetime.now(UTC) - timedelta(seconds=5))
    assert not failed.succeeded and failed.retry_delay == 0.0


# ---- regressions: failures that could not be recorded ------------------------------------------


def test_a_huge_error_is_clipped_and_recorded(queue: Queue) -> None:
    """A 700 kB message (1.4 MB with its traceback) once made the error document unstorable:
    the recorder raised, the slot died, and the job ran again at every lease expiry."""
    app = App("exec")

    @app.task(name="huge")
    def huge() -> None:
        raise ValueError("x" * 700_000)

    executor = _executor(app)
    outcome = _execute(executor, executor.prepare(_claim_one(queue, "huge", {})))
    assert outcome is not None and outcome.error is not None
    assert len(outcome.error["message"]) < 20_000 and "characters cut" in outcome.error["message"]
    # The traceback keeps its end, where the error is.
    assert outcome.error["traceback"].startswith("[") and "characters cut]" in outcome.error[
        "traceback"][:40]
    assert _record_failure(queue, outcome) is JobStatus.SCHEDULED


def test_an_exception_whose_str_raises_still_fails_the_job(queue: Queue) -> None:
    app = App("exec")

    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text for you")

    @app.task(name="weird")
    def weird() -> None:
        raise Weird()

    executor = _executor(app)
    outcome = _execute(executor, executor.prepare(_claim_one(queue, "weird", {})))
    assert outcome is not None and outcome.error is not None
    assert outcome.error["type"] == "Weird"
    assert "unprintable Weird" in outcome.error["message"]
    assert _record_failure(queue, outcome) is JobStatus.SCHEDULED
