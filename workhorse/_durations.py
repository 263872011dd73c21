"""Durations as users write them: `<number>[ms|s|m|h|d]`; a bare number means seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: str | float | int | timedelta) -> float:
    """Seconds for `30s`, `500ms`, `2m`, `1h`, `15`, a number, or a timedelta.

    >>> parse_duration("500ms"), parse_duration("2m"), parse_duration(15)
    (0.5, 120.0, 15.0)
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    elif isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 500ms, 2m, 1h, 1d)")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"not a duration: {value!r}")
    return seconds
