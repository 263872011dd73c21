"""What callers pass: enqueue options, uniqueness, rate limits, and the declarations of
policies, budgets and schedules. Frozen dataclasses, validated when they are built."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from .. import _occurrences
from .._durations import parse_duration
from ..errors import InvalidOptionsError, InvalidPolicyError, InvalidScheduleError
from ._validate import (
    JOB_KEY_MODES,
    JOB_STATUSES,
    LIMIT_MAX,
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY_SECONDS,
    NAME_MAX,
    PRIORITY_MAX,
    PRIORITY_MIN,
    UNIQUE_BY,
    UNIQUE_STATES_DEFAULT,
    WEIGHT_MAX,
    check_cost,
    check_database_name,
    check_fairness,
    check_limit,
    check_name,
    check_names,
    check_on_key_full,
    check_rate_burst,
    check_schedule_name,
    check_tags,
    check_weight,
    delay_seconds,
    shown,
)


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
        object.__setattr__(self, "by", check_names("Unique.by", self.by, UNIQUE_BY))
        if self.keys is not None:
            object.__setattr__(self, "keys", check_names("Unique.keys", self.keys, None))
            if "args" not in self.by:
                raise InvalidOptionsError("Unique.keys names arguments: by= must include 'args'")
        object.__setattr__(self, "states",
                           check_names("Unique.states", self.states, JOB_STATUSES))
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
    # docs/design.md "Tags": labels to find the job by (at most 16, each
    # 1-100 characters); kept as a tuple, in order, without repeats.
    tags: tuple[str, ...] = ()
    # docs/design.md "Deadlines": not started by then, the job ends `expired` (seconds or a
    # duration from the enqueue, or an aware datetime); no attempt starts after the deadline.
    expires: float | str | timedelta | datetime | None = None
    deadline: float | str | timedelta | datetime | None = None

    def __post_init__(self) -> None:
        check_name("queue", self.queue)
        if type(self.tags) is not tuple or self.tags:
            object.__setattr__(self, "tags", check_tags(self.tags))
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
        for bound in ("expires", "deadline"):
            _bound(bound, getattr(self, bound))

    @property
    def delay_seconds(self) -> float | None:
        """`delay` in seconds (a timedelta converted), or None when there is none.

        >>> EnqueueOptions(delay=90).delay_seconds, EnqueueOptions().delay_seconds
        (90.0, None)
        """
        return None if self.delay is None else delay_seconds(self.delay)

    @property
    def bounds(self) -> tuple[datetime | None, float | None, datetime | None, float | None]:
        """(expires at, expires in seconds, deadline at, deadline in seconds): each bound as
        the enqueue sends it, a moment or seconds from the enqueue (the database's clock).

        >>> EnqueueOptions(expires="5m").bounds
        (None, 300.0, None, None)
        """
        return (*_bound("expires", self.expires), *_bound("deadline", self.deadline))


def _bound(what: str, value: object) -> tuple[datetime | None, float | None]:
    """An expiry or a deadline checked (InvalidOptionsError): (an aware datetime, None), (None,
    seconds from now: a number, a timedelta or a duration with a unit, 0 to 1000 years), or
    (None, None) for none."""
    if value is None:
        return None, None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidOptionsError(f"{what} must be timezone-aware, got {value!r}")
        return value, None
    try:
        seconds = delay_seconds(value)
    except InvalidOptionsError as exc:
        raise InvalidOptionsError(
            f"{what} must be seconds, a timedelta, a duration (\"5m\") or an aware datetime: "
            f"{exc}") from None
    if not 0 <= seconds <= MAX_DELAY_SECONDS:
        raise InvalidOptionsError(f"{what} must be between 0 seconds and 1000 years, got "
                                  f"{shown(value)}")
    return None, seconds


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
        """`N/s`, `N/m`, `N/h`, `N/d`, or `N/<duration>` such as `5/10s`; InvalidPolicyError.

        >>> RateLimit.parse("5/10s").period
        10.0
        """
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
        """`parse(spec)`, or None for None.

        >>> RateLimit.optional(None, "rate_limit"), RateLimit.optional("10/s", "rate_limit").n
        (None, 10)
        """
        return None if spec is None else cls.parse(spec, what)

    @classmethod
    def from_row(cls, n: int | None, period: float | None) -> RateLimit | None:
        """The stored (N, period) pair as a RateLimit; None when either is NULL.

        >>> str(RateLimit.from_row(100, 60.0)), RateLimit.from_row(None, None)
        ('100/m', None)
        """
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
        check_limit("max_active", self.max_active, optional=True)
        check_limit("max_active_per_key", self.max_active_per_key, optional=True)
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
    # docs/design.md "Several databases": the app's database the queue lives in (None: the
    # default one, unless another declaration of the queue places it).
    database: str | None = None

    def __post_init__(self) -> None:
        if self.database is not None:
            check_database_name(self.database, InvalidPolicyError)
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


def _budget_limits(owner: str, max_active: object, rate_limit: object,
                   rate_burst: object) -> str | None:
    """A budget's limits checked (InvalidPolicyError): max_active an int in [1, 1,000,000] or
    None, a rate "N/P" or None, a burst 1..N only with a rate, and at least one limit. Returns
    the rate in its normal spelling."""
    check_limit(f"{owner}: max_active", max_active, optional=True)
    rate = RateLimit.optional(rate_limit, f"{owner}: rate_limit")
    check_rate_burst(owner, "rate_burst", rate_burst, rate, "rate_limit")
    if max_active is None and rate is None:
        raise InvalidPolicyError(
            f"{owner}: a budget needs max_active or rate_limit (a budget with no limit limits "
            "nothing)")
    return None if rate is None else str(rate)


def _check_adaptive(owner: str, adaptive: object, max_active: object) -> None:
    if not isinstance(adaptive, bool):
        raise InvalidPolicyError(f"{owner}: adaptive must be True or False, got {adaptive!r}")
    if adaptive and max_active is None:
        raise InvalidPolicyError(
            f"{owner}: adaptive needs max_active (a Backoff halves its effective max_active)")


@dataclass(frozen=True, slots=True)
class BudgetDefinition:
    """A named budget as declared (docs/design.md "Named budgets"): one limit shared by every queue
    whose jobs name it. `max_active` counts the cost units of its active jobs, `rate_limit`
    ("N/P") their rate_cost units per window, `rate_burst` B (1 <= B <= N, only with a rate)
    at most B units in any window of P*B/N. `adaptive` (with max_active): each Backoff of the
    budget halves its effective max_active, which grows back by one unit per quiet period
    (docs/design.md "Back-pressure"). Validated when constructed (InvalidPolicyError).

    >>> BudgetDefinition(name="openai", max_active=50, rate_limit="3000/m", rate_burst=100).rate
    RateLimit(n=3000, period=60.0)
    """

    name: str
    max_active: int | None = None
    rate_limit: str | None = None
    rate_burst: int | None = None
    adaptive: bool = False

    def __post_init__(self) -> None:
        check_name("budget name", self.name, InvalidPolicyError)
        rate = _budget_limits(f"budget {self.name!r}", self.max_active, self.rate_limit,
                              self.rate_burst)
        _check_adaptive(f"budget {self.name!r}", self.adaptive, self.max_active)
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

    >>> BudgetSpec("openai", max_active=50).definition().limits
    (50, None, None)
    """

    name: str
    max_active: int | None = None
    rate_limit: str | None = None
    rate_burst: int | None = None
    adaptive: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_limit", self.definition().rate_limit)

    def definition(self) -> BudgetDefinition:
        """The definition to sync.

        >>> BudgetSpec("db", max_active=8).definition().max_active
        8
        """
        return BudgetDefinition(self.name, self.max_active, self.rate_limit, self.rate_burst,
                                self.adaptive)


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
    # docs/design.md "Tags": every fired job's tags (an app fills in its task's).
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_schedule_name("schedule name", self.name)
        check_schedule_name("task", self.task)
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
            check_schedule_name("queue", self.queue)
        if self.concurrency_key is not None:
            check_schedule_name("concurrency_key", self.concurrency_key)
        if self.on_failure not in ("fail", "hold"):
            raise InvalidScheduleError(
                f"on_failure must be 'fail' or 'hold', got {self.on_failure!r}")
        try:  # priority, max_attempts, the costs and the tags, with EnqueueOptions' bounds
            checked = EnqueueOptions(priority=self.priority, max_attempts=self.max_attempts,
                                     cost=self.cost, rate_cost=self.rate_cost,
                                     weight=self.weight, tags=self.tags)
            object.__setattr__(self, "tags", checked.tags)
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


# A key's limits are stored per key (docs/design.md "Per-key limits"): at most this many keys in
# one call, and a key of at most this many characters.
MAX_KEY_LIMITS = 100_000
KEY_MAX = NAME_MAX  # as a job's concurrency key: a longer one could never apply


@dataclass(frozen=True, slots=True)
class KeyLimit:
    """One key's limits on a queue (docs/design.md "Per-key limits"), or the default for the keys
    not listed: `max_active` replaces the queue's `max_active_per_key` for that key, `weight` the
    default weight (1) of its jobs on a fair queue, `rate_limit` ("N/P") the per-key rate. None:
    that field is the policy's. Validated when constructed (InvalidPolicyError).

    >>> KeyLimit(max_active=10, weight=5, rate_limit="100/m")
    KeyLimit(max_active=10, weight=5, rate_limit='100/m')
    >>> KeyLimit(rate_limit="5/10s").rate.period
    10.0
    """

    max_active: int | None = None
    weight: int | None = None
    rate_limit: str | None = None

    def __post_init__(self) -> None:
        check_limit("KeyLimit.max_active", self.max_active, optional=True)
        if self.weight is not None and (type(self.weight) is not int
                                        or not 1 <= self.weight <= WEIGHT_MAX):
            raise InvalidPolicyError(
                f"KeyLimit.weight must be an int in [1, {WEIGHT_MAX}], got {self.weight!r}")
        limit = RateLimit.optional(self.rate_limit, "KeyLimit.rate_limit")
        object.__setattr__(self, "rate_limit", None if limit is None else str(limit))
        if self.max_active is None and self.weight is None and self.rate_limit is None:
            raise InvalidPolicyError(
                "a KeyLimit needs max_active, weight or rate_limit (an empty one limits nothing)")

    @property
    def rate(self) -> RateLimit | None:
        """`rate_limit` parsed.

        >>> KeyLimit(rate_limit="10/s").rate.n
        10
        """
        return RateLimit.optional(self.rate_limit, "KeyLimit.rate_limit")


def check_key_limits(queue: str, limits: object, default: object) -> dict[str, KeyLimit]:
    """The mapping `{key: KeyLimit}` checked (InvalidPolicyError before anything is written): keys
    are non-empty strings (an int is its decimal text, as a job's concurrency key is) of at most
    KEY_MAX characters, values KeyLimits, at most MAX_KEY_LIMITS of them; `default` None or a
    KeyLimit.

    >>> list(check_key_limits("api", {"acme": KeyLimit(max_active=10), 7: KeyLimit(weight=2)},
    ...                       None))
    ['acme', '7']
    """
    check_name("queue", queue, InvalidPolicyError)
    if default is not None and not isinstance(default, KeyLimit):
        raise InvalidPolicyError(f"default must be a KeyLimit or None, got {shown(default)}")
    if not isinstance(limits, Mapping):
        raise InvalidPolicyError(f"key limits must be a mapping of key to KeyLimit, got "
                                 f"{shown(limits)}")
    if len(limits) > MAX_KEY_LIMITS:
        raise InvalidPolicyError(
            f"{len(limits)} key limits; at most {MAX_KEY_LIMITS} in one call")
    checked: dict[str, KeyLimit] = {}
    for key, limit in limits.items():
        if isinstance(key, int) and not isinstance(key, bool):
            key = str(key)
        if not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX or "\x00" in key:
            raise InvalidPolicyError(
                f"a key must be a non-empty str (or int) of at most {KEY_MAX} characters "
                f"without NUL, got {shown(key)}")
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidPolicyError(f"key {shown(key)} is not valid Unicode") from None
        if not isinstance(limit, KeyLimit):
            raise InvalidPolicyError(f"key {key!r}: expected a KeyLimit, got {shown(limit)}")
        if key in checked:
            raise InvalidPolicyError(f"key {key!r} is given twice")
        checked[key] = limit
    return checked
