"""One hierarchy of errors, and the one place that maps PostgreSQL errors onto it."""

from __future__ import annotations

from typing import Any

import psycopg


class WorkhorseError(Exception):
    """Base class of every error workhorse raises on purpose.

    >>> try:
    ...     EnqueueOptions(max_attempts=0)
    ... except WorkhorseError as exc:
    ...     print(type(exc).__name__)
    InvalidOptionsError
    """


class InvalidOptionsError(WorkhorseError, ValueError):
    """Bad enqueue options or concurrency key.

    >>> EnqueueOptions(queue="mail", max_attempts=0)
    Traceback (most recent call last):
    ...
    workhorse.errors.InvalidOptionsError: ...
    """


class PayloadError(WorkhorseError, ValueError):
    """A payload or result that is not JSON, or is too large.

    >>> from workhorse.queue import encode_json
    >>> encode_json({1, 2})
    Traceback (most recent call last):
    ...
    workhorse.errors.PayloadError: ...
    """


class InvalidPolicyError(WorkhorseError, ValueError):
    """A bad policy definition, or two declarations that disagree.

    >>> App("docs").queue("mail", max_active=0)
    Traceback (most recent call last):
    ...
    workhorse.errors.InvalidPolicyError: ...
    """


class PolicyConflictError(WorkhorseError):
    """Another namespace owns the queue.

    >>> mail = ConcurrencyPolicyDefinition("mail", max_active=5)   # "mail" is "billing"'s
    >>> q.sync_concurrency_policies("other-app", [mail])           # doctest: +SKIP
    Traceback (most recent call last):
    ...
    workhorse.errors.PolicyConflictError: ...
    """


class InvalidScheduleError(WorkhorseError, ValueError):
    """A bad schedule: cron expression, interval, time zone, catch-up policy or arguments.

    >>> ScheduleDefinition(name="digest", task="mail.digest", cron="every day")
    Traceback (most recent call last):
    ...
    workhorse.errors.InvalidScheduleError: ...
    """


class ScheduleConflictError(PolicyConflictError, InvalidScheduleError):
    """Another namespace owns the schedule name (a PolicyConflictError, as for a queue, and an
    InvalidScheduleError, since the definition cannot be stored).

    >>> other_app.sync()            # its schedule "digest" is billing's  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    workhorse.errors.ScheduleConflictError: ...
    """


class UnknownTaskError(WorkhorseError, LookupError):
    """A task name the app does not know.

    >>> App("docs").send_task("mail.unknown")
    Traceback (most recent call last):
    ...
    workhorse.errors.UnknownTaskError: ...
    """


class JobNotFoundError(WorkhorseError, LookupError):
    """No job with that id (never enqueued, or pruned by retention).

    >>> app.handle(999_999).get()                  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    workhorse.errors.JobNotFoundError: there is no job 999999 (pruned by retention?)
    """


class DependencyFailedError(WorkhorseError):
    """Recorded (as a job's `error["type"]`) on a workflow member canceled because a member it
    depends on failed or was canceled; `error["dependency"]` is that member's id.

    >>> job = h.jobs()[-1]                                 # doctest: +SKIP
    >>> job.status, job.error["type"]                      # doctest: +SKIP
    ('canceled', 'DependencyFailedError')
    """


class StaleLeaseError(WorkhorseError):
    """A fence was rejected: the job was claimed again, or the lease already expired.

    >>> q.complete(job.id, job.fence - 1)  # claimed again since  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    workhorse.errors.StaleLeaseError: ...
    """


class TaskFailedError(WorkhorseError):
    """`JobHandle.get` on a job that ended failed or held; `.job` is the Job.

    >>> try:
    ...     boom.delay().get(timeout=10)                # doctest: +SKIP
    ... except TaskFailedError as exc:
    ...     print(exc.job.status, exc.job.error["type"])
    failed ValueError
    """

    def __init__(self, message: str, job: Any = None) -> None:
        super().__init__(message)
        self.job = job


class TaskCanceledError(WorkhorseError):
    """`JobHandle.get` on a canceled job; `.job` is the Job.

    >>> h = send.delay({"tenant": "t1"}); h.cancel()   # doctest: +SKIP
    <JobStatus.CANCELED: 'canceled'>
    >>> h.get()                                       # doctest: +SKIP
    Traceback (most recent call last):
    ...
    workhorse.errors.TaskCanceledError: job 42 (billing.send) was canceled
    """

    def __init__(self, message: str, job: Any = None) -> None:
        super().__init__(message)
        self.job = job


class JobTimeoutError(WorkhorseError, TimeoutError):
    """An attempt ran past its task's `timeout=` (recorded as the job's error type).

    >>> issubclass(JobTimeoutError, TimeoutError)
    True
    >>> job.error["type"]    # a job whose attempt ran past timeout=  # doctest: +SKIP
    'JobTimeoutError'
    """


class SignalTimeoutError(WorkhorseError, TimeoutError):
    """A durable `step.wait_for(name, signal=..., timeout=...)` whose timeout passed before its
    signal came (docs/design.md "Durable execution"). Recorded with the step: a later run of the
    job raises it again at the same wait.

    >>> try:                                              # in a handler  # doctest: +SKIP
    ...     approval = current_job().step.wait_for("approve", signal="approval", timeout="1d")
    ... except SignalTimeoutError:
    ...     approval = None
    """


class HoldTimeoutError(WorkhorseError, TimeoutError):
    """A budget hold (`app.budget(name).hold(...)`) was not granted within its `timeout`:
    nothing is held (docs/design.md "Holds").

    >>> issubclass(HoldTimeoutError, TimeoutError)
    True
    """


class CostExceedsLimitError(WorkhorseError):
    """Recorded: on a job the claim held because its `cost` (or `rate_cost`) can never fit its
    queue's synced policy (docs/design.md "Fair share and job cost"). An enqueue that knows the
    policy refuses such a job with InvalidOptionsError instead.

    >>> job.error["type"]    # a job of cost 8 on a queue of max_active=4  # doctest: +SKIP
    'CostExceedsLimitError'
    """


class NoCurrentJobError(WorkhorseError, LookupError):
    """`current_job()` outside a running job's handler.

    >>> current_job()
    Traceback (most recent call last):
    ...
    workhorse.errors.NoCurrentJobError: ...
    """


class SchemaVersionError(WorkhorseError):
    """The database schema is newer than this code.

    >>> Queue(conn).install_schema()   # a database newer than this code  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    workhorse.errors.SchemaVersionError: ...
    """


class DatabaseError(WorkhorseError):
    """The database could not be reached or refused a statement.

    >>> issubclass(EmbeddedServerError, DatabaseError)
    True
    """


class EmbeddedServerError(DatabaseError):
    """The embedded PostgreSQL server could not be started or stopped.

    >>> isinstance(EmbeddedServerError("initdb failed"), DatabaseError)
    True
    """


class AppLoadError(WorkhorseError):
    """`module:attribute` did not name an importable App.

    >>> load_app("no_such_module_here:app")
    Traceback (most recent call last):
    ...
    workhorse.errors.AppLoadError: ...
    """


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (or its repr), for one-line logs and errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


# Our SQL functions raise with these SQLSTATEs (class WH) so that Python can map them back.
_SQLSTATE_ERRORS: dict[str, type[WorkhorseError]] = {
    "WH001": PolicyConflictError,
    "WH002": InvalidPolicyError,
    "WH003": StaleLeaseError,
    "WH004": SchemaVersionError,
    "WH005": InvalidOptionsError,
    "WH006": ScheduleConflictError,
}


def translate(exc: psycopg.Error) -> WorkhorseError | None:
    """The workhorse error for a database error raised by our own SQL, if it is one."""
    sqlstate = exc.sqlstate or ""
    error_class = _SQLSTATE_ERRORS.get(sqlstate)
    if error_class is None:
        return None
    message = exc.diag.message_primary or str(exc)
    return error_class(message)
