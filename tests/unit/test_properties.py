"""Properties, checked on generated input (hypothesis): durations, rate-limit specs, the
schedule walk (every= and cron, in zones with DST), and enqueue-option bounds. Each states a
rule of docs/design.md for every value, where the other unit tests pick a few."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workhorse import EnqueueOptions, InvalidOptionsError, InvalidPolicyError
from workhorse._durations import MAX_DURATION_SECONDS, parse_duration, parse_lease
from workhorse._occurrences import MISSED_AFTER, Timing, every_microseconds
from workhorse.types import LIMIT_MAX, RateLimit

# Deterministic and bounded: CI runs the same examples each time, and no test takes long.
settings.register_profile("workhorse", derandomize=True, max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("workhorse")

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "": 1.0}

# ---- durations ---------------------------------------------------------------------------------


@given(st.integers(0, 10**9), st.sampled_from(sorted(UNITS)), st.sampled_from(["", " ", "\t"]))
def test_a_duration_is_its_number_times_its_unit_up_to_366_days(
    n: int, unit: str, blank: str
) -> None:
    text = f"{blank}{n}{unit}{blank}"
    seconds = n * UNITS[unit]
    if seconds <= MAX_DURATION_SECONDS:
        assert parse_duration(text) == pytest.approx(seconds)
    else:
        with pytest.raises(ValueError, match="at most 366 days"):
            parse_duration(text)


@given(st.text(max_size=12))
def test_any_text_is_a_duration_or_a_value_error(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except ValueError:
        return
    assert 0 <= seconds <= MAX_DURATION_SECONDS


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_lease_is_between_1s_and_24h_or_refused(seconds: float) -> None:
    if 1.0 <= seconds <= 86400.0:
        assert parse_lease(seconds) == seconds
    else:
        with pytest.raises(ValueError):
            parse_lease(seconds)


# ---- rate limits -------------------------------------------------------------------------------


@given(st.integers(1, LIMIT_MAX), st.sampled_from(["s", "m", "h", "d"]),
       st.sampled_from(["", " "]))
def test_a_rate_limit_spec_parses_and_prints_back(n: int, unit: str, blank: str) -> None:
    limit = RateLimit.parse(f"{blank}{n}{blank}/{blank}{unit}{blank}")
    assert limit == RateLimit(n, UNITS[unit])
    assert RateLimit.parse(str(limit)) == limit


@given(st.integers(1, LIMIT_MAX), st.integers(1, 10**6), st.sampled_from(["ms", "s", "m", "h"]))
def test_a_rate_limit_over_a_duration_round_trips(n: int, count: int, unit: str) -> None:
    period = count * UNITS[unit]
    spec = f"{n}/{count}{unit}"
    if period > MAX_DURATION_SECONDS:
        with pytest.raises(InvalidPolicyError):
            RateLimit.parse(spec)
        return
    limit = RateLimit.parse(spec)
    assert limit.n == n and limit.period == pytest.approx(period)
    assert RateLimit.parse(str(limit)) == limit  # exactly: str() keeps every digit


@given(st.one_of(st.text(max_size=16), st.integers(), st.none(), st.floats()))
def test_anything_else_is_an_invalid_policy_error(spec: Any) -> None:
    try:
        limit = RateLimit.parse(spec)
    except InvalidPolicyError:
        return
    assert 1 <= limit.n <= LIMIT_MAX and 0 < limit.period <= MAX_DURATION_SECONDS


# ---- schedules ---------------------------------------------------------------------------------

INSTANTS = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1),
                        timezones=st.just(UTC))
ZONES = st.sampled_from(["UTC", "Europe/Oslo", "America/New_York", "Australia/Lord_Howe",
                         "Asia/Kolkata"])
CRONS = st.sampled_from(["* * * * *", "*/7 * * * *", "30 2 * * *", "0 9 * * mon-fri",
                         "15 1,2,3 * * *", "0 0 29 2 *", "59 23 31 12 *"])


@given(st.integers(1, 10**6), st.sampled_from(["ms", "s", "m", "h"]), INSTANTS)
def test_every_fires_on_the_epoch_grid_strictly_after(count: int, unit: str,
                                                      instant: datetime) -> None:
    if not 1 <= count * UNITS[unit] <= MAX_DURATION_SECONDS:
        return  # outside 1 s to 366 days every= is refused (test_schedule_occurrences)
    micros = every_microseconds(f"{count}{unit}")
    timing = Timing(None, micros, "UTC")
    nxt = timing.after(instant)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert nxt > instant and nxt - instant <= timedelta(microseconds=micros)
    assert ((nxt - epoch) // timedelta(microseconds=1)) % micros == 0


@settings(max_examples=30)
@given(CRONS, ZONES, INSTANTS, st.integers(1, 72))
def test_cron_occurrences_ascend_without_repeats_and_agree_with_after(
    expression: str, tz: str, start: datetime, hours: int
) -> None:
    timing = Timing(expression, None, tz)
    end = start + timedelta(hours=hours)
    found = timing.between(start, end)
    assert found == sorted(set(found)), "ascending, each instant once (DST included)"
    assert all(start <= o <= end for o in found)
    # Walking one occurrence at a time finds the same ones.
    walked, at = [], start - timedelta(microseconds=1)
    while (at := timing.after(at)) <= end:
        walked.append(at)
    assert walked == found


@settings(max_examples=30)
@given(CRONS, ZONES, INSTANTS, st.integers(0, 3 * 3600))
def test_a_firing_pass_never_fires_the_future_nor_twice(
    expression: str, tz: str, now: datetime, late: int
) -> None:
    timing = Timing(expression, None, tz)
    first = timing.after(now - timedelta(seconds=late + 1))
    for policy in ("latest", "all", "skip"):
        fired, following = timing.due(first, now, policy)
        assert fired == sorted(set(fired)) and all(first <= o <= now for o in fired)
        assert following > now
        # Whatever was at most 60 s overdue fires, whatever the policy.
        recent = [o for o in timing.between(first, now) if o >= now - MISSED_AFTER]
        assert set(recent) <= set(fired)


# ---- enqueue options ---------------------------------------------------------------------------


@given(st.integers(-(2**40), 2**40))
def test_priority_is_a_smallint(priority: int) -> None:
    if -32768 <= priority <= 32767:
        assert EnqueueOptions(priority=priority).priority == priority
    else:
        with pytest.raises(InvalidOptionsError):
            EnqueueOptions(priority=priority)


@given(st.one_of(st.integers(-10, 2000), st.booleans(), st.floats(), st.text(max_size=3)))
def test_max_attempts_is_1_to_1000(value: Any) -> None:
    if type(value) is int and 1 <= value <= 1000:
        assert EnqueueOptions(max_attempts=value).max_attempts == value
    else:
        with pytest.raises(InvalidOptionsError):
            EnqueueOptions(max_attempts=value)


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                 st.integers(-10, 40_000_000), st.text(max_size=6)))
def test_a_delay_is_a_duration_of_at_least_zero(delay: Any) -> None:
    try:
        seconds = parse_duration(delay)
    except ValueError:
        seconds = None
    if seconds is None:
        with pytest.raises(InvalidOptionsError):
            EnqueueOptions(delay=delay)
    else:
        assert EnqueueOptions(delay=delay).delay is not None


@given(st.sampled_from(["queue", "concurrency_key", "idempotency_key"]),
       st.text(min_size=0, max_size=300))
def test_names_are_1_to_255_characters_without_nul(field: str, value: str) -> None:
    if 1 <= len(value) <= 255 and "\x00" not in value:  # PostgreSQL text holds no NUL
        assert getattr(EnqueueOptions(**{field: value}), field) == value
    else:
        with pytest.raises(InvalidOptionsError):
            EnqueueOptions(**{field: value})
