"""Duration and lease bounds (docs/design.md: a duration is at most 366 days, a lease between 1 s
and 24 h), checked where the value is read: the task decorator and the worker's settings."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import workhorse
from workhorse import InvalidOptionsError
from workhorse._durations import parse_duration, parse_lease
from workhorse.worker.supervisor import settings_for


@pytest.mark.parametrize("text", ["366d", "8784h", "31622400", timedelta(days=366)])
def test_366_days_is_the_longest_duration(text: Any) -> None:
    assert parse_duration(text) == 366 * 86400.0


@pytest.mark.parametrize(
    "text", ["367d", "99999999999h", "30000000000", 1e300, timedelta(days=367)])
def test_a_duration_past_366_days_is_refused(text: Any) -> None:
    with pytest.raises(ValueError, match="at most 366 days"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["3 s", "1 m", "500 ms", "1\ts"])
def test_a_blank_inside_a_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("1000ms", 1.0), ("24h", 86400.0),
                                               ("1d", 86400.0), (30, 30.0)])
def test_lease_bounds_are_inclusive(text: Any, seconds: float) -> None:
    assert parse_lease(text) == seconds


@pytest.mark.parametrize("text", ["10ms", "999ms", "0", 0.5, "24h1", "25h", "2d", "99999999999h"])
def test_a_lease_outside_1s_to_24h_is_refused(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_lease(text)


@pytest.mark.parametrize("lease", ["10ms", 0.5, "25h", "99999999999h", "3 s"])
def test_the_task_decorator_refuses_a_lease_outside_its_bounds(lease: Any) -> None:
    app = workhorse.App("bounds")
    with pytest.raises(InvalidOptionsError, match=r"lease|duration"):
        app.task(name="t", lease=lease)(lambda: None)
    assert app.tasks == {}


def _settings(**overrides: Any) -> Any:
    app = workhorse.App("bounds")
    app.task(name="t")(lambda: None)
    options: dict[str, Any] = dict(slots=1, concurrency=1, queues=None, max_concurrent_tasks=None,
                                   lease="30s", dequeue_timeout="30s", grace="30s")
    options.update(overrides)
    return settings_for(app, **options)


@pytest.mark.parametrize("lease", ["10ms", 0.01, "25h", 30000000000, "99999999999h", "3 s"])
def test_the_worker_refuses_a_lease_outside_its_bounds(lease: Any) -> None:
    with pytest.raises(InvalidOptionsError, match="--lease"):
        _settings(lease=lease)


@pytest.mark.parametrize("flag", ["grace", "dequeue_timeout"])
def test_the_worker_refuses_durations_past_366_days(flag: str) -> None:
    with pytest.raises(InvalidOptionsError, match="366 days"):
        _settings(**{flag: "400d"})


@pytest.mark.parametrize("queues", [[], [""], [" ", ""]])
def test_the_worker_refuses_a_queue_list_that_names_no_queue(queues: list[str]) -> None:
    with pytest.raises(InvalidOptionsError, match="names no queue"):
        _settings(queues=queues)
    assert _settings(queues=None).queues == ("t",)


@pytest.mark.parametrize(("concurrency", "prefetch"), [(1, 128), (2, 128), (8, 128), (9, 144),
                                                       (32, 512), (128, 2048), (1000, 10_000)])
def test_the_default_prefetch_is_16_a_place_at_least_128_at_most_10000(
    concurrency: int, prefetch: int
) -> None:
    assert _settings(concurrency=concurrency).prefetch == prefetch
    assert _settings(concurrency=concurrency, prefetch=0).prefetch == 0  # an explicit one wins


@pytest.mark.parametrize("prefetch", [-1, 10_001, True, 1.5])
def test_the_worker_refuses_a_bad_prefetch(prefetch: Any) -> None:
    with pytest.raises(InvalidOptionsError, match="--prefetch"):
        _settings(prefetch=prefetch)
