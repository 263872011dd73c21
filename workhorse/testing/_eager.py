"""`eager()`: tasks run in-process when they are enqueued, with no database, through the
worker's own executor (retries, snoozes, timeouts and results as a worker would)."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import _ops
from ..app import App
from ..durable import StepStore
from ..errors import InvalidOptionsError
from ..handle import JobHandle
from ..task import Call, Task
from ..types import Attempt, ClaimedJob, Job, JobStatus, Progress, Step
from ._loops import on_a_loop, without_loop

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
      - `Snooze` and `Backoff` run the job again at once without using an attempt; after 100 in
        a row the job fails (a handler that always snoozes would never end);
        `current_job().backoff()` does nothing (there is no fleet to back off);
      - `timeout=`: an async handler is cancelled at the limit; a sync one runs to its end and its
        attempt then fails with JobTimeoutError, as in a worker;
      - nothing is concurrent: a task that enqueues another runs it inside its own call;
      - limits and rate limits are not applied (there is no claim);
      - durable steps are kept in memory: a `step.sleep` or a wait's timeout ends at once (time
        jumps to it), children run at their enqueue, and a `step.wait_for` with no timeout
        fails the job (no signal can come while it runs in the caller: test it with `drain`).
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
    step_store: EagerStepStore = field(init=False)

    def __post_init__(self) -> None:
        self.step_store = EagerStepStore(self)

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

    def get_steps(self, job_id: int) -> list[Step]:
        """The eager job's steps, as kept in memory."""
        return list(self.step_store.recorded.get(job_id, {}).values())

    async def get_steps_async(self, job_id: int) -> list[Step]:
        return self.get_steps(job_id)

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

        from ..canvas import WorkflowHandle

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
            budget=options.budget, tags=list(options.tags),
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
        from ..worker._threads import InCallerThread
        from ..worker.executor import Executor

        executor = Executor({task.name: task}, app_name=self.app.name,
                            default_lease=EAGER_LEASE, threads=InCallerThread(), traced=False,
                            step_store=self.step_store)
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
            point = outcome.suspend
            if point is not None:
                self.step_store.pending(job.id, point.name, point.kind, point.wake_at,
                                        point.signal)
                if point.reason == "signal" and point.wake_at is None:
                    return self._ended(job, JobStatus.FAILED, error={
                        "type": "Suspended", "message": (
                            f"step {point.name!r} waits for signal {point.signal!r} under "
                            "eager(), where no signal can come while the job runs in the "
                            "caller (test it with workhorse.testing.drain)"), "traceback": None})
            if (outcome.snooze is not None or outcome.backoff is not None
                    or point is not None):
                # A Backoff, like a snooze, gives its attempt back; eager has no fleet to back
                # off, so the job runs again at once.
                snoozes += 1
                if snoozes < EAGER_SNOOZE_LIMIT:
                    job = replace(job, attempts=attempts - 1)
                    continue
                kind, delay = (("Snooze", outcome.snooze) if outcome.snooze is not None
                               else ("Backoff", outcome.backoff.retry_after
                                     if outcome.backoff is not None else 0.0)
                               if point is None else ("Suspended", 0.0))
                error = {"type": kind, "message": (
                    f"{_AGAIN[kind]} {snoozes} times in a "
                    f"row under eager() (last: for {delay:g}s); a worker would wait out each "
                    "delay"), "traceback": None}
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


_AGAIN = {"Snooze": "snoozed", "Backoff": "backed off", "Suspended": "suspended"}


class EagerStepStore(StepStore):
    """Durable steps under `eager()`, in memory (docs/durable.md "Testing"): the clock a job's
    steps read is the latest of now and its pending timers, so a sleep or a wait's timeout ends
    when the job runs again (at once); children are enqueued on the eager runner, which runs
    them at their enqueue; no signal is ever waiting."""

    def __init__(self, runner: EagerRunner) -> None:
        super().__init__(None, runner.enqueue_calls, tasks=runner.app.tasks)
        self.runner = runner
        self.recorded: dict[int, dict[str, Step]] = {}
        self.kids: dict[int, dict[str, list[int]]] = {}

    def steps(self, job_id: int) -> tuple[list[Step], datetime | None]:
        steps = self.recorded.get(job_id, {})
        timers = [step.wake_at for step in steps.values()
                  if step.recorded_at is None and step.wake_at is not None]
        return list(steps.values()), max([datetime.now(UTC), *timers])

    def children(self, job_id: int) -> dict[str, list[tuple[int, JobStatus, Any, Any]]]:
        found: dict[str, list[tuple[int, JobStatus, Any, Any]]] = {}
        for name, ids in self.kids.get(job_id, {}).items():
            jobs = [self.runner.jobs[child] for child in ids]
            found[name] = [(job.id, job.status, job.result, job.error) for job in jobs]
        return found

    def record(self, job_id: int, fence: int, name: str, kind: str, *,
               encoded: str | None = None, error: dict[str, Any] | None = None) -> None:
        steps = self.recorded.setdefault(job_id, {})
        old = steps.get(name)
        if old is not None and old.recorded_at is not None:
            return
        now = datetime.now(UTC)
        result = json.loads(encoded) if encoded is not None and error is None else None
        steps[name] = Step(name=name, kind=kind, recorded_at=now, result=result, error=error,
                           created_at=old.created_at if old is not None else now)

    def pending(self, job_id: int, name: str, kind: str, wake_at: datetime | None,
                signal: str | None) -> None:
        steps = self.recorded.setdefault(job_id, {})
        if name not in steps:
            steps[name] = Step(name=name, kind=kind, recorded_at=None, result=None, error=None,
                               created_at=datetime.now(UTC), wake_at=wake_at, signal=signal)

    def wait_signal(self, job_id: int, fence: int, name: str, signal: str) -> tuple[bool, Any]:
        return False, None

    def spawn(self, job_id: int, fence: int, name: str, calls: Sequence[Call]) -> list[int]:
        ids = [handle.id for handle in self.runner.enqueue_calls(calls)]
        self.kids.setdefault(job_id, {})[name] = ids
        return ids
