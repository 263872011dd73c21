"""EnqueueOptions and ConcurrencyPolicyDefinition: validated when they are built."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from workhorse import (
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    InvalidPolicyError,
    WorkhorseError,
)

AWARE = datetime(2030, 1, 1, tzinfo=UTC)


def test_defaults() -> None:
    options = EnqueueOptions()
    assert (options.queue, options.concurrency_key, options.priority) == ("default", None, 0)
    assert (options.run_at, options.delay, options.max_attempts) == (None, None, 3)
    assert options.delay_seconds is None


def test_frozen() -> None:
    options = EnqueueOptions(queue="q")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.queue = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"queue": "q" * 255, "concurrency_key": "k" * 255},
        {"queue": "é" * 255},
        {"concurrency_key": "1"},
        {"priority": -32768},
        {"priority": 32767},
        {"max_attempts": 1},
        {"max_attempts": 1000},
        {"run_at": AWARE},
        {"run_at": datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=-5)))},
        {"run_at": datetime(2000, 1, 1, tzinfo=UTC)},  # the past is allowed: due at once
        {"delay": 0},
        {"delay": 0.25},
        {"delay": timedelta(0)},
        {"delay": timedelta(days=365 * 999)},
    ],
)
def test_valid(kwargs: dict[str, Any]) -> None:
    options = EnqueueOptions(**kwargs)
    for name, value in kwargs.items():
        assert getattr(options, name) == value


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"queue": ""}, "queue"),
        ({"queue": "q" * 256}, "queue"),
        ({"queue": None}, "queue"),
        ({"queue": b"q"}, "queue"),
        ({"queue": "a\x00"}, "NUL"),
        ({"concurrency_key": ""}, "concurrency_key"),
        ({"concurrency_key": "k" * 256}, "concurrency_key"),
        ({"concurrency_key": 7}, "concurrency_key"),
        ({"concurrency_key": "\x00"}, "NUL"),
        ({"priority": 32768}, "priority"),
        ({"priority": -32769}, "priority"),
        ({"priority": 1.0}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": None}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1001}, "max_attempts"),
        ({"max_attempts": -1}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"max_attempts": False}, "max_attempts"),
        ({"run_at": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"run_at": "2030-01-01T00:00:00+00:00"}, "datetime"),
        ({"run_at": 1.5}, "datetime"),
        ({"run_at": AWARE, "delay": 1}, "not both"),
        ({"run_at": AWARE, "delay": 0}, "not both"),
        ({"delay": -0.001}, "delay"),
        ({"delay": timedelta(microseconds=-1)}, "delay"),
        ({"delay": math.nan}, "finite"),
        ({"delay": math.inf}, "finite"),
        ({"delay": "5"}, "delay"),
        ({"delay": True}, "delay"),
        ({"delay": 1e13}, "1000 years"),
        ({"delay": timedelta(days=366 * 1001)}, "1000 years"),
    ],
)
def test_invalid(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidOptionsError, match=match):
        EnqueueOptions(**kwargs)


def test_delay_seconds() -> None:
    assert EnqueueOptions(delay=timedelta(minutes=2)).delay_seconds == 120.0
    assert EnqueueOptions(delay=3).delay_seconds == 3.0


def test_errors_are_workhorse_errors_and_value_errors() -> None:
    with pytest.raises(WorkhorseError):
        EnqueueOptions(priority=10**6)
    with pytest.raises(ValueError):
        EnqueueOptions(queue="")
    with pytest.raises(ValueError):
        ConcurrencyPolicyDefinition("q", 0)


@pytest.mark.parametrize(
    ("max_active", "per_key"),
    [(1, None), (None, 1), (5, 5), (5, 1), (1_000_000, None), (None, 1_000_000)],
)
def test_valid_policy(max_active: int | None, per_key: int | None) -> None:
    definition = ConcurrencyPolicyDefinition("q", max_active, per_key)
    assert (definition.max_active, definition.max_active_per_key) == (max_active, per_key)


@pytest.mark.parametrize(
    ("queue", "max_active", "per_key", "match"),
    [
        ("q", 0, None, "max_active"),
        ("q", -5, None, "max_active"),
        ("q", 1_000_001, None, "max_active"),
        ("q", None, 0, "max_active_per_key"),
        ("q", 2, 3, "<="),
        ("q", None, None, "needs"),
        ("q", True, None, "max_active"),
        ("q", 2.0, None, "max_active"),
        ("q", "5", None, "max_active"),
        ("", 1, None, "queue"),
        ("q" * 256, 1, None, "queue"),
        (None, 1, None, "queue"),
    ],
)
def test_invalid_policy(queue: Any, max_active: Any, per_key: Any, match: str) -> None:
    with pytest.raises(InvalidPolicyError, match=match):
        ConcurrencyPolicyDefinition(queue, max_active, per_key)


def test_policy_default_has_no_per_key_limit() -> None:
    assert ConcurrencyPolicyDefinition("q", 3).max_active_per_key is None
