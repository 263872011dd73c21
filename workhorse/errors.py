"""One hierarchy of errors, and the one place that maps PostgreSQL errors onto it."""

from __future__ import annotations

from typing import Any

import psycopg


class WorkhorseError(Exception):
    """Base class of every error workhorse raises on purpose."""


class InvalidOptionsError(WorkhorseError, ValueError):
    """Bad enqueue options or concurrency key."""


class PayloadError(WorkhorseError, ValueError):
    """A payload or result that is not JSON, or is too large."""


class InvalidPolicyError(WorkhorseError, ValueError):
    """A bad policy definition, or two declarations that disagree."""


class PolicyConflictError(WorkhorseError):
    """Another namespace owns the queue."""


class InvalidScheduleError(WorkhorseError, ValueError):
    """A bad schedule: cron expression, interval, time zone, catch-up policy or arguments."""


class ScheduleConflictError(PolicyConflictError, InvalidScheduleError):
    """Another namespace owns the schedule name (a PolicyConflictError, as for a queue, and an
    InvalidScheduleError, since the definition cannot be stored)."""


class UnknownTaskError(WorkhorseError, LookupError):
    """A task name the app does not know."""


class JobNotFoundError(WorkhorseError, LookupError):
    """No job with that id (never enqueued, or pruned by retention)."""


class StaleLeaseError(WorkhorseError):
    """A fence was rejected: the job was claimed again, or the lease already expired."""


class TaskFailedError(WorkhorseError):
    """`JobHandle.get` on a job that ended failed or held; `.job` is the Job."""

    def __init__(self, message: str, job: Any = None) -> None:
        super().__init__(message)
        self.job = job


class TaskCanceledError(WorkhorseError):
    """`JobHandle.get` on a canceled job; `.job` is the Job."""

    def __init__(self, message: str, job: Any = None) -> None:
        super().__init__(message)
        self.job = job


class JobTimeoutError(WorkhorseError, TimeoutError):
    """An attempt ran past its task's `timeout=` (recorded as the job's error type)."""


class NoCurrentJobError(WorkhorseError, LookupError):
    """`current_job()` outside a running job's handler."""


class SchemaVersionError(WorkhorseError):
    """The database schema is newer than this code."""


class DatabaseError(WorkhorseError):
    """The database could not be reached or refused a statement."""


class EmbeddedServerError(DatabaseError):
    """The embedded PostgreSQL server could not be started or stopped."""


class AppLoadError(WorkhorseError):
    """`module:attribute` did not name an importable App."""


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
