"""Durations as users write them: `<number>[ms|s|m|h|d]`; a bare number means seconds.

A duration is at most 366 days; a lease is between 1 s and 24 h (docs/design.md). Both are checked
where the value is read (the CLI, the task decorator, the worker's settings), so that a value
no timer can hold (`--lease 99999999999h`) or one shorter than a heartbeat round trip
(`--lease 10ms`) never reaches a running worker.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

# Blanks around the value are forgiven; inside it (`3 s`) they are not: that is a typo as
# often as it is a unit.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}

MAX_DURATION_SECONDS = 366 * 86400.0
MIN_LEASE_SECONDS = 1.0
MAX_LEASE_SECONDS = 24 * 3600.0


def parse_duration(
    value: str | float | int | timedelta, *, maximum: float | None = MAX_DURATION_SECONDS
) -> float:
    """Seconds for `30s`, `500ms`, `2m`, `1h`, `15`, a number, or a timedelta; at most
    `maximum` (366 days unless the caller has its own bound).

    >>> parse_duration("500ms"), parse_duration("2m"), parse_duration(15)
    (0.5, 120.0, 15.0)
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    elif isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            raise ValueError(f"{value!r} is too long: a duration is at most 366 days") from None
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 500ms, 2m, 1h, 1d)")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"not a duration: {value!r}")
    if maximum is not None and seconds > maximum:
        most = "366 days" if maximum == MAX_DURATION_SECONDS else f"{maximum:g}s"
        raise ValueError(f"{value!r} is too long: a duration is at most {most}")
    return seconds


def parse_lease(value: str | float | int | timedelta) -> float:
    """Seconds of a lease: a duration between 1 s and 24 h.

    Heartbeats renew a lease every third of it; under a second, one slow round trip lets it
    expire under a running job, and its capacity is handed out twice.
    """
    seconds = parse_duration(value)
    if not MIN_LEASE_SECONDS <= seconds <= MAX_LEASE_SECONDS:
        raise ValueError(f"a lease must be between 1s and 24h, got {value!r}")
    return seconds
