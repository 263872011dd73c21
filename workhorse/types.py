"""The public data types: frozen dataclasses validated when they are built."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .errors import InvalidOptionsError, InvalidPolicyError, WorkhorseError

NAME_MAX = 255
PRIORITY_MIN, PRIORITY_MAX = -32768, 32767
MAX_ATTEMPTS_LIMIT = 1000
MAX_POLICY_DEFINITIONS = 1000
LIMIT_MAX = 1_000_000
# A due time must stay a datetime that both Python and PostgreSQL can represent.
MAX_DELAY_SECONDS = 1000 * 366 * 86400.0


class JobStatus(enum.StrEnum):
    SCHEDULED = "scheduled"
    READY = "ready"
    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    HELD = "held"
    CANCELED = "canceled"


def check_name(
    what: str, value: object, error: type[WorkhorseError] = InvalidOptionsError
) -> str:
    """`value` if it is a name PostgreSQL can store (1-255 characters, no NUL); else `error`
    (InvalidPolicyError where the name belongs to a policy declaration)."""
    if not isinstance(value, str) or not 1 <= len(value) <= NAME_MAX:
        raise error(f"{what} must be a string of 1-{NAME_MAX} characters, got {value!r}")
    if "\x00" in value:
        raise error(f"{what} must not contain NUL characters")
    return value


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Where and how a job is enqueued.

    >>> EnqueueOptions(queue="mail", concurrency_key="tenant-1", priority=5, delay=30).queue
    'mail'
    """

    queue: str = "default"
    concurrency_key: str | None = None
    priority: int = 0
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    max_attempts: int = 3

    def __post_init__(self) -> None:
        check_name("queue", self.queue)
        if self.concurrency_key is not None:
            check_name("concurrency_key", self.concurrency_key)
        if type(self.priority) is not int or not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise InvalidOptionsError(
                f"priority must be an int in [{PRIORITY_MIN}, {PRIORITY_MAX}], "
                f"got {self.priority!r}"
            )
        if type(self.max_attempts) is not int or not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidOptionsError(
                f"max_attempts must be an int in [1, {MAX_ATTEMPTS_LIMIT}], "
                f"got {self.max_attempts!r}"
            )
        if self.run_at is not None and self.delay is not None:
            raise InvalidOptionsError("give run_at or delay, not both")
        if self.run_at is not None:
            if not isinstance(self.run_at, datetime):
                raise InvalidOptionsError(f"run_at must be a datetime, got {self.run_at!r}")
            if self.run_at.tzinfo is None or self.run_at.utcoffset() is None:
                raise InvalidOptionsError("run_at must be timezone-aware")
        if self.delay is not None:
            seconds = delay_seconds(self.delay)
            if not 0 <= seconds <= MAX_DELAY_SECONDS:
                raise InvalidOptionsError(
                    f"delay must be between 0 seconds and 1000 years, got {self.delay!r}"
                )

    @property
    def delay_seconds(self) -> float | None:
        return None if self.delay is None else delay_seconds(self.delay)


def delay_seconds(delay: object) -> float:
    if isinstance(delay, timedelta):
        return delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise InvalidOptionsError(f"delay must be seconds or a timedelta, got {delay!r}")
    if delay != delay or delay in (float("inf"), float("-inf")):
        raise InvalidOptionsError(f"delay must be finite, got {delay!r}")
    return float(delay)


def _check_limit(what: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if type(value) is not int or not 1 <= value <= LIMIT_MAX:
        raise InvalidPolicyError(f"{what} must be an int in [1, {LIMIT_MAX}], got {value!r}")


@dataclass(frozen=True, slots=True)
class ConcurrencyPolicyDefinition:
    """A queue's limits as declared: queue-wide `max_active`, optional `max_active_per_key`.

    `max_active=None` with a per-key limit means "limit per key, no queue-wide limit".

    >>> ConcurrencyPolicyDefinition(queue="mail", max_active=20, max_active_per_key=3).max_active
    20
    """

    queue: str
    max_active: int | None
    max_active_per_key: int | None = None

    def __post_init__(self) -> None:
        check_name("queue", self.queue, InvalidPolicyError)
        _check_limit("max_active", self.max_active, optional=True)
        _check_limit("max_active_per_key", self.max_active_per_key, optional=True)
        if self.max_active is None and self.max_active_per_key is None:
            raise InvalidPolicyError(
                f"queue {self.queue!r}: a policy needs max_active, max_active_per_key, or both"
            )
        if (
            self.max_active is not None
            and self.max_active_per_key is not None
            and self.max_active_per_key > self.max_active
        ):
            raise InvalidPolicyError(
                f"queue {self.queue!r}: max_active_per_key ({self.max_active_per_key}) "
                f"must be <= max_active ({self.max_active})"
            )


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A named queue and its limits, shared by every task that names it.

    >>> QueueSpec("openai-api", max_active=5).definition()
    ConcurrencyPolicyDefinition(queue='openai-api', max_active=5, max_active_per_key=None)
    """

    name: str
    max_active: int | None = None
    max_active_per_key: int | None = None

    @property
    def governed(self) -> bool:
        return self.max_active is not None or self.max_active_per_key is not None

    def definition(self) -> ConcurrencyPolicyDefinition | None:
        if not self.governed:
            return None
        return ConcurrencyPolicyDefinition(self.name, self.max_active, self.max_active_per_key)


@dataclass(frozen=True, slots=True)
class ConcurrencyPolicy:
    """A policy as stored in PostgreSQL."""

    namespace: str
    queue: str
    max_active: int | None
    max_active_per_key: int | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Job:
    """One job row."""

    id: int
    task: str
    queue: str
    concurrency_key: str | None
    priority: int
    payload: Any
    status: JobStatus
    attempts: int
    max_attempts: int
    result: Any
    error: dict[str, Any] | None
    run_at: datetime
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    on_failure: str = "fail"
    fence: int | None = None
    lease_until: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PolicyHealth:
    namespace: str
    queue: str
    max_active: int | None
    max_active_per_key: int | None
    active: int
    available: int | None
    blocked_ready: int
    saturated_keys: int
    capped: bool


@dataclass(frozen=True, slots=True)
class QueueHealth:
    policies: list[PolicyHealth]
    depth: dict[str, int]


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job handed to a worker, with the fence that must accompany its outcome."""

    id: int
    task: str
    queue: str
    concurrency_key: str | None
    priority: int
    payload: Any
    attempts: int
    max_attempts: int
    fence: int
    lease_until: datetime
    enqueued_at: datetime
    run_at: datetime
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What `App.sync()` changed, as lists of queue names."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker supervisor's row in `workhorse.workers`: alive while it touched `last_seen` in
    the last 30 seconds; `stats` holds its running counters."""

    id: int
    app: str
    host: str
    pid: int
    slots: int
    queues: list[str]
    started_at: datetime
    last_seen: datetime
    stats: dict[str, Any]
    alive: bool


def asdict(value: Any) -> dict[str, Any]:
    return dataclasses.asdict(value)
