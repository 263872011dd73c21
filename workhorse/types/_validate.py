"""The bounds and checks the public types validate with: each raises the error its caller
names (InvalidOptionsError by default) before anything is sent to PostgreSQL."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Protocol

from .._durations import parse_duration
from ..errors import InvalidOptionsError, InvalidPolicyError, InvalidScheduleError, WorkhorseError


class _Rate(Protocol):
    """What a burst is checked against: a rate of N starts (RateLimit, which sits above this
    module: it is built with these checks)."""

    @property
    def n(self) -> int: ...


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


# A database's name: what a queue's `database=` and the CLI's `--database` say.
_DATABASE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,62}")
def check_database_name(name: object, error: type[Exception] = InvalidOptionsError) -> str:
    """`name` if it can name a database of an app (a letter or `_`, then letters, digits,
    `_`, `.` or `-`; at most 63 characters), else `error`.

    >>> check_database_name("eu-west")
    'eu-west'
    """
    if not isinstance(name, str) or not _DATABASE_NAME.fullmatch(name):
        raise error(f"a database name is 1-63 letters, digits, '_', '.' or '-', starting with a "
                    f"letter or '_', got {name!r}")
    return name


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
                "canceled", "expired", "suspended")
JOB_KEY_MODES = ("replace", "preserve_run_at")


def check_names(what: str, value: object, allowed: tuple[str, ...] | None) -> tuple[str, ...]:
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


def check_cost(what: str, value: object) -> int:
    """A job's `cost` or `rate_cost`: an int in [1, 1,000,000], not a bool.

    >>> check_cost("cost", 4)
    4
    """
    if type(value) is not int or not 1 <= value <= COST_MAX:
        raise InvalidOptionsError(
            f"{what} must be an int in [1, {COST_MAX:,}], got {shown(value)}")
    return value


# docs/design.md "Tags": at most 16 a job, each 1-100 characters.
TAGS_MAX = 16
TAG_MAX = 100


def check_tags(value: object) -> tuple[str, ...]:
    """A job's `tags`: a list or tuple of at most 16 strings of 1-100 characters (no NUL, valid
    Unicode), returned as a tuple in their order with repeats dropped; None means none. A lone
    str is refused: tags="urgent" would be six one-letter tags.

    >>> check_tags(["order-1234", "tenant:acme", "order-1234"])
    ('order-1234', 'tenant:acme')
    """
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        raise InvalidOptionsError(f"tags must be a list of strings, got {shown(value)}")
    for tag in value:
        if not isinstance(tag, str) or not 1 <= len(tag) <= TAG_MAX:
            raise InvalidOptionsError(
                f"a tag must be a string of 1-{TAG_MAX} characters, got {shown(tag)}")
        check_name("a tag", tag)
    tags = tuple(dict.fromkeys(value))
    if len(tags) > TAGS_MAX:
        raise InvalidOptionsError(f"a job has at most {TAGS_MAX} tags, got {len(tags)}")
    return tags


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


def check_rate_burst(owner: str, what: str, burst: object, rate: _Rate | None,
                     rate_name: str) -> int | None:
    """A rate burst B (docs/design.md "rate bursts"): None, or an int (not a bool) with
    1 <= B <= N of its rate; a burst without a rate is InvalidPolicyError, as is any other value.

    >>> from workhorse.types import RateLimit
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


def check_limit(what: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if type(value) is not int or not 1 <= value <= LIMIT_MAX:
        raise InvalidPolicyError(f"{what} must be an int in [1, {LIMIT_MAX}], got {value!r}")


MAX_BUDGET_DEFINITIONS = 1000
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


def check_schedule_name(what: str, value: object) -> str:
    return check_name(what, value, InvalidScheduleError)
