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

from .errors import JobNotFoundError, TaskCanceledError, TaskFailedError
from .types import Attempt, Job, JobStatus, Progress, check_id


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

    def wait_for(self, job_id: int, timeout: float | None) -> bool:
        """Block until the job may have reached a resting status (True) or `timeout` passed."""
        ...

    async def wait_for_async(self, job_id: int, timeout: float | None) -> bool: ...

    def cancel(self, ids: Sequence[int]) -> list[int]: ...

    def retry(self, ids: Sequence[int]) -> list[int]: ...


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
