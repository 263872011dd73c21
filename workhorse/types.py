"""The public data types: frozen dataclasses validated when they are built."""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from . import _occurrences
from ._durations import parse_duration
from .errors import InvalidOptionsError, InvalidPolicyError, InvalidScheduleError, WorkhorseError

NAME_MAX = 255
PRIORITY_MIN, PRIORITY_MAX = -32768, 32767
MAX_ATTEMPTS_LIMIT = 1000
MAX_POLICY_DEFINITIONS = 1000
LIMIT_MAX = 1_000_000
# docs/design.md "Fair share and job cost": a job's cost and rate cost, and its key's weight.
COST_MAX = 1_000_000
WEIGHT_MAX = 1000
FAIRNESS_MODES = ("fifo", "key")
# docs/design.md "Job keys": what an enqueue does when its job's key is full.
ON_KEY_FULL_MODES = ("queue", "cancel_in_progress", "cancel_newest")
# A due time must stay a datetime that both Python and PostgreSQL can represent.
MAX_DELAY_SECONDS = 1000 * 366 * 86400.0


class JobStatus(enum.StrEnum):
    """A job's status (docs/design.md's status table). A `str`, so it compares to its value.

    >>> JobStatus("held") is JobStatus.HELD, JobStatus.READY == "ready"
    (True, True)
    """
    WAITING = "waiting"
    SCHEDULED = "scheduled"
    READY = "ready"
    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    HELD = "held"
    CANCELED = "canceled"

    @classmethod
    def of_row(cls, value: str) -> JobStatus:
        """The status a row holds, also one this version does not know (a newer release's
        worker may write it beside this one's): it reads as itself, never as an error.

        >>> JobStatus.of_row("ready") is JobStatus.READY
        True
        >>> str(JobStatus.of_row("paused-by-a-newer-release"))
        'paused-by-a-newer-release'
        """
        try:
            return cls(value)
        except ValueError:
            unknown = str.__new__(cls, value)
            unknown._name_ = value.upper()
            unknown._value_ = value
            return unknown


RESTING = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.HELD, JobStatus.CANCELED})


RETENTION_STATUSES = ("succeeded", "failed", "canceled")
DEFAULT_RETENTION: dict[str, float | None] = {
    "succeeded": 86400.0, "failed": 7 * 86400.0, "canceled": 86400.0,
}


def retention_seconds(
    retention: object, base: dict[str, float | None] | None = None
) -> dict[str, float | None]:
    """`{"succeeded": "1d", "failed": "7d", "canceled": "1d"}` (durations; None keeps for ever)
    over `base` (the defaults); InvalidOptionsError for an unknown status or a bad duration.

    >>> retention_seconds({"failed": "30d"})["failed"]
    2592000.0
    """
    merged = dict(DEFAULT_RETENTION if base is None else base)
    if retention is None:
        return merged
    if not isinstance(retention, dict):
        raise InvalidOptionsError(f"retention must be a dict of status -> duration, got "
                                  f"{retention!r}")
    for status, value in retention.items():
        if status not in RETENTION_STATUSES:
            raise InvalidOptionsError(
                f"retention: {status!r} is not one of {', '.join(RETENTION_STATUSES)} "
                "(held jobs are kept until an operator acts)"
            )
        if value is None:
            merged[status] = None
            continue
        try:
            seconds = parse_duration(value, maximum=MAX_DELAY_SECONDS)
        except ValueError as exc:
            raise InvalidOptionsError(f"retention[{status!r}]: {exc}") from None
        if seconds > MAX_DELAY_SECONDS:
            raise InvalidOptionsError(f"retention[{status!r}] is too long: {value!r}")
        merged[status] = seconds
    return merged


def shown(value: object, limit: int = 60) -> str:
    """`repr(value)` cut to about `limit` characters, for error messages: a 10,000-character
    name must not become a 10,000-character message (or page)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more)"


def check_name(
    what: str, value: object, error: type[WorkhorseError] = InvalidOptionsError
) -> str:
    """`value` if it is a name PostgreSQL can store (1-255 characters, no NUL, valid Unicode:
    no lone surrogate); else `error` (InvalidPolicyError where the name belongs to a policy
    declaration). Checked before any statement is sent, so a bad name writes nothing."""
    if not isinstance(value, str) or not 1 <= len(value) <= NAME_MAX:
        raise error(f"{what} must be a string of 1-{NAME_MAX} characters, got {shown(value)}")
    if "\x00" in value:
        raise error(f"{what} must not contain NUL characters, got {shown(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise error(f"{what} contains a lone surrogate (not valid Unicode): "
                        f"{shown(value)}") from None
    return value


def check_optional_name(
    what: str, value: object, error: type[WorkhorseError] = InvalidOptionsError
) -> str | None:
    """None, or a name as `check_name` accepts it (a filter, an optional namespace)."""
    return None if value is None else check_name(what, value, error)


# Job ids (and fences) are PostgreSQL bigints.
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
INT_MAX = 2**31 - 1


def check_id(value: object, what: str = "a job id") -> int:
    """`value` if it is an int (not a bool) within PostgreSQL's bigint; else
    InvalidOptionsError, before anything is sent."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionsError(f"{what} is an int, got {shown(value)}")
    if not BIGINT_MIN <= value <= BIGINT_MAX:
        raise InvalidOptionsError(f"{what} must fit in a bigint (at most {BIGINT_MAX}), "
                                  f"got {shown(value)}")
    return int(value)


def check_count(value: object, what: str, low: int = 1, high: int = INT_MAX) -> int:
    """An int (not a bool) in [low, high]; else InvalidOptionsError."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidOptionsError(f"{what} must be an int in [{low}, {high}], got {shown(value)}")
    return int(value)


UNIQUE_BY = ("args", "queue", "concurrency_key")
UNIQUE_STATES_DEFAULT = ("waiting", "scheduled", "ready", "active")
# What `Unique.states` may name: every status a job can be in (workflows add `waiting`).
JOB_STATUSES = ("waiting", "scheduled", "ready", "active", "succeeded", "failed", "held",
                "canceled")
JOB_KEY_MODES = ("replace", "preserve_run_at")


def _names_tuple(what: str, value: object, allowed: tuple[str, ...] | None) -> tuple[str, ...]:
    """A non-empty tuple of distinct names (a list or tuple of str), each in `allowed` when
    given; else InvalidOptionsError. A lone str is refused: ("args") is a str, not a tuple."""
    if isinstance(value, str) or not isinstance(value, tuple | list) or not value:
        raise InvalidOptionsError(f"{what} must be a non-empty tuple of names, got {shown(value)}")
    for item in value:
        if not isinstance(item, str) or not item:
            raise InvalidOptionsError(f"{what} must hold non-empty strings, got {shown(value)}")
        if allowed is not None and item not in allowed:
            raise InvalidOptionsError(
                f"{what}: {item!r} is not one of {', '.join(allowed)}")
    if len(set(value)) != len(value):
        raise InvalidOptionsError(f"{what} names one thing twice: {shown(value)}")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class Unique:
    """No second job while an equal one is in `states`: an enqueue is a duplicate when a job of
    the same task with equal `by` values is in one of `states` (and, with `period`, was
    enqueued in the same period, counted from the Unix epoch). A duplicate inserts nothing and
    returns the existing job's handle (`duplicate` is True).

    `by` is a subset of "args" (the call's arguments bound through the task's signature, so
    `f(42)` equals `f(user_id=42)`; `keys` compares only the named ones), "queue" and
    "concurrency_key". `period` is a duration ("1h", seconds, a timedelta), kept in seconds.

    >>> Unique(by=("args",), keys=("user_id",), period="1h").period
    3600.0
    >>> Unique(states=("ready",)).by
    ('args',)
    """

    by: tuple[str, ...] = ("args",)
    keys: tuple[str, ...] | None = None
    period: float | str | timedelta | None = None
    states: tuple[str, ...] = UNIQUE_STATES_DEFAULT

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", _names_tuple("Unique.by", self.by, UNIQUE_BY))
        if self.keys is not None:
            object.__setattr__(self, "keys", _names_tuple("Unique.keys", self.keys, None))
            if "args" not in self.by:
                raise InvalidOptionsError("Unique.keys names arguments: by= must include 'args'")
        object.__setattr__(self, "states",
                           _names_tuple("Unique.states", self.states, JOB_STATUSES))
        if self.period is not None:
            if isinstance(self.period, bool):
                raise InvalidOptionsError(f"Unique.period must be a duration, got {self.period!r}")
            try:
                seconds = parse_duration(self.period, maximum=MAX_DELAY_SECONDS)
            except (TypeError, ValueError) as exc:
                raise InvalidOptionsError(f"Unique.period: {exc}") from None
            if not 0 < seconds <= MAX_DELAY_SECONDS:
                raise InvalidOptionsError(
                    f"Unique.period must be more than 0 and at most 1000 years, "
                    f"got {self.period!r}")
            object.__setattr__(self, "period", float(seconds))

    @property
    def period_seconds(self) -> float | None:
        """`period` in seconds, or None without one.

        >>> Unique(period="1s").period_seconds, Unique().period_seconds
        (1.0, None)
        """
        return None if self.period is None else float(self.period)  # type: ignore[arg-type]


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
    delay: float | str | timedelta | None = None
    max_attempts: int = 3
    idempotency_key: str | None = None
    # docs/design.md "Job keys": at most one of idempotency_key, unique and job_key.
    unique: Unique | None = None
    job_key: str | None = None
    job_key_mode: str = "replace"
    # docs/design.md "Fair share and job cost": units of max_active (and of max_active_per_key) the
    # job occupies, starts it counts against the rate limits, and its key's weight.
    cost: int = 1
    rate_cost: int = 1
    weight: int = 1
    # docs/design.md "Workflows": job ids, JobHandles or WorkflowHandles it runs after (empty:
    # none).
    depends_on: tuple[Any, ...] = ()
    # docs/design.md "Named budgets": the budget the job names (declared or not), or None.
    budget: str | None = None

    def __post_init__(self) -> None:
        check_name("queue", self.queue)
        if self.budget is not None:
            check_name("budget", self.budget)
        check_cost("cost", self.cost)
        check_cost("rate_cost", self.rate_cost)
        check_weight(self.weight)
        if isinstance(self.depends_on, str | bytes) or not isinstance(
                self.depends_on, tuple | list):
            raise InvalidOptionsError(
                f"depends_on must be a list of job ids or handles, got {shown(self.depends_on)}")
        if isinstance(self.depends_on, list):
            object.__setattr__(self, "depends_on", tuple(self.depends_on))
        if self.concurrency_key is not None:
            check_name("concurrency_key", self.concurrency_key)
        if self.idempotency_key is not None:
            check_name("idempotency_key", self.idempotency_key)
        if self.unique is not None and not isinstance(self.unique, Unique):
            raise InvalidOptionsError(
                f"unique must be a workhorse.Unique, got {shown(self.unique)}")
        if self.job_key is not None:
            check_name("job_key", self.job_key)
        if not isinstance(self.job_key_mode, str) or self.job_key_mode not in JOB_KEY_MODES:
            raise InvalidOptionsError(
                f"job_key_mode must be one of {', '.join(JOB_KEY_MODES)}, "
                f"got {shown(self.job_key_mode)}")
        given = [name for name in ("idempotency_key", "unique", "job_key")
                 if getattr(self, name) is not None]
        if len(given) > 1:
            raise InvalidOptionsError(
                "give at most one of idempotency_key, unique and job_key, got "
                + " and ".join(given))
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
        """`delay` in seconds (a timedelta converted), or None when there is none.

        >>> EnqueueOptions(delay=90).delay_seconds, EnqueueOptions().delay_seconds
        (90.0, None)
        """
        return None if self.delay is None else delay_seconds(self.delay)


def check_cost(what: str, value: object) -> int:
    """A job's `cost` or `rate_cost`: an int in [1, 1,000,000], not a bool.

    >>> check_cost("cost", 4)
    4
    """
    if type(value) is not int or not 1 <= value <= COST_MAX:
        raise InvalidOptionsError(
            f"{what} must be an int in [1, {COST_MAX:,}], got {shown(value)}")
    return value


def check_weight(value: object) -> int:
    """A job's `weight`: an int in [1, 1,000], not a bool.

    >>> check_weight(3)
    3
    """
    if type(value) is not int or not 1 <= value <= WEIGHT_MAX:
        raise InvalidOptionsError(
            f"weight must be an int in [1, {WEIGHT_MAX:,}], got {shown(value)}")
    return value


def delay_seconds(delay: object) -> float:
    if isinstance(delay, timedelta):
        return delay.total_seconds()
    if isinstance(delay, str):
        # "5s", "2m": docs/design.md's job_key example spells a delay so. A bare "5" stays refused:
        # a number comes as a number, not as text that happens to parse.
        if not delay.strip()[-1:].isalpha():
            raise InvalidOptionsError(
                f"delay must be seconds, a timedelta or a duration with a unit (\"5s\"), "
                f"got {shown(delay)}")
        try:
            return parse_duration(delay, maximum=MAX_DELAY_SECONDS)
        except ValueError as exc:
            raise InvalidOptionsError(f"delay: {exc}") from None
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise InvalidOptionsError(f"delay must be seconds or a timedelta, got {delay!r}")
    if delay != delay or delay in (float("inf"), float("-inf")):
        raise InvalidOptionsError(f"delay must be finite, got {delay!r}")
    try:
        return float(delay)
    except OverflowError:  # an int beyond any float
        raise InvalidOptionsError(f"delay must be at most 1000 years, got {shown(delay)}") from None


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\S+?)\s*$")
_RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
RATE_PERIOD_MAX = 366 * 86400.0


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `n` starts in any window of `period` seconds.

    >>> RateLimit.parse("100/m"), str(RateLimit.parse("5/10s"))
    (RateLimit(n=100, period=60.0), '5/10s')
    """

    n: int
    period: float

    @classmethod
    def parse(cls, spec: object, what: str = "rate_limit") -> RateLimit:
        """`N/s`, `N/m`, `N/h`, `N/d`, or `N/<duration>` such as `5/10s`; InvalidPolicyError."""
        if isinstance(spec, RateLimit):
            return spec
        match = _RATE.match(spec) if isinstance(spec, str) else None
        if match is None:
            raise InvalidPolicyError(
                f"{what} must look like N/s, N/m, N/h, N/d or N/<duration> (e.g. 100/m, 5/10s), "
                f"got {spec!r}"
            )
        if len(match.group(1)) > len(str(LIMIT_MAX)):  # int() refuses 4,300+ digits
            raise InvalidPolicyError(f"{what}: N must be in [1, {LIMIT_MAX}], got {shown(spec)}")
        count, unit = int(match.group(1)), match.group(2)
        if unit in _RATE_UNITS:
            period = _RATE_UNITS[unit]
        else:
            try:
                period = parse_duration(unit)
            except ValueError:
                raise InvalidPolicyError(f"{what}: {unit!r} is not a period, in {spec!r}") from None
        if not 1 <= count <= LIMIT_MAX:
            raise InvalidPolicyError(f"{what}: N must be in [1, {LIMIT_MAX}], got {spec!r}")
        if not 0 < period <= RATE_PERIOD_MAX:
            raise InvalidPolicyError(
                f"{what}: the period must be more than 0 and at most 366 days, got {spec!r}"
            )
        return cls(count, period)

    @classmethod
    def optional(cls, spec: object, what: str) -> RateLimit | None:
        return None if spec is None else cls.parse(spec, what)

    @classmethod
    def from_row(cls, n: int | None, period: float | None) -> RateLimit | None:
        return None if n is None or period is None else cls(int(n), float(period))

    def __str__(self) -> str:
        for unit, seconds in _RATE_UNITS.items():
            if self.period == seconds:
                return f"{self.n}/{unit}"
        # Fixed notation, every digit: the text must parse back to this very period. The
        # shortest repr that round-trips, without an exponent (1/0.051000000000000004s for
        # 51 ms, which format(..., "f") cut to 0.051: a different float).
        period = format(Decimal(repr(self.period)), "f")
        if "." in period:
            period = period.rstrip("0").rstrip(".")
        return f"{self.n}/{period}s"


def rate_text(n: int | None, period: float | None) -> str | None:
    """The stored (N, period) pair as users write it: "100/m", "5/10s"; None for none."""
    limit = RateLimit.from_row(n, period)
    return None if limit is None else str(limit)


def check_rate_burst(owner: str, what: str, burst: object, rate: RateLimit | None,
                     rate_name: str) -> int | None:
    """A rate burst B (docs/design.md "rate bursts"): None, or an int (not a bool) with
    1 <= B <= N of its rate; a burst without a rate is InvalidPolicyError, as is any other value.

    >>> check_rate_burst("queue 'mail'", "rate_burst", 10, RateLimit(100, 60.0), "rate_limit")
    10
    """
    if burst is None:
        return None
    if rate is None:
        raise InvalidPolicyError(
            f"{owner}: {what}={shown(burst)} needs {rate_name} (a burst is a bound within a rate)")
    if type(burst) is not int or not 1 <= burst <= rate.n:
        raise InvalidPolicyError(
            f"{owner}: {what} must be an int in [1, {rate.n}] (the N of {rate_name}={rate}), "
            f"got {shown(burst)}")
    return burst


def check_fairness(queue: object, fairness: object, max_active: object) -> None:
    """InvalidPolicyError unless `fairness` is "fifo" or "key", and "key" comes with max_active.

    >>> check_fairness("llm", "key", 32)
    """
    if not isinstance(fairness, str) or fairness not in FAIRNESS_MODES:
        raise InvalidPolicyError(
            f"queue {queue!r}: fairness must be one of {', '.join(map(repr, FAIRNESS_MODES))}, "
            f"got {shown(fairness)}")
    if fairness == "key" and max_active is None:
        raise InvalidPolicyError(
            f"queue {queue!r}: fairness='key' shares max_active among keys, so it needs "
            "max_active")


def check_on_key_full(queue: object, on_key_full: object, max_active_per_key: object) -> None:
    """InvalidPolicyError unless `on_key_full` is one of ON_KEY_FULL_MODES, and any but
    "queue" comes with max_active_per_key (a key is full against that limit).

    >>> check_on_key_full("index", "cancel_in_progress", 1)
    """
    if not isinstance(on_key_full, str) or on_key_full not in ON_KEY_FULL_MODES:
        raise InvalidPolicyError(
            f"queue {queue!r}: on_key_full must be one of "
            f"{', '.join(map(repr, ON_KEY_FULL_MODES))}, got {shown(on_key_full)}")
    if on_key_full != "queue" and max_active_per_key is None:
        raise InvalidPolicyError(
            f"queue {queue!r}: on_key_full={on_key_full!r} acts when a key is full, so it needs "
            "max_active_per_key")


def _check_limit(what: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if type(value) is not int or not 1 <= value <= LIMIT_MAX:
        raise InvalidPolicyError(f"{what} must be an int in [1, {LIMIT_MAX}], got {value!r}")


@dataclass(frozen=True, slots=True)
class ConcurrencyPolicyDefinition:
    """A queue's limits as declared: queue-wide `max_active`, optional `max_active_per_key`,
    and rate limits (`"N/P"`: at most N starts in any window of P) queue-wide and per key.

    `max_active=None` with a per-key limit means "limit per key, no queue-wide limit"; a policy
    may have rate limits and no concurrency limit.

    >>> ConcurrencyPolicyDefinition(queue="mail", max_active=20, max_active_per_key=3).max_active
    20
    >>> ConcurrencyPolicyDefinition("api", rate_limit="500/m").rate.n
    500
    """

    queue: str
    max_active: int | None = None
    max_active_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    # docs/design.md "Fair share and job cost": "fifo" (admission order) or "key" (a freed place
    # goes to the key with the smallest active cost per weight); "key" needs max_active.
    fairness: str = "fifo"
    # docs/design.md "Job keys": "queue" (wait), "cancel_in_progress" (the newest job of a full key
    # wins) or "cancel_newest" (the new job is canceled); the last two need max_active_per_key.
    on_key_full: str = "queue"
    # docs/design.md "rate bursts": at most B units in any window of P*B/N, beside N per P.
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None

    def __post_init__(self) -> None:
        check_name("queue", self.queue, InvalidPolicyError)
        check_fairness(self.queue, self.fairness, self.max_active)
        check_on_key_full(self.queue, self.on_key_full, self.max_active_per_key)
        _check_limit("max_active", self.max_active, optional=True)
        _check_limit("max_active_per_key", self.max_active_per_key, optional=True)
        # Normalised spellings ("100/m"), so that two equal limits compare equal.
        for name in ("rate_limit", "rate_limit_per_key"):
            limit = RateLimit.optional(getattr(self, name), name)
            object.__setattr__(self, name, None if limit is None else str(limit))
        owner = f"queue {self.queue!r}"
        check_rate_burst(owner, "rate_burst", self.rate_burst, self.rate, "rate_limit")
        check_rate_burst(owner, "rate_burst_per_key", self.rate_burst_per_key, self.rate_per_key,
                         "rate_limit_per_key")
        if (self.max_active is None and self.max_active_per_key is None
                and self.rate_limit is None and self.rate_limit_per_key is None):
            raise InvalidPolicyError(
                f"queue {self.queue!r}: a policy needs max_active, max_active_per_key, "
                "rate_limit or rate_limit_per_key"
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

    @property
    def rate(self) -> RateLimit | None:
        """`rate_limit` parsed: at most `n` starts in any window of `period` seconds.

        >>> limit = ConcurrencyPolicyDefinition("api", rate_limit="500/m").rate
        >>> limit.n, limit.period
        (500, 60.0)
        """
        return RateLimit.optional(self.rate_limit, "rate_limit")

    @property
    def rate_per_key(self) -> RateLimit | None:
        """`rate_limit_per_key` parsed, as `rate` is.

        >>> ConcurrencyPolicyDefinition("api", rate_limit_per_key="10/s").rate_per_key.n
        10
        """
        return RateLimit.optional(self.rate_limit_per_key, "rate_limit_per_key")


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A named queue and its limits, shared by every task that names it.

    >>> QueueSpec("openai-api", max_active=5).definition().max_active
    5
    """

    name: str
    max_active: int | None = None
    max_active_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    fairness: str = "fifo"
    on_key_full: str = "queue"
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None

    def __post_init__(self) -> None:
        for name in ("rate_limit", "rate_limit_per_key"):  # "100/m" however it was spelled
            limit = RateLimit.optional(getattr(self, name), name)
            object.__setattr__(self, name, None if limit is None else str(limit))

    @property
    def governed(self) -> bool:
        """Whether the queue has any limit (a policy to sync).

        >>> QueueSpec("mail").governed, QueueSpec("mail", max_active=2).governed
        (False, True)
        """
        return any(value is not None for value in self.limits)

    @property
    def limits(self) -> tuple[int | None, int | None, str | None, str | None]:
        """`(max_active, max_active_per_key, rate_limit, rate_limit_per_key)`.

        >>> QueueSpec("api", 5, rate_limit="500/m").limits
        (5, None, '500/m', None)
        """
        return (self.max_active, self.max_active_per_key, self.rate_limit,
                self.rate_limit_per_key)

    def definition(self) -> ConcurrencyPolicyDefinition | None:
        """The policy to sync for this queue; None when it has no limit.

        >>> QueueSpec("mail").definition() is None
        True
        """
        if not self.governed and self.rules == ("fifo", "queue") and self.bursts == (None, None):
            return None
        return ConcurrencyPolicyDefinition(self.name, *self.limits, fairness=self.fairness,
                                           on_key_full=self.on_key_full,
                                           rate_burst=self.rate_burst,
                                           rate_burst_per_key=self.rate_burst_per_key)

    @property
    def bursts(self) -> tuple[int | None, int | None]:
        """`(rate_burst, rate_burst_per_key)`.

        >>> QueueSpec("mail", rate_limit="100/m", rate_burst=10).bursts
        (10, None)
        """
        return (self.rate_burst, self.rate_burst_per_key)

    @property
    def rules(self) -> tuple[str, str]:
        """`(fairness, on_key_full)`: the policy's fields beside its limits.

        >>> QueueSpec("index", max_active_per_key=1, on_key_full="cancel_newest").rules
        ('fifo', 'cancel_newest')
        """
        return (self.fairness, self.on_key_full)


@dataclass(frozen=True, slots=True)
class ConcurrencyPolicy:
    """A policy as stored in PostgreSQL.

    >>> q.list_concurrency_policies("billing")  # doctest: +SKIP
    [ConcurrencyPolicy(namespace='billing', queue='mail', max_active=20, ...)]
    """

    namespace: str
    queue: str
    max_active: int | None
    max_active_per_key: int | None
    created_at: datetime
    updated_at: datetime
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    fairness: str = "fifo"
    on_key_full: str = "queue"
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None


MAX_BUDGET_DEFINITIONS = 1000


def _budget_limits(owner: str, max_active: object, rate_limit: object,
                   rate_burst: object) -> str | None:
    """A budget's limits checked (InvalidPolicyError): max_active an int in [1, 1,000,000] or
    None, a rate "N/P" or None, a burst 1..N only with a rate, and at least one limit. Returns
    the rate in its normal spelling."""
    _check_limit(f"{owner}: max_active", max_active, optional=True)
    rate = RateLimit.optional(rate_limit, f"{owner}: rate_limit")
    check_rate_burst(owner, "rate_burst", rate_burst, rate, "rate_limit")
    if max_active is None and rate is None:
        raise InvalidPolicyError(
            f"{owner}: a budget needs max_active or rate_limit (a budget with no limit limits "
            "nothing)")
    return None if rate is None else str(rate)


@dataclass(frozen=True, slots=True)
class BudgetDefinition:
    """A named budget as declared (docs/design.md "Named budgets"): one limit shared by every queue
    whose jobs name it. `max_active` counts the cost units of its active jobs, `rate_limit`
    ("N/P") their rate_cost units per window, `rate_burst` B (1 <= B <= N, only with a rate)
    at most B units in any window of P*B/N. Validated when constructed (InvalidPolicyError).

    >>> BudgetDefinition(name="openai", max_active=50, rate_limit="3000/m", rate_burst=100).rate
    RateLimit(n=3000, period=60.0)
    """

    name: str
    max_active: int | None = None
    rate_limit: str | None = None
    rate_burst: int | None = None

    def __post_init__(self) -> None:
        check_name("budget name", self.name, InvalidPolicyError)
        rate = _budget_limits(f"budget {self.name!r}", self.max_active, self.rate_limit,
                              self.rate_burst)
        object.__setattr__(self, "rate_limit", rate)

    @property
    def rate(self) -> RateLimit | None:
        """`rate_limit` parsed.

        >>> BudgetDefinition("partner", rate_limit="5/10s").rate.period
        10.0
        """
        return RateLimit.optional(self.rate_limit, "rate_limit")

    @property
    def limits(self) -> tuple[int | None, str | None, int | None]:
        """`(max_active, rate_limit, rate_burst)`.

        >>> BudgetDefinition("db", max_active=8).limits
        (8, None, None)
        """
        return (self.max_active, self.rate_limit, self.rate_burst)


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """What `app.budget(...)` returns: a declared budget, to pass as `budget=` to tasks (or to
    name by its string). Validated when constructed, as its `BudgetDefinition` is.

    >>> BudgetSpec("openai", max_active=50).definition()
    BudgetDefinition(name='openai', max_active=50, rate_limit=None, rate_burst=None)
    """

    name: str
    max_active: int | None = None
    rate_limit: str | None = None
    rate_burst: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_limit", self.definition().rate_limit)

    def definition(self) -> BudgetDefinition:
        """The definition to sync.

        >>> BudgetSpec("db", max_active=8).definition().max_active
        8
        """
        return BudgetDefinition(self.name, self.max_active, self.rate_limit, self.rate_burst)


@dataclass(frozen=True, slots=True)
class BudgetOverride:
    """An operator's override of a budget: the fields it replaces (None: not replaced), since
    when, and until when (None: until cleared).

    >>> q.override_budget("openai", max_active=10, expires_in=3600)  # doctest: +SKIP
    BudgetOverride(max_active=10, rate_limit=None, rate_burst=None, set_at=..., expires_at=...)
    """

    max_active: int | None = None
    rate_limit: str | None = None
    rate_burst: int | None = None
    set_at: datetime | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Budget:
    """A named budget as stored: its definition, the namespace that owns it, and its override.

    >>> [(b.name, b.max_active) for b in q.list_budgets()]  # doctest: +SKIP
    [('openai', 50)]
    """

    namespace: str
    name: str
    max_active: int | None
    rate_limit: str | None
    rate_burst: int | None
    created_at: datetime
    updated_at: datetime
    override: BudgetOverride | None = None

    @property
    def definition(self) -> BudgetDefinition:
        """The stored budget as a `BudgetDefinition` (what a sync compares).

        >>> q.list_budgets()[0].definition  # doctest: +SKIP
        BudgetDefinition(name='openai', max_active=50, rate_limit='3000/m', rate_burst=100)
        """
        return BudgetDefinition(self.name, self.max_active, self.rate_limit, self.rate_burst)


@dataclass(frozen=True, slots=True)
class BudgetHealth:
    """One budget in `QueueHealth.budgets`: declared (`namespace` set), overridden, or only named
    by ready or active jobs (`namespace` None and no limits: it limits nothing). The limits are
    those in force (a live override's fields over the declared ones); `active_units` is the cost
    of its unexpired active jobs; `queues` the queues with ready or active jobs naming it;
    `ready` its ready jobs, counted up to the health sample (`capped` beyond); `blocked_ready`
    those the budget holds back now (all of its ready jobs while it is full or out of starts,
    else 0); `next_start_at`, for a budget with a rate, when its rate (and burst) lets the next
    unit start (now, or later while it is out of starts; None without a rate).

    >>> [(b.name, b.active_units, b.queues) for b in q.health().budgets]  # doctest: +SKIP
    [('openai', 12, ['embeddings', 'summaries'])]
    """

    name: str
    namespace: str | None
    max_active: int | None
    rate_limit: str | None
    rate_burst: int | None
    override: BudgetOverride | None
    active_units: int
    blocked_ready: int
    queues: list[str]
    next_start_at: datetime | None = None
    ready: int = 0
    capped: bool = False


# A progress message is for a bar's caption, not a log: at most this many characters.
PROGRESS_MESSAGE_MAX = 1000
# done and total as ints stay within a bigint (floats: any finite value).
PROGRESS_INT_MAX = 2**63 - 1


def _progress_number(what: str, value: object, *, optional: bool) -> int | float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOptionsError(
            f"progress: {what} must be a number (int or float), got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidOptionsError(f"progress: {what} must be finite, got {value!r}")
    if value < 0:
        raise InvalidOptionsError(f"progress: {what} must be >= 0, got {value!r}")
    if isinstance(value, int) and value > PROGRESS_INT_MAX:
        raise InvalidOptionsError(f"progress: {what} must be at most 2**63 - 1, got {value!r}")
    return int(value) if isinstance(value, int) else float(value)


def check_progress(
    done: object, total: object = None, message: object = None
) -> tuple[int | float, int | float | None, str | None]:
    """`(done, total, message)` checked, or InvalidOptionsError: numbers >= 0 (not bool, not NaN
    or infinite), `total` optional, `message` None or a string of at most PROGRESS_MESSAGE_MAX
    characters with no NUL (PostgreSQL's JSON cannot store it). `done` may exceed `total` (an
    estimate that was low); a bar shows it full.

    >>> check_progress(40, 100, "pages")
    (40, 100, 'pages')
    >>> check_progress(-1)
    Traceback (most recent call last):
    ...
    workhorse.errors.InvalidOptionsError: progress: done must be >= 0, got -1
    """
    checked_done = _progress_number("done", done, optional=False)
    assert checked_done is not None
    checked_total = _progress_number("total", total, optional=True)
    if message is not None:
        if not isinstance(message, str):
            raise InvalidOptionsError(f"progress: message must be a string, got {message!r}")
        if len(message) > PROGRESS_MESSAGE_MAX:
            raise InvalidOptionsError(
                f"progress: message is {len(message)} characters, more than "
                f"{PROGRESS_MESSAGE_MAX}")
        if "\x00" in message:
            raise InvalidOptionsError("progress: message must not contain NUL characters")
        try:
            message.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidOptionsError(
                "progress: message must be valid text (it has a lone surrogate)") from None
    return checked_done, checked_total, message


@dataclass(frozen=True, slots=True)
class Progress:
    """The latest progress a running handler reported (`current_job().progress(...)`), as
    `JobHandle.progress()` and `Job.progress` read it: `at` is when the worker wrote it
    (database clock; under `eager()`, the local clock when the handler called).

    >>> p = Progress(40, 100, "pages", None)
    >>> p.fraction, p.text
    (0.4, '40/100 (40%) pages')
    """

    done: int | float
    total: int | float | None = None
    message: str | None = None
    at: datetime | None = None

    def __post_init__(self) -> None:
        check_progress(self.done, self.total, self.message)

    @property
    def fraction(self) -> float | None:
        """done / total, at most 1.0; None without a total (or with a total of 0).

        >>> Progress(1, 4).fraction, Progress(5, 4).fraction, Progress(3).fraction
        (0.25, 1.0, None)
        """
        if not self.total:
            return None
        return min(float(self.done) / float(self.total), 1.0)

    @property
    def text(self) -> str:
        """One line for people: `40/100 (40%) pages`, or `40 pages` without a total.

        >>> Progress(40, message="pages").text, Progress(1.5, 3.0).text
        ('40 pages', '1.5/3 (50%)')
        """
        shown = f"{self.done:g}" if isinstance(self.done, float) else str(self.done)
        if self.total is not None:
            total = f"{self.total:g}" if isinstance(self.total, float) else str(self.total)
            shown += f"/{total}"
            fraction = self.fraction
            if fraction is not None:
                shown += f" ({math.floor(fraction * 100)}%)"
        if self.message:
            shown += f" {self.message}"
        return shown

    @classmethod
    def from_stored(cls, document: Any, at: datetime | None) -> Progress | None:
        """The value the worker stored (a JSON object), or None.

        >>> Progress.from_stored({"done": 2, "total": 4, "message": None, "fence": 9}, None)
        Progress(done=2, total=4, message=None, at=None)
        """
        if not isinstance(document, dict) or "done" not in document:
            return None
        return cls(document["done"], document.get("total"), document.get("message"), at)


@dataclass(frozen=True, slots=True)
class Job:
    """One job row.

    >>> job = add.delay(2, 3).job()  # doctest: +SKIP
    >>> job.status, job.attempts, job.max_attempts  # doctest: +SKIP
    (<JobStatus.READY: 'ready'>, 0, 3)
    """

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
    cancel_requested: bool = False
    idempotency_key: str | None = None
    expires_at: datetime | None = None
    # The job key it holds (docs/design.md "Job keys"); None once a newer job took the key over.
    job_key: str | None = None
    # docs/design.md "Fair share and job cost".
    cost: int = 1
    rate_cost: int = 1
    weight: int = 1
    # The latest progress of its current (or last) attempt; None before the attempt reported any.
    progress: Progress | None = None
    # The workflow it is a member of (docs/design.md "Workflows"), and the ids it runs after.
    workflow_id: int | None = None
    depends_on: list[int] = field(default_factory=list)
    # The named budget it names (docs/design.md "Named budgets"), or None.
    budget: str | None = None

    @property
    def resting(self) -> bool:
        """Whether the job reached a status it stays in: succeeded, failed, held or canceled.

        >>> add.delay(2, 3).wait(timeout=10).resting  # doctest: +SKIP
        True
        """
        return self.status in RESTING


ATTEMPT_OUTCOMES = ("failed", "retried", "snoozed", "lost", "canceled", "succeeded")
# How many attempts that did not succeed a job keeps (the oldest go first).
ATTEMPT_HISTORY_MAX = 20


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a job (docs/design.md "The dashboard in an incident"): its number (the job's
    `attempts` after the claim that started it), when it started and ended, how it ended
    (`outcome`: "failed", "retried", "snoozed", "lost", "canceled" or "succeeded") and its error
    (`{"type", "message", "traceback"}`, or None). Oldest first; attempts that did not succeed
    are kept (the last 20), and a success is the job row itself.

    >>> [(a.attempt, a.outcome) for a in h.attempts()]  # doctest: +SKIP
    [(1, 'retried'), (2, 'succeeded')]
    >>> Attempt(1, None, None, "succeeded", None).failed
    False
    """

    attempt: int
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str
    error: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        """Whether this attempt did not succeed (every outcome but "succeeded" and "snoozed").

        >>> Attempt(1, None, None, "lost", None).failed
        True
        """
        return self.outcome not in ("succeeded", "snoozed")


@dataclass(frozen=True, slots=True)
class PolicyOverride:
    """An operator's override of a queue's policy: the fields it replaces (None: not replaced),
    since when, and until when (None: until cleared)."""

    max_active: int | None = None
    max_active_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    set_at: datetime | None = None
    expires_at: datetime | None = None
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None


@dataclass(frozen=True, slots=True)
class QueueControl:
    """A queue's operator controls after a pause, resume, override or clear."""

    queue: str
    paused: bool = False
    paused_at: datetime | None = None
    override: PolicyOverride | None = None


@dataclass(frozen=True, slots=True)
class PolicyHealth:
    """One governed, paused or overridden queue: the limits in force (an override's where it
    has one), what is active, and what the limits hold back. `namespace` is None for a queue
    that only an operator control governs.

    >>> [(p.queue, p.active, p.available) for p in q.health().policies]  # doctest: +SKIP
    [('mail', 3, 17)]
    """

    namespace: str | None
    queue: str
    max_active: int | None
    max_active_per_key: int | None
    active: int
    available: int | None
    blocked_ready: int
    saturated_keys: int
    capped: bool
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    rate_limited_keys: int = 0
    paused: bool = False
    override: PolicyOverride | None = None
    # docs/design.md "Fair share and job cost": the policy's fairness, and the sum of the active
    # jobs' cost (`active` and `available` count these units too).
    fairness: str = "fifo"
    active_units: int = 0
    # docs/design.md "Job keys": what an enqueue does when its job's key is full.
    on_key_full: str = "queue"
    # docs/design.md "rate bursts": the bursts in force (an override's where it sets them).
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None
    # The number of active jobs (beside `active_units`, their cost): they differ where costs
    # differ from 1, and `workhorse top` then shows units.
    active_jobs: int = 0
    # docs/design.md "rate bursts": when the queue's rate and burst let its next start happen (now,
    # or later while it is out of starts; None without a rate), and the soonest next start
    # among its keys out of starts (None when none is).
    next_start_at: datetime | None = None
    next_key_start_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """What `Queue.health()` reports: one `PolicyHealth` per governed, paused or
    overridden queue, the number of jobs by status, `stalled`: queue -> why its ready or
    due work cannot move (no live supervisor serves it or declares its task, paused, a limit of
    0; docs/design.md "The dashboard in an incident"), and `unknown_task_ready`: queue -> ready jobs
    whose task no live supervisor serving the queue declares (within the bounded sample).

    >>> health = q.health()  # doctest: +SKIP
    >>> health.depth["ready"], [p.queue for p in health.policies]  # doctest: +SKIP
    (3, ['mail'])
    >>> health.stalled  # doctest: +SKIP
    {'mail': 'no live supervisor: none is registered'}
    """
    policies: list[PolicyHealth]
    depth: dict[str, int]
    stalled: dict[str, str] = field(default_factory=dict)
    # queue -> ready jobs (within the bounded sample) whose task no live supervisor serving
    # the queue declares; only queues some live supervisor serves, and only those with any.
    unknown_task_ready: dict[str, int] = field(default_factory=dict)
    # docs/design.md "Named budgets": one row per declared, overridden or named budget.
    budgets: list[BudgetHealth] = field(default_factory=list)


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
    started_at: datetime | None = None
    # The schedule's occurrence, or the first run_at (None when a retry moved run_at and no
    # schedule fired the job); only the claim says.
    scheduled_for: datetime | None = None


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One row of `workhorse queues`: any queue with jobs, a policy or a control."""

    queue: str
    depth: dict[str, int]
    namespace: str | None = None
    max_active: int | None = None
    max_active_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    paused: bool = False
    override: PolicyOverride | None = None


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What `App.sync()` changed, as lists of queue names.

    >>> report = SyncReport(created=["mail"], unchanged=["openai-api"])
    >>> report.created, report.pruned
    (['mail'], [])
    """

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    # The app's schedules, by name, when it declares any (App.sync only).
    schedules: SyncReport | None = None
    # The app's named budgets, by name, when it declares any or had some to prune (App.sync).
    budgets: SyncReport | None = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker supervisor's row in `workhorse.workers`: alive while it touched `last_seen` in
    the last 30 seconds; `stats` holds its running counters.

    >>> [(w.host, w.pid, w.slots) for w in q.list_workers()]  # doctest: +SKIP
    [('web-1', 4121, 4)]
    """

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


def _check_schedule_name(what: str, value: object) -> str:
    return check_name(what, value, InvalidScheduleError)


@dataclass(frozen=True, slots=True)
class ScheduleDefinition:
    """A periodic schedule as declared: enqueue `task` with `args`/`kwargs` at every occurrence
    of `cron` (standard 5 fields, in the IANA zone `tz`) or of `every` (a duration; it fires at
    the instants k*every since the Unix epoch, UTC). Validated when constructed
    (InvalidScheduleError); `every` is kept in its canonical spelling.

    `queue=None` is the queue named after the task (an app fills in its task's queue, priority,
    max_attempts, on_failure and concurrency key). `catch_up` says what fires after every
    supervisor was down: "latest" (the most recent missed occurrence), "all" (up to 100), "skip".

    >>> ScheduleDefinition(name="refresh-eu", task="tasks.refresh", every="30s", args=["eu"]).every
    '30s'
    >>> ScheduleDefinition("nightly", "tasks.report", cron="0  3 * * *", tz="Europe/Oslo").cron
    '0 3 * * *'
    """

    name: str
    task: str
    cron: str | None = None
    every: str | float | timedelta | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    tz: str = "UTC"
    catch_up: str = "latest"
    priority: int = 0
    max_attempts: int = 3
    concurrency_key: str | None = None
    on_failure: str = "fail"
    # docs/design.md "Fair share and job cost": every fired job's cost, rate cost and weight (an app
    # fills in its task's, resolving cost callables with `args`/`kwargs` at declaration).
    cost: int = 1
    rate_cost: int = 1
    weight: int = 1

    def __post_init__(self) -> None:
        _check_schedule_name("schedule name", self.name)
        _check_schedule_name("task", self.task)
        if (self.cron is None) == (self.every is None):
            raise InvalidScheduleError(
                f"schedule {self.name!r}: give exactly one of cron= or every="
            )
        if self.cron is not None:
            object.__setattr__(self, "cron", _occurrences.check_cron(self.cron))
        else:
            micros = _occurrences.every_microseconds(self.every)
            object.__setattr__(self, "every", _occurrences.every_text(micros))
        _occurrences.zone(self.tz)
        if self.catch_up not in _occurrences.CATCH_UP_POLICIES:
            raise InvalidScheduleError(
                f"schedule {self.name!r}: catch_up must be one of "
                f"{', '.join(_occurrences.CATCH_UP_POLICIES)}, got {self.catch_up!r}"
            )
        if isinstance(self.args, str | bytes | dict) or not isinstance(self.args, list | tuple):
            raise InvalidScheduleError(f"schedule {self.name!r}: args must be a list, got "
                                       f"{self.args!r}")
        object.__setattr__(self, "args", list(self.args))
        if not isinstance(self.kwargs, dict) or not all(isinstance(k, str) for k in self.kwargs):
            raise InvalidScheduleError(f"schedule {self.name!r}: kwargs must be a dict with str "
                                       f"keys, got {self.kwargs!r}")
        if self.queue is not None:
            _check_schedule_name("queue", self.queue)
        if self.concurrency_key is not None:
            _check_schedule_name("concurrency_key", self.concurrency_key)
        if self.on_failure not in ("fail", "hold"):
            raise InvalidScheduleError(
                f"on_failure must be 'fail' or 'hold', got {self.on_failure!r}")
        try:  # priority, max_attempts and the costs, with EnqueueOptions' bounds
            EnqueueOptions(priority=self.priority, max_attempts=self.max_attempts,
                           cost=self.cost, rate_cost=self.rate_cost, weight=self.weight)
        except InvalidOptionsError as exc:
            raise InvalidScheduleError(f"schedule {self.name!r}: {exc}") from None

    @property
    def every_seconds(self) -> float | None:
        """`every` in seconds (None for a cron schedule).

        >>> ScheduleDefinition("refresh", "tasks.refresh", every=90).every_seconds
        90.0
        """
        if self.every is None:
            return None
        return _occurrences.every_microseconds(self.every) / 1_000_000

    @property
    def target_queue(self) -> str:
        """The queue its jobs go to: `queue`, else the queue named after the task.

        >>> ScheduleDefinition("nightly", "tasks.report", cron="0 3 * * *").target_queue
        'tasks.report'
        """
        return self.queue if self.queue is not None else self.task


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as stored in PostgreSQL: its definition, the namespace that owns it, the
    next occurrence it will fire (`next_run_at`) and the latest it fired (`last_run_at`, None
    before the first).

    >>> [(s.name, s.next_run_at) for s in q.list_schedules("billing")]  # doctest: +SKIP
    [('digest', datetime.datetime(2026, 12, 2, 9, 0, tzinfo=...))]
    """

    namespace: str
    name: str
    task: str
    cron: str | None
    every: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    tz: str
    catch_up: str
    priority: int
    max_attempts: int
    concurrency_key: str | None
    on_failure: str
    next_run_at: datetime
    last_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    cost: int = 1
    rate_cost: int = 1
    weight: int = 1

    @property
    def definition(self) -> ScheduleDefinition:
        """The stored schedule as a `ScheduleDefinition` (what a sync would compare).

        >>> q.list_schedules("billing")[0].definition.cron  # doctest: +SKIP
        '0 9 * * *'
        """
        return ScheduleDefinition(
            name=self.name, task=self.task, cron=self.cron, every=self.every, args=self.args,
            kwargs=self.kwargs, queue=self.queue, tz=self.tz, catch_up=self.catch_up,
            priority=self.priority, max_attempts=self.max_attempts,
            concurrency_key=self.concurrency_key, on_failure=self.on_failure,
            cost=self.cost, rate_cost=self.rate_cost, weight=self.weight,
        )


@dataclass(frozen=True, slots=True)
class FiringPass:
    """What one supervisor's firing pass did: the occurrences it enqueued as (schedule id,
    occurrence, job id), how many due schedules it locked (`full`: as many as it may take, so
    more may be due), the seconds until the namespace's next due schedule by PostgreSQL's clock
    (None: it has none; a negative value: one is due and another pass holds it), and the
    schedules it could not evaluate, as (name, reason). `now` is PostgreSQL's clock at the end
    of the pass."""

    fired: list[tuple[int, datetime, int]]
    locked: int
    full: bool
    next_due_in: float | None
    now: datetime
    broken: list[tuple[str, str]] = field(default_factory=list)
@dataclass(frozen=True, slots=True)
class ThroughputMinute:
    """One minute of fleet counters (what every supervisor counted in it), for the dashboard's
    throughput chart; `seconds` is how much of the minute has passed (60 for a whole one)."""

    minute: datetime
    claimed: int
    succeeded: int
    failed: int
    retried: int
    held: int
    canceled: int
    seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class KeyShare:
    """A key of a fair queue (docs/design.md "Fair share and job cost"): its active `units` (and
    `jobs`), its `weight`, whether it has ready work, and `share`, the units of max_active that
    fair share gives it among the keys with active or ready work (`capped`: more keys wait than
    were counted, so the shares are upper bounds)."""

    key: str
    units: int
    jobs: int
    weight: int
    ready: bool
    share: float | None
    capped: bool = False


@dataclass(frozen=True, slots=True)
class KeyPressure:
    """A key held back in one queue: at its per-key limit (`active` of `limit`, with `backlog`
    ready jobs behind it, `capped` when there are more than counted) or out of its per-key rate
    (`used` starts of `limit` in the window)."""

    key: str
    active: int = 0
    backlog: int = 0
    capped: bool = False
    used: int = 0
    limit: int | None = None


def asdict(value: Any) -> dict[str, Any]:
    return dataclasses.asdict(value)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of the dashboard's job list: the newest matches below an id, newest first.

    Every status but succeeded is searched to the oldest job (each through its partial index);
    succeeded jobs, the bulk of history with no index of their own, only within a window of job
    ids below the page's start. `unsearched_below` is that window's floor when the page is not
    full and succeeded jobs below it could still match (None: nothing was left unsearched)."""

    jobs: list[Job]
    unsearched_below: int | None = None


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """A workflow's members counted by status, and whether every member finished.

    >>> WorkflowStatus(id=7, counts={"succeeded": 3}, finished=True).finished
    True
    """

    id: int
    counts: dict[str, int]
    finished: bool
