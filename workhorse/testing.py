"""Testing your own app: `eager()` for unit tests, `drain()` and `assert_enqueued()` against a
real database for integration tests, and (in `workhorse.pytest_plugin`) the fixture
`workhorse_database_url`.

    from workhorse.testing import assert_enqueued, drain, eager

    with eager(app):                      # like Celery's task_always_eager: no database at all
        assert add.delay(2, 3).get() == 5

    add.delay(2, 3)                       # against the test's database
    assert_enqueued(app, add, args=(2, 3))
    report = drain(app)                   # every ready job, through the real claim path
    assert report == DrainReport(succeeded=1, failed=0, retried=0, held=0)

See docs/testing.md for a whole test suite.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio
import psycopg

from . import _ops, database
from .app import App
from .context import in_context
from .errors import InvalidOptionsError, StaleLeaseError
from .handle import JobHandle
from .queue import Queue
from .task import Call, Task
from .types import Attempt, ClaimedJob, Job, JobStatus, Progress

T = TypeVar("T")

__all__ = [
    "DrainReport",
    "assert_enqueued",
    "drain",
    "drain_async",
    "eager",
    "refute_enqueued",
]

# ---- eager ---------------------------------------------------------------------------------------

# A handler that snoozes this many times in a row under eager() fails: it would never end.
EAGER_SNOOZE_LIMIT = 100
# The lease an eager attempt is claimed with: nothing renews or checks it (no database).
EAGER_LEASE = 60.0


@contextmanager
def eager(app: App) -> Iterator[None]:
    """Within this block, `delay`, `apply_async`, `map`, `delay_async`, `enqueue_async` and
    `app.send_task` run the task in this process at once, with no database, and return a handle
    whose `get()` / `get_async()` gives its result or raises TaskFailedError / TaskCanceledError
    as a real one does.

    What runs is what a worker would run: each attempt runs on the worker's own executor, which
    decides success, retry (`retry_on`, `Retry`), final failure, `Snooze` and timeouts as in a
    worker; the payload goes through JSON (a tuple arrives as a list, a non-JSON argument is a
    PayloadError at enqueue), the arguments are bound to the signature, the result must be JSON,
    and `current_job()` gives a JobContext. A sync handler runs in the caller's thread.
    Differences:
      - delays, `eta` and `run_at` are ignored: the job runs now;
      - a failure that may retry (the task's `retry_on`, or `Retry`) runs again at once, up to
        `max_attempts`; backoff and `Retry(delay=...)` are not waited for;
      - `Snooze` runs the job again at once without using an attempt; after 100 snoozes in a row
        the job fails (a handler that always snoozes would never end);
      - `timeout=`: an async handler is cancelled at the limit; a sync one runs to its end and its
        attempt then fails with JobTimeoutError, as in a worker;
      - nothing is concurrent: a task that enqueues another runs it inside its own call;
      - limits and rate limits are not applied (there is no claim).
    The block applies in this context: the tasks and threads it starts through asyncio or anyio
    copy it; a bare `threading.Thread` does not (wrap its target in `context.in_context`).

    >>> with eager(app):                                              # doctest: +SKIP
    ...     assert add.delay(2, 3).get() == 5
    """
    with app.diverted(EagerRunner(app)):
        yield


@dataclass(eq=False)
class EagerRunner:
    """The in-memory Enqueuer `eager()` diverts an app's enqueues to: runs each call at once and
    keeps its Job, so that handles read it back."""

    app: App
    jobs: dict[int, Job] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _idempotent: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _workflow_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    # ---- the Enqueuer protocol ------------------------------------------------------------------

    def enqueue_calls(self, calls: Sequence[Call], connection: Any = None) -> list[JobHandle]:
        handles = []
        for call in calls:
            job, task = self._accept(call)
            if task is not None:
                job = self._run_blocking(task, job)
            # No task: an idempotency hit. A unique or job_key call never finds a job here: an
            # eager job has finished before the next call, which frees its key.
            handles.append(JobHandle(job.id, self, task is None))
        return handles

    async def enqueue_calls_async(
        self, calls: Sequence[Call], connection: Any = None
    ) -> list[JobHandle]:
        handles = []
        for call in calls:
            job, task = self._accept(call)
            if task is not None:
                job = await self._run(task, job)
            handles.append(JobHandle(job.id, self, task is None))
        return handles

    def get_job(self, job_id: int) -> Job | None:
        return self.jobs.get(job_id)

    async def get_job_async(self, job_id: int) -> Job | None:
        return self.jobs.get(job_id)

    def get_attempts(self, job_id: int) -> list[Attempt] | None:
        """The eager job's last attempt only (eager keeps no history): its success, or the
        failure it ended with."""
        job = self.jobs.get(job_id)
        if job is None:
            return None
        if job.status in (JobStatus.FAILED, JobStatus.HELD, JobStatus.CANCELED):
            outcome = "canceled" if job.status == JobStatus.CANCELED else "failed"
            return [Attempt(job.attempts, job.started_at, job.finished_at, outcome, job.error)]
        return _ops.attempts_from(None, job.status.value, job.attempts, job.started_at,
                                  job.finished_at)

    async def get_attempts_async(self, job_id: int) -> list[Attempt] | None:
        return self.get_attempts(job_id)

    def wait_for(self, job_id: int, timeout: float | None) -> bool:
        return True  # every eager job has ended by the time its handle exists

    async def wait_for_async(self, job_id: int, timeout: float | None) -> bool:
        return True

    def cancel(self, ids: Sequence[int]) -> list[int]:
        return []  # an eager job has always finished: there is nothing to cancel

    def retry(self, ids: Sequence[int]) -> list[int]:
        """Failed, held or canceled jobs run again at once, with a fresh set of attempts."""
        changed = []
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is None or job.status not in (
                JobStatus.FAILED, JobStatus.HELD, JobStatus.CANCELED
            ):
                continue
            task = self.app.tasks.get(job.task)
            if task is None:
                continue
            fresh = replace(job, status=JobStatus.READY, attempts=0, result=None, error=None,
                            finished_at=None)
            self.jobs[job_id] = fresh
            self._run_blocking(task, fresh)
            changed.append(job_id)
        return changed

    def run_workflow(self, members: Sequence[Any], result: Sequence[int], kind: str) -> Any:
        """Run a flattened canvas in this process, in dependency order (members come parents
        first), as `eager()` runs a call: each member once its parents succeeded, with their
        results filled in; a member whose parent failed or was canceled is canceled with
        DependencyFailedError.

        >>> with eager(app):                                          # doctest: +SKIP
        ...     chain(add.s(1, 1), add.s(2)).delay().get()
        4
        """

        from .canvas import WorkflowHandle

        ids: list[int] = []
        for member in members:
            parent_jobs = []
            for parent, existing, _position, passes in member.parents:
                job_id = ids[parent] if parent is not None else existing
                parent_jobs.append((self.get_job(job_id), passes))
            if any(job is None for job, _ in parent_jobs):
                raise InvalidOptionsError("depends_on names jobs that do not exist")
            known = [(job, passes) for job, passes in parent_jobs if job is not None]
            broken = next((job for job, _ in known if job.status is not JobStatus.SUCCEEDED),
                          None)
            payload = dict(member.payload)
            if member.mode != "none":
                results = [job.result for job, passes in known if passes]
                filled = results[0] if member.mode == "one" else results
                payload["args"] = [filled, *payload.get("args", [])]
            call = Call(member.task, payload, member.options, member.on_failure)
            if broken is None:
                [handle] = self.enqueue_calls([call])
                ids.append(handle.id)
                continue
            job, _ = self._accept(call)
            why = f"ended {broken.status.value}"
            self.jobs[job.id] = replace(
                job, status=JobStatus.CANCELED,
                error={"type": "DependencyFailedError",
                       "message": f"job {broken.id} ({broken.task}), which it depends on, {why}",
                       "traceback": None, "dependency": broken.id})
            ids.append(job.id)
        return WorkflowHandle(next(self._workflow_ids), self,
                              (tuple(ids), tuple(ids[i] for i in result), kind))

    # ---- running --------------------------------------------------------------------------------

    def _accept(self, call: Call) -> tuple[Job, Task[Any, Any] | None]:
        """The Job for a call, as enqueue would store it (or the existing one its idempotency
        key names, with no task to run)."""
        task = self.app.get_task(call.task)
        # As the database would: JSON, at most 1 MiB; the handler gets the decoded copy.
        payload = json.loads(_ops.encode_json(call.payload, "payload"))
        options = call.options
        key = options.idempotency_key
        with self._lock:
            if key is not None and (call.task, key) in self._idempotent:
                return self.jobs[self._idempotent[(call.task, key)]], None
            job_id = next(self._ids)
            if key is not None:
                self._idempotent[(call.task, key)] = job_id
        now = datetime.now(UTC)
        run_at = options.run_at
        if run_at is None:
            run_at = now + timedelta(seconds=options.delay_seconds or 0.0)
        job = Job(
            id=job_id, task=call.task, queue=options.queue,
            concurrency_key=options.concurrency_key, priority=options.priority, payload=payload,
            status=JobStatus.READY, attempts=0, max_attempts=options.max_attempts, result=None,
            error=None, run_at=run_at, enqueued_at=now, started_at=None, finished_at=None,
            on_failure=call.on_failure, idempotency_key=key, job_key=options.job_key,
            cost=options.cost, rate_cost=options.rate_cost, weight=options.weight,
            budget=options.budget,
        )
        self.jobs[job_id] = job
        return job, task

    def _run_blocking(self, task: Task[Any, Any], job: Job) -> Job:
        """`_run` from synchronous code. A sync task runs in this thread with no event loop (so
        that Django's ORM, which refuses to run under one, works, on the test's own connection);
        an async one on a fresh loop, in another thread when this one already runs a loop (a
        sync `delay()` called from async code)."""
        if not task.is_async:
            return without_loop(self._run(task, job))
        return on_a_loop(lambda: self._run(task, job), "workhorse-eager")

    async def _run(self, task: Task[Any, Any], job: Job) -> Job:
        """Attempts until one succeeds, one may not retry, or attempts run out. Each attempt is
        a claim in memory run by the worker's own executor, which decides what happened
        (success, a retry, a final failure, a snooze); the job then changes as the database
        would change it, except that a retry or a snooze runs again at once."""
        # The worker's own executor, imported here: `import workhorse.testing` stays light. One
        # per job, so that it knows a task declared inside the block too.
        from .worker._threads import InCallerThread
        from .worker.executor import Executor

        executor = Executor({task.name: task}, app_name=self.app.name,
                            default_lease=EAGER_LEASE, threads=InCallerThread(), traced=False)
        scheduled_for = job.run_at  # the first run_at: a retry does not move it
        snoozes = 0
        while True:
            attempts = job.attempts + 1
            started = datetime.now(UTC)
            # A new attempt starts with no progress.
            job = replace(job, status=JobStatus.ACTIVE, attempts=attempts, started_at=started,
                          progress=None)
            self.jobs[job.id] = job
            claimed = ClaimedJob(
                id=job.id, task=job.task, queue=job.queue, concurrency_key=job.concurrency_key,
                priority=job.priority, payload=job.payload, attempts=attempts,
                max_attempts=job.max_attempts, fence=attempts,
                lease_until=started + timedelta(seconds=EAGER_LEASE),
                enqueued_at=job.enqueued_at, run_at=job.run_at, meta={}, started_at=started,
                scheduled_for=scheduled_for,
            )
            execution = executor.prepare(claimed)
            outcome = await executor.run(execution)
            assert outcome is not None  # only a lost lease has none, and eager has no lease
            if execution.progress is not None:
                # As the worker's flush at the attempt's end keeps it.
                _, done, total, message = execution.progress
                job = replace(job, progress=Progress(done, total, message, datetime.now(UTC)))
                self.jobs[job.id] = job
            if outcome.snooze is not None:
                snoozes += 1
                if snoozes < EAGER_SNOOZE_LIMIT:
                    job = replace(job, attempts=attempts - 1)  # a snooze gives its attempt back
                    continue
                error = {"type": "Snooze", "message": (
                    f"snoozed {snoozes} times in a row under eager() (last: for "
                    f"{outcome.snooze:g}s); a worker would wait out each delay"),
                    "traceback": None}
                return self._ended(job, JobStatus.FAILED, error=error)
            if outcome.error is None:
                assert outcome.result is not None
                # As the database keeps it: `error` is still the last failure, if any.
                return self._ended(job, JobStatus.SUCCEEDED, result=json.loads(outcome.result),
                                   error=job.error)
            snoozes = 0
            if outcome.retry_at is not None:
                # The executor retries it; eager does not wait out the delay.
                job = replace(job, error=outcome.error)
                continue
            status = JobStatus.HELD if job.on_failure == "hold" else JobStatus.FAILED
            return self._ended(job, status, error=outcome.error)

    def _ended(self, job: Job, status: JobStatus, *, result: Any = None,
               error: dict[str, Any] | None = None) -> Job:
        ended = replace(job, status=status, result=result, error=error,
                        finished_at=datetime.now(UTC))
        self.jobs[job.id] = ended
        return ended


def without_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` to its end in this thread with no event loop: for the worker's async
    code (the executor, the recorder) when nothing it awaits can suspend (a sync handler run in
    this thread, statements on a sync connection). RuntimeError if something does suspend.

    >>> async def five(): return 5
    >>> without_loop(five())
    5
    """
    try:
        coroutine.send(None)
    except StopIteration as stop:
        value: T = stop.value
        return value
    coroutine.close()
    raise RuntimeError("workhorse: a step that needs an event loop ran where there is none")


def on_a_loop(make: Callable[[], Coroutine[Any, Any, T]], name: str) -> T:
    """`asyncio.run(make())` in this thread, or in a thread of its own when this one already
    runs a loop.

    >>> async def five(): return 5
    >>> on_a_loop(five, "doc")
    5
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    return _in_thread(lambda: asyncio.run(make()), name)


def _framework_connection(app: App) -> Any:
    """The framework's connection (Django's, in an atomic block or a TestCase) the app's jobs
    are enqueued on now, so that the drain and the assertions see them too; None: the app's
    database, on a connection of their own."""
    return database.framework_connection(app.explicit_database_url)


# ---- assertions on the real database ---------------------------------------------------------


def _task_name(app: App, task: Task[Any, Any] | str) -> str:
    if isinstance(task, Task):
        return task.name
    if isinstance(task, str) and task:
        return task
    raise InvalidOptionsError(f"task must be a Task or a task name, got {task!r}")


def _normalised(value: Any, what: str) -> Any:
    """As the stored payload has it: through JSON (a tuple becomes a list)."""
    return json.loads(_ops.encode_json(value, what))


def _waiting(app: App, name: str) -> list[Job]:
    """The task's ready, scheduled and waiting (workflow members) jobs, oldest first (on the
    framework's connection when the app's enqueues join its transaction: only it sees them
    before the commit)."""

    def listed(queue: Queue) -> list[Job]:
        return [job for status in (JobStatus.READY, JobStatus.SCHEDULED, JobStatus.WAITING)
                for job in queue.list_jobs(status=status.value, task=name, limit=10_000)]

    joined = _framework_connection(app)
    if joined is not None:
        jobs = listed(Queue(joined))
    else:
        with app.connection() as conn:
            jobs = listed(Queue(conn))
    return sorted(jobs, key=lambda job: job.id)


def _matching(
    app: App, task: Task[Any, Any] | str, args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
) -> tuple[str, list[Job], list[Job], str]:
    name = _task_name(app, task)
    if args is not None and (isinstance(args, str | bytes) or not isinstance(args, Sequence)):
        raise InvalidOptionsError(f"args must be a list or tuple, got {args!r}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidOptionsError(f"kwargs must be a dict, got {kwargs!r}")
    want_args = None if args is None else _normalised(list(args), "args")
    want_kwargs = None if kwargs is None else _normalised(dict(kwargs), "kwargs")
    waiting = _waiting(app, name)
    found = [
        job for job in waiting
        if isinstance(job.payload, dict)
        and (want_args is None or job.payload.get("args", []) == want_args)
        and (want_kwargs is None or job.payload.get("kwargs", {}) == want_kwargs)
    ]
    wanted = ", ".join(
        part for part in (
            f"args={want_args!r}" if want_args is not None else "",
            f"kwargs={want_kwargs!r}" if want_kwargs is not None else "",
        ) if part
    )
    return name, waiting, found, wanted


def _described(jobs: list[Job]) -> str:
    if not jobs:
        return "none"
    shown = [f"  job {job.id} ({job.status.value}, queue {job.queue!r}): {job.payload!r}"
             for job in jobs[:10]]
    more = [f"  ... and {len(jobs) - 10} more"] if len(jobs) > 10 else []
    return "\n" + "\n".join(shown + more)


def assert_enqueued(
    app: App,
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    count: int | None = None,
) -> list[Job]:
    """Assert that `task` has ready or scheduled jobs in the app's database whose stored
    arguments match (`args` / `kwargs` None: any); exactly `count` of them when given, at least
    one otherwise. Returns the matching jobs, oldest first.

    >>> send.delay({"tenant": "t1"})                                  # doctest: +SKIP
    >>> assert_enqueued(app, send, args=({"tenant": "t1"},), count=1)  # doctest: +SKIP
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or count < 0):
        raise InvalidOptionsError(f"count must be an int >= 0 or None, got {count!r}")
    name, waiting, found, wanted = _matching(app, task, args, kwargs)
    if (count is None and not found) or (count is not None and len(found) != count):
        expected = f"{count}" if count is not None else "at least 1"
        raise AssertionError(
            f"expected {expected} ready or scheduled {name} job(s)"
            + (f" with {wanted}" if wanted else "")
            + f", found {len(found)}; the task's waiting jobs: {_described(waiting)}"
        )
    return found


def refute_enqueued(
    app: App,
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> None:
    """Assert that `task` has no ready or scheduled job whose stored arguments match
    (`args` / `kwargs` None: any)."""
    name, _, found, wanted = _matching(app, task, args, kwargs)
    if found:
        raise AssertionError(
            f"expected no ready or scheduled {name} job"
            + (f" with {wanted}" if wanted else "")
            + f", found {len(found)}: {_described(found)}"
        )


# ---- drain ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DrainReport:
    """What one `drain()` recorded: jobs by the outcome recorded in this drain (`succeeded`,
    `failed`, `held`), and `retried`, the attempts that ended in a retry."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    held: int = 0


# A drain claims with a lease at least this long, so that no job's lease runs out while it runs
# one at a time with no lease keeper (the drain's own timeout is longer when it is).
DRAIN_MIN_LEASE = 60.0


def drain(
    app: App,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    timeout: float = 60,
) -> DrainReport:
    """Run every ready (and due) job of `queues` (default: every queue the app declares)
    through the real claim path and the worker's executor, in this process, one at a time,
    until none is left; jobs that enqueue more jobs are drained too. `with_scheduled=True` also
    runs future jobs and retries waiting out a backoff. Raises TimeoutError when `timeout`
    seconds pass first (the job running then finishes).

    Limits, pauses and rate limits apply as in a worker: a job a limit holds back stays (a rate
    limit's next start is waited for, within the timeout).

    Sync handlers run in this thread with no event loop, as under `eager()` (Django's ORM works
    there, on this thread's connection); async ones on a loop of their own. Under
    `workhorse.contrib.django`, inside an atomic block or a `TestCase`, the drain claims and
    records on Django's own connection, so that it sees the jobs enqueued in that transaction.
    Its own connections are closed when it returns.

    >>> drain(app)                                                    # doctest: +SKIP
    DrainReport(succeeded=3, failed=0, retried=1, held=0)
    """
    served = _drain_checks(app, queues, with_scheduled, timeout)
    return without_loop(_drain(app, served, with_scheduled, timeout,
                               joined=_framework_connection(app), loopless=True))


def _in_thread(fn: Callable[[], T], name: str) -> T:
    """`fn()` in a thread of its own (with this context), for code that must not run on this
    thread's loop; its value, or its exception."""
    box: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=in_context(target), name=name)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]


async def drain_async(
    app: App,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    timeout: float = 60,
) -> DrainReport:
    """`drain()` for async code (it runs on the caller's loop; sync handlers in threads)."""
    served = _drain_checks(app, queues, with_scheduled, timeout)
    return await _drain(app, served, with_scheduled, timeout, joined=None, loopless=False)


def _drain_checks(app: App, queues: Sequence[str] | None, with_scheduled: bool,
                  timeout: float) -> list[str]:
    served = _drain_queues(app, queues)
    if not isinstance(with_scheduled, bool):
        raise InvalidOptionsError(f"with_scheduled must be a bool, got {with_scheduled!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise InvalidOptionsError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return served


async def _drain(
    app: App, served: list[str], with_scheduled: bool, timeout: float, *,
    joined: Any, loopless: bool,
) -> DrainReport:
    """The drain, written once. On the caller's loop (`loopless=False`): an async connection of
    its own, sync handlers in threads. Driven with no loop (`loopless=True`, by `drain()`):
    statements on a sync connection (the framework's `joined` one, else its own) that never
    suspend, sync handlers in this thread, async ones on a loop of their own."""
    # The worker's own parts, imported here: `import workhorse.testing` stays light.
    from .worker._threads import InCallerThread
    from .worker.executor import Execution, Executor, Outcome
    from .worker.recorder import OutcomeRecorder, Recorded

    deadline = time.monotonic() + timeout
    lease = max(DRAIN_MIN_LEASE, float(timeout),
                *(task.lease or 0.0 for task in app.tasks.values()))
    conn: Any
    if joined is not None:
        # Django's connection in the caller's transaction: the schema is the migration's.
        url = None
        heartbeats = _Heartbeats(None, lease, joined)
        conn = _AwaitableConnection(joined, owned=False)
    else:
        url = app.database_url
        if loopless:
            database.ensure_schema(url)
            heartbeats = _Heartbeats(url, lease)
            conn = _AwaitableConnection(database.connect(url, role="drain", autocommit=True),
                                        owned=True)
        else:
            await anyio.to_thread.run_sync(database.ensure_schema, url)
            heartbeats = _Heartbeats(url, lease)
            conn = await psycopg.AsyncConnection.connect(
                url, autocommit=True, application_name=database.application_name("drain"))
    executor = Executor(app.tasks, app_name=app.name, default_lease=lease,
                        retention=_ops.retention_json(app.retention),
                        threads=InCallerThread() if loopless else None,
                        renew=lambda execution: heartbeats.renewer(execution.job, execution)())

    async def run(execution: Execution) -> Outcome | None:
        task = execution.task
        if loopless and task is not None and task.is_async:
            return on_a_loop(lambda: executor.run(execution), "workhorse-drain")
        return await executor.run(execution)
    counts = {"succeeded": 0, "failed": 0, "retried": 0, "held": 0}
    by_status = {JobStatus.SUCCEEDED: "succeeded", JobStatus.FAILED: "failed",
                 JobStatus.SCHEDULED: "retried", JobStatus.HELD: "held"}

    def recorded(outcomes: list[Recorded], reused: bool = False) -> None:
        # `reused`: the recorder's newer callback also says whether a claim already took the
        # capacity these freed; a drain claims one job at a time, so it does not care.
        for outcome, status in outcomes:
            if status in by_status and outcome.snooze is None:  # a snooze is no retry
                counts[by_status[status]] += 1

    async def same_connection() -> Any:
        return conn

    recorder = OutcomeRecorder(same_connection, recorded, name="drain")
    # Progress is written while a handler runs, as a worker's slot writes it (on a connection of
    # its own: not on a framework's, whose transaction holds the jobs only it can see).
    running: dict[int, Execution] = {}
    progress = None
    if url is not None:
        from .worker.leases import LeaseKeeper

        progress = LeaseKeeper(url, running, lambda lost: None, lease, name="workhorse-drain",
                               renew=False)
        progress.start()
    try:
        while True:
            if with_scheduled:
                await _ops.execute_async(conn, _ops.make_due(served))
            ran = False
            next_starts: list[float] = []
            for queue in served:
                if time.monotonic() >= deadline:
                    raise TimeoutError(_timed_out(timeout, counts))
                jobs, next_start, _ = await _ops.execute_async(
                    conn, _ops.complete_and_claim(queue, 1, lease, [], app.tasks))
                if next_start is not None:
                    next_starts.append(next_start)
                for job in jobs:
                    ran = True
                    execution = executor.prepare(job)
                    running[job.id] = execution
                    try:
                        outcome = await run(execution)
                    finally:
                        running.pop(job.id, None)
                    if outcome is not None:
                        recorder.add(outcome)
                        await recorder.flush()
            if ran:
                continue
            if not next_starts:
                break
            # Only a rate limit holds work back: wait for its next allowed start.
            wait = min(next_starts)
            if time.monotonic() + wait >= deadline:
                raise TimeoutError(_timed_out(timeout, counts) + " (a rate limit held jobs back)")
            if loopless:
                time.sleep(wait)
            else:
                await anyio.sleep(wait)
    finally:
        if progress is not None:
            progress.stop()
        executor.threads.close()
        heartbeats.close()
        await conn.close()  # the recorder's too: it flushed each outcome as it came
    return DrainReport(**counts)


class _AwaitableConnection:
    """An AsyncConnection's face on a sync connection, each call done at once: how a drain with
    no event loop drives the worker's async parts (the claim, the recorder) on a sync
    connection, its own or a framework's whose open transaction only that connection sees.
    `close()` closes only a connection it `owned`."""

    def __init__(self, conn: Any, *, owned: bool) -> None:
        self.conn = conn
        self.owned = owned

    @property
    def closed(self) -> bool:
        return bool(self.conn.closed)

    @property
    def info(self) -> Any:
        return self.conn.info

    def cursor(self) -> _AwaitableCursor:
        return _AwaitableCursor(self.conn.cursor())

    async def close(self) -> None:
        if self.owned:
            self.conn.close()


class _AwaitableCursor:
    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    async def __aenter__(self) -> _AwaitableCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.cursor.close()

    async def execute(self, statement: Any, params: Any = None, **kwargs: Any) -> None:
        self.cursor.execute(statement, params, **kwargs)

    @property
    def description(self) -> Any:
        return self.cursor.description

    async def fetchall(self) -> list[Any]:
        return list(self.cursor.fetchall())


def _drain_queues(app: App, queues: Sequence[str] | None) -> list[str]:
    if queues is None:
        served = app.declared_queues()
    elif isinstance(queues, str) or not all(isinstance(q, str) for q in queues):
        raise InvalidOptionsError(f"queues must be a list of queue names, got {queues!r}")
    else:
        served = list(dict.fromkeys(queues))
    if not served:
        raise InvalidOptionsError(f"app {app.name!r} declares no queue: nothing to drain")
    return served


def _timed_out(timeout: float, counts: dict[str, int]) -> str:
    so_far = ", ".join(f"{name}={n}" for name, n in counts.items())
    return f"drain() did not finish within {timeout:g}s ({so_far} so far)"


class _Heartbeats:
    """`JobContext.heartbeat()` under drain: renews the lease on a connection of its own (the
    drain's is idle while a handler runs, but a handler's thread cannot use an async one)."""

    def __init__(self, url: str | None, lease: float, joined: Any = None) -> None:
        self.url = url
        self.lease = lease
        # On a framework's connection (joined), the jobs exist only in its transaction: renew
        # there (the handler runs in the drain's thread, where that connection belongs).
        self.joined = joined
        self.conn: Any = None
        self.lock = threading.Lock()

    def renewer(self, job: ClaimedJob, execution: Any) -> Callable[[], None]:
        def renew() -> None:
            with self.lock:
                if self.joined is not None:
                    self.conn = self.joined
                elif self.conn is None or self.conn.closed:
                    assert self.url is not None
                    self.conn = database.connect(self.url, role="drain-leases", autocommit=True)
                held = _ops.execute(self.conn, _ops.renew_leases([(job.id, job.fence,
                                                                   self.lease)]))
            if job.id not in held:
                execution.lost = True
                raise StaleLeaseError(f"job {job.id}: its lease was lost")
            if held[job.id]:
                execution.cancel_requested = True

        return renew

    def close(self) -> None:
        if self.conn is not None and self.joined is None:
            self.conn.close()

