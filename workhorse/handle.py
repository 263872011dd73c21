"""JobHandle: what `delay()` returns, and `app.handle(job_id)` rebuilds in any process.

    h = add.delay(2, 3)
    h.get(timeout=10)        # -> 5, or TaskFailedError / TaskCanceledError / TimeoutError
    h.wait(timeout=10)       # -> the Job once it rests (succeeded, failed, held, canceled)
    h.cancel(); h.retry()
    h.attempts()             # -> [Attempt(attempt=1, outcome="retried", ...), ...]

A handle talks to an `Enqueuer` (App is one): it reads the job, and waits through the process's
one results listener (`_results.py`), holding no connection while it waits.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._ops.workflows import Dependency, WorkflowMember, WorkflowResult
from .errors import InvalidOptionsError, JobNotFoundError, TaskCanceledError, TaskFailedError
from .types import Attempt, Job, JobStatus, Progress, Step, WorkflowStatus, check_id


class Enqueuer(Protocol):
    """What Task and JobHandle need: send resolved calls, read, wait for, cancel and retry jobs."""

    def enqueue_calls(self, calls: Sequence[Any], connection: Any = None) -> list[JobHandle]:
        """Enqueue `calls` in one round trip (on `connection` when given)."""
        ...

    async def enqueue_calls_async(
        self, calls: Sequence[Any], connection: Any = None
    ) -> list[JobHandle]: ...

    def get_job(self, job_id: int) -> Job | None: ...

    async def get_job_async(self, job_id: int) -> Job | None: ...

    def get_attempts(self, job_id: int) -> list[Attempt] | None: ...

    async def get_attempts_async(self, job_id: int) -> list[Attempt] | None: ...

    def get_steps(self, job_id: int) -> list[Step]: ...

    async def get_steps_async(self, job_id: int) -> list[Step]: ...

    def wait_for(self, job_id: int, timeout: float | None) -> bool:
        """Block until the job may have reached a resting status (True) or `timeout` passed."""
        ...

    async def wait_for_async(self, job_id: int, timeout: float | None) -> bool: ...

    def cancel(self, ids: Sequence[int]) -> list[int]: ...

    def retry(self, ids: Sequence[int]) -> list[int]: ...


class WorkflowEnqueuer(Enqueuer, Protocol):
    """What a Task and a canvas need besides: insert a flattened canvas (its members in
    dependency order, the members whose results make the workflow's, how: 'one' or 'list')
    and read a workflow back. App is one."""

    def enqueue_workflow(self, members: Sequence[WorkflowMember], result: Sequence[int],
                         kind: str, on_error: Any = None,
                         connection: Any = None) -> WorkflowHandle: ...

    async def enqueue_workflow_async(
        self, members: Sequence[WorkflowMember], result: Sequence[int], kind: str,
        on_error: Any = None, connection: Any = None,
    ) -> WorkflowHandle: ...

    def workflow_jobs(self, workflow_id: int) -> list[Job]: ...

    def workflow_row(self, workflow_id: int) -> tuple[Any, ...] | None: ...

    def database_of(self, queue: str) -> str: ...


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _result(job: Job) -> Any:
    """The stored result, or the error that says why there is none."""
    if job.status is JobStatus.SUCCEEDED:
        return job.result
    if job.status is JobStatus.CANCELED:
        raise TaskCanceledError(f"job {job.id} ({job.task}) was canceled", job)
    error = job.error or {}
    detail = (f"{error.get('type')}: {error.get('message')}" if error
              else "no error was recorded")
    trace = error.get("traceback")
    raise TaskFailedError(
        f"job {job.id} ({job.task}) ended {job.status.value} after attempt {job.attempts}/"
        f"{job.max_attempts}: {detail}" + (f"\n\nremote traceback:\n{trace}" if trace else ""),
        job,
    )


@dataclass(frozen=True, slots=True)
class JobHandle:
    """A job's id, and the ways to follow and control it.

    >>> h = add.delay(2, 3)                                           # doctest: +SKIP
    >>> h.get(timeout=10)                                             # doctest: +SKIP
    5
    >>> refresh.delay(42).duplicate, refresh.delay(42).duplicate     # doctest: +SKIP
    (False, True)
    """

    id: int
    enqueuer: Enqueuer = field(repr=False, compare=False)
    # True when the enqueue that made this handle inserted no row: an idempotency hit, a unique
    # duplicate or a job_key update returned an existing job's id (False for `app.handle(id)`).
    duplicate: bool = field(default=False, repr=False, compare=False)
    # The app's database the job lives in (docs/design.md "Several databases"); `enqueuer`
    # reads and controls it there.
    database: str = field(default="default", repr=False)

    def __post_init__(self) -> None:
        # A handle is made for a stored id (a bigint): `app.handle(2**70)` fails here, typed.
        if type(self.id) is not int or not 0 < self.id < 2**63:
            check_id(self.id)

    def job(self) -> Job | None:
        """The Job as stored now, or None when there is no such job (pruned by retention?).

        >>> add.delay(2, 3).job().status  # doctest: +SKIP
        <JobStatus.READY: 'ready'>
        """
        return self.enqueuer.get_job(self.id)

    def status(self) -> JobStatus | None:
        """The job's status now, or None when there is no such job.

        >>> h.status()  # doctest: +SKIP
        <JobStatus.ACTIVE: 'active'>
        """
        job = self.job()
        return None if job is None else job.status

    def progress(self) -> Progress | None:
        """The latest progress the job's current (or last) attempt reported, as the worker
        wrote it (within about a second of the handler's call, and once more when the attempt
        ended); None before it reported any, or when there is no such job.

        >>> h.progress()  # doctest: +SKIP
        Progress(done=40, total=100, message='pages', at=datetime.datetime(...))
        """
        job = self.job()
        return None if job is None else job.progress

    async def progress_async(self) -> Progress | None:
        """`progress()` for async code.

        >>> (await h.progress_async()).done  # doctest: +SKIP
        40
        """
        job = await self.job_async()
        return None if job is None else job.progress

    async def job_async(self) -> Job | None:
        """`job()` for async code.

        >>> (await h.job_async()).attempts  # doctest: +SKIP
        1
        """
        return await self.enqueuer.get_job_async(self.id)

    async def status_async(self) -> JobStatus | None:
        """`status()` for async code.

        >>> await h.status_async()  # doctest: +SKIP
        <JobStatus.SUCCEEDED: 'succeeded'>
        """
        job = await self.job_async()
        return None if job is None else job.status

    def attempts(self) -> list[Attempt]:
        """Every attempt of the job, oldest first: those that did not succeed (the last 20 are
        kept, each with its outcome and error), then its success. JobNotFoundError when there
        is no such job.

        >>> [(a.attempt, a.outcome) for a in h.attempts()]  # doctest: +SKIP
        [(1, 'retried'), (2, 'succeeded')]
        """
        found = self.enqueuer.get_attempts(self.id)
        if found is None:
            raise JobNotFoundError(f"there is no job {self.id} (pruned by retention?)")
        return found

    async def attempts_async(self) -> list[Attempt]:
        """`attempts()` for async code.

        >>> [a.outcome for a in await h.attempts_async()]  # doctest: +SKIP
        ['failed']
        """
        found = await self.enqueuer.get_attempts_async(self.id)
        if found is None:
            raise JobNotFoundError(f"there is no job {self.id} (pruned by retention?)")
        return found

    def steps(self) -> list[Step]:
        """The job's durable steps (docs/design.md "Durable execution"), in the order it first
        reached them: recorded ones with their result or error, a pending one (what a suspended
        job waits for) with `recorded_at` None.

        >>> [(s.name, s.kind, s.pending) for s in h.steps()]  # doctest: +SKIP
        [('charge', 'run', False), ('cool-off', 'sleep', True)]
        """
        return self.enqueuer.get_steps(self.id)

    async def steps_async(self) -> list[Step]:
        """`steps()` for async code.

        >>> [s.name for s in await h.steps_async()]  # doctest: +SKIP
        ['charge', 'cool-off']
        """
        return await self.enqueuer.get_steps_async(self.id)

    def wait(self, timeout: float | None = None) -> Job:
        """The Job once it is succeeded, failed, held or canceled; TimeoutError first else
        (`timeout=None` waits for ever). A failure is a Job like any other here.

        >>> job = h.wait(timeout=10)  # doctest: +SKIP
        >>> job.status, job.error["type"]  # doctest: +SKIP
        (<JobStatus.FAILED: 'failed'>, 'ValueError')
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self._existing()
            if job.resting:
                return job
            left = _left(deadline)
            if left == 0.0:
                raise TimeoutError(f"job {self.id} did not finish within {timeout}s")
            self.enqueuer.wait_for(self.id, left)

    def get(self, timeout: float | None = None) -> Any:
        """The job's result once it succeeded. TaskFailedError when it ended failed or held
        (with the remote error's type, message and traceback), TaskCanceledError when it was
        canceled, TimeoutError when `timeout` passes first.

        >>> add.delay(2, 3).get(timeout=10)  # doctest: +SKIP
        5
        """
        return _result(self.wait(timeout))

    async def wait_async(self, timeout: float | None = None) -> Job:
        """`wait()` for async code.

        >>> (await h.wait_async(timeout=10)).status  # doctest: +SKIP
        <JobStatus.SUCCEEDED: 'succeeded'>
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = await self._existing_async()
            if job.resting:
                return job
            left = _left(deadline)
            if left == 0.0:
                raise TimeoutError(f"job {self.id} did not finish within {timeout}s")
            await self.enqueuer.wait_for_async(self.id, left)

    async def get_async(self, timeout: float | None = None) -> Any:
        """`get()` for async code.

        >>> await (await add.delay_async(2, 3)).get_async(timeout=10)  # doctest: +SKIP
        5
        """
        return _result(await self.wait_async(timeout))

    def cancel(self) -> JobStatus:
        """A scheduled, ready or held job is canceled at once; a running one is asked to stop
        (it ends canceled when its handler returns, its capacity held until then). Returns the
        job's status afterwards.

        >>> send.apply_async(({"tenant": "t1"},), countdown=60).cancel()  # doctest: +SKIP
        <JobStatus.CANCELED: 'canceled'>
        """
        self.enqueuer.cancel([self.id])
        return self._existing().status

    def retry(self) -> JobStatus:
        """A failed, held or canceled job runs again, with a fresh set of attempts. Returns the
        job's status afterwards.

        >>> h.retry()                                 # h had failed  # doctest: +SKIP
        <JobStatus.READY: 'ready'>
        """
        self.enqueuer.retry([self.id])
        return self._existing().status

    def _existing(self) -> Job:
        job = self.job()
        if job is None:
            raise JobNotFoundError(f"there is no job {self.id} (pruned by retention?)")
        return job

    async def _existing_async(self) -> Job:
        job = await self.job_async()
        if job is None:
            raise JobNotFoundError(f"there is no job {self.id} (pruned by retention?)")
        return job


@dataclass(frozen=True, slots=True)
class WorkflowHandle:
    """A workflow's handle, from `canvas.delay()` or `app.workflow(id)` in any process.

    >>> h = chord(group(count.s(p) for p in pages), total.s()).delay()   # doctest: +SKIP
    >>> h.get(timeout=60)                                               # doctest: +SKIP
    1234
    """

    id: int
    enqueuer: Any = field(repr=False, compare=False)
    # Under eager(): the member ids and the result's members and kind, kept in memory.
    eager: tuple[tuple[int, ...], tuple[int, ...], str] | None = field(
        default=None, repr=False, compare=False)
    # The member ids in insertion order, when the enqueue that made the handle knows them.
    member_ids: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def jobs(self) -> list[Job]:
        """The members, in insertion order.

        >>> [j.status for j in h.jobs()]                             # doctest: +SKIP
        """
        if self.eager is not None:
            return [self.enqueuer.get_job(i) for i in self.eager[0]]
        jobs: list[Job] = self.enqueuer.workflow_jobs(self.id)
        return jobs

    def shape(self) -> tuple[tuple[int, ...], str]:
        """The members whose results make the workflow's, and how ('one', 'list').

        >>> h.shape()                                                # doctest: +SKIP
        ((12,), 'one')
        """
        if self.eager is not None:
            return self.eager[1], self.eager[2]
        row = self.enqueuer.workflow_row(self.id)
        if row is None:
            raise JobNotFoundError(f"there is no workflow {self.id} (pruned by retention?)")
        return tuple(row[1]), row[2]

    def status(self) -> WorkflowStatus:
        """Members counted by status, and whether all of them finished.

        >>> h.status().counts                                        # doctest: +SKIP
        """
        counts: dict[str, int] = {}
        finished = True
        for job in self.jobs():
            counts[job.status.value] = counts.get(job.status.value, 0) + 1
            finished = finished and job.resting and job.status is not JobStatus.HELD
        return WorkflowStatus(id=self.id, counts=counts, finished=finished)

    def _outcome(self, result: tuple[int, ...], kind: str) -> tuple[bool, Any]:
        jobs = self.jobs()
        by_id = {job.id: job for job in jobs}
        stuck = [job for job in jobs if job.status in (JobStatus.FAILED, JobStatus.HELD)]
        if stuck:
            first = min(stuck, key=lambda j: (j.finished_at is None, j.finished_at, j.id))
            error = first.error or {}
            raise TaskFailedError(
                f"workflow {self.id}: job {first.id} ({first.task}) ended {first.status.value}: "
                f"{error.get('type')}: {error.get('message')}", first)
        wanted = [by_id[i] for i in result if i in by_id]
        canceled = [job for job in wanted if job.status is JobStatus.CANCELED]
        if canceled:
            raise TaskCanceledError(f"workflow {self.id} was canceled", canceled[0])
        if wanted and all(job.status is JobStatus.SUCCEEDED for job in wanted):
            if kind == "one":
                return True, wanted[0].result
            return True, [job.result for job in wanted]
        return False, None

    def get(self, timeout: float | None = None) -> Any:
        """The canvas's result once it succeeded (a chain's last member's, a group's list, a
        chord's callback's); TaskFailedError naming the first member that ended failed or
        held; TaskCanceledError when it was canceled; TimeoutError when `timeout` passes first.

        >>> h.get(timeout=60)                                        # doctest: +SKIP
        20
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        result, kind = self.shape()
        while True:
            done, value = self._outcome(result, kind)
            if done:
                return value
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if left == 0.0:
                raise TimeoutError(f"workflow {self.id} did not finish within {timeout}s")
            # A held member upstream notifies nothing the result members would: look again
            # at least once a second.
            self.enqueuer.wait_for(result[-1], 1.0 if left is None else min(left, 1.0))

    def cancel(self) -> list[int]:
        """Cancel every unfinished member (active ones get a cancel request).

        >>> h.cancel()                                               # doctest: +SKIP
        """
        ids = [job.id for job in self.jobs() if not job.resting or job.status is JobStatus.HELD]
        changed: list[int] = self.enqueuer.cancel(ids) if ids else []
        return changed


def dependencies(depends_on: object) -> list[Dependency]:
    """What a `depends_on` list stands for, with no I/O: job ids (an id, a JobHandle's), and
    WorkflowResults (a WorkflowHandle's result members, which the enqueue reads on its own
    connection; an eager one's are known already). Each job id once, in order.

    >>> dependencies([7, JobHandle(8, None), 7, WorkflowHandle(3, None)])
    [7, 8, WorkflowResult(workflow_id=3)]
    """
    if isinstance(depends_on, str | bytes) or not isinstance(depends_on, Sequence):
        raise InvalidOptionsError(
            f"depends_on must be a list of job ids or handles, got {depends_on!r}")
    found: list[Dependency] = []
    for entry in depends_on:
        if isinstance(entry, WorkflowHandle):
            if entry.eager is None:
                found.append(WorkflowResult(entry.id))
                continue
            ids: list[Dependency] = list(entry.eager[1])
        elif isinstance(entry, JobHandle):
            ids = [entry.id]
        elif isinstance(entry, bool) or not isinstance(entry, int):
            raise InvalidOptionsError(
                f"depends_on takes job ids, JobHandles or WorkflowHandles, got {entry!r}")
        else:
            ids = [entry]
        found += [job_id for job_id in ids if job_id not in found]
    return found


def dependency_databases(depends_on: object) -> set[str]:
    """The databases of the handles in a `depends_on` list (docs/design.md "Several
    databases"): a JobHandle's, a WorkflowHandle's (its enqueuer's); bare ids name none.

    >>> sorted(dependency_databases([7, JobHandle(8, None, database="eu")]))
    ['eu']
    """
    if isinstance(depends_on, str | bytes) or not isinstance(depends_on, Sequence):
        return set()
    found = set()
    for entry in depends_on:
        if isinstance(entry, JobHandle):
            found.add(entry.database)
        elif isinstance(entry, WorkflowHandle) and entry.eager is None:
            found.add(getattr(entry.enqueuer, "database", "default"))
    return found

