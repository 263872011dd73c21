"""When a schedule fires: its occurrences, the catch-up rule, and the DST rules.

Pure functions of instants; nothing here reads a clock. The firing pass hands in PostgreSQL's
`now()`, so that every supervisor, however skewed its host, agrees on what is due.

- `every=D` fires at the instants k*D since the Unix epoch (UTC), computed in whole
  microseconds: `every="30s"` at :00 and :30 of every minute.
- `cron=` is a standard 5-field expression, evaluated in its IANA zone by cronsim. A local
  time that does not exist (spring forward) fires once, at the first valid instant after it (the
  transition); a local time that happens twice (fall back) fires once, at its first instance:
  the repeated hour's second pass of the wall clock fires nothing.
- An occurrence fires while it is at most MISSED_AFTER overdue. An older one was missed (every
  supervisor was down), and the schedule's `catch_up` decides: "latest" fires the most recent
  missed occurrence, "all" the most recent CATCH_UP_ALL_LIMIT of them, "skip" none.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ._durations import parse_duration
from .errors import InvalidScheduleError

MISSED_AFTER = timedelta(seconds=60)
CATCH_UP_ALL_LIMIT = 100
CATCH_UP_POLICIES = ("latest", "all", "skip")
EVERY_MIN_SECONDS = 1.0
EVERY_MAX_SECONDS = 366 * 86400.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)
_UNITS = (("d", 86400_000_000), ("h", 3600_000_000), ("m", 60_000_000), ("s", 1_000_000),
          ("ms", 1000))


@lru_cache(maxsize=1024)
def zone(name: object) -> ZoneInfo:
    """The IANA zone `name`, or InvalidScheduleError."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InvalidScheduleError(f"tz must be an IANA time zone name, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidScheduleError(
            f"unknown time zone {name!r} (use an IANA name such as 'Europe/Oslo' or 'UTC')"
        ) from None


def check_cron(expression: object) -> str:
    """A standard 5-field cron expression, whitespace normalised; else InvalidScheduleError."""
    if not isinstance(expression, str):
        raise InvalidScheduleError(f"cron must be a string, got {expression!r}")
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidScheduleError(
            f"cron must have the 5 standard fields (minute hour day month weekday), got "
            f"{expression!r}"
        )
    normalised = " ".join(fields)
    try:
        CronSim(normalised, _EPOCH)
    except (CronSimError, ValueError) as exc:  # ValueError: a number of 4,300+ digits
        raise InvalidScheduleError(f"bad cron expression {expression!r}: {exc}") from None
    return normalised


def every_microseconds(every: object) -> int:
    """The interval in whole microseconds (1 s to 366 days); else InvalidScheduleError."""
    try:
        seconds = parse_duration(every)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise InvalidScheduleError(
            f"every must be a duration such as '30s', '5m' or '1h', got {every!r}"
        ) from None
    if not EVERY_MIN_SECONDS <= seconds <= EVERY_MAX_SECONDS:
        raise InvalidScheduleError(
            f"every must be between 1 second and 366 days, got {every!r}"
        )
    return round(seconds * 1_000_000)


def every_text(microseconds: int) -> str:
    """The canonical spelling of an interval: the largest unit that divides it ("30s", "2h")."""
    for unit, size in _UNITS:
        if microseconds % size == 0:
            return f"{microseconds // size}{unit}"
    return f"{microseconds / 1_000_000:f}".rstrip("0") + "s"


@dataclass(frozen=True, slots=True)
class Timing:
    """A schedule's expression: exactly one of `cron` (in `tz`) or `every_us`."""

    cron: str | None
    every_us: int | None
    tz: str = "UTC"

    # ---- the occurrences -------------------------------------------------------------------

    def after(self, instant: datetime) -> datetime:
        """The first occurrence strictly after `instant` (UTC)."""
        if self.every_us is not None:
            k = _micros(instant) // self.every_us + 1
            return _instant(k * self.every_us)
        for found in self._cron_forward(instant):
            return found
        raise InvalidScheduleError(f"cron {self.cron!r} never fires")  # pragma: no cover

    def between(self, start: datetime, end: datetime) -> list[datetime]:
        """Every occurrence in [start, end], ascending. The caller bounds the span."""
        if end < start:
            return []
        if self.every_us is not None:
            first = -(-_micros(start) // self.every_us)
            last = _micros(end) // self.every_us
            return [_instant(k * self.every_us) for k in range(first, last + 1)]
        found = []
        for occurrence in self._cron_forward(start - _TICK):
            if occurrence > end:
                break
            found.append(occurrence)
        return found

    def last_before(self, before: datetime, not_before: datetime, limit: int) -> list[datetime]:
        """The latest `limit` occurrences in [not_before, before), ascending."""
        if limit <= 0 or before <= not_before:
            return []
        if self.every_us is not None:
            last = (_micros(before) - 1) // self.every_us
            first = max(-(-_micros(not_before) // self.every_us), last - limit + 1)
            return [_instant(k * self.every_us) for k in range(first, last + 1)]
        # Walk back to find where the last `limit` begin, then list them forwards: the forward
        # walk is the one whose DST rules the firing uses.
        start = before
        assert self.cron is not None
        reverse = CronSim(self.cron, before.astimezone(zone(self.tz)), reverse=True)
        for _ in range(limit + 2):
            candidate = next(reverse, None)
            if candidate is None or candidate.astimezone(UTC) < not_before:
                break
            start = candidate.astimezone(UTC)
        found = [o for o in self.between(max(start, not_before), before) if o < before]
        return found[-limit:]

    def _cron_forward(self, instant: datetime) -> Iterator[datetime]:
        assert self.cron is not None
        local = zone(self.tz)
        start = instant.astimezone(UTC)
        for found in CronSim(self.cron, instant.astimezone(local)):
            if found.fold == 1 and found.replace(fold=0).utcoffset() != found.utcoffset():
                continue  # the wall clock's second pass through a repeated hour: fired already
            at = found.astimezone(UTC)
            if at <= start:
                # cronsim walks wall-clock time: started during the repeated hour's second pass,
                # its first result can be that wall time's first pass, an hour back.
                continue
            yield at

    # ---- the firing rule -------------------------------------------------------------------

    def due(self, next_run_at: datetime, now: datetime, catch_up: str
            ) -> tuple[list[datetime], datetime]:
        """What a firing pass at `now` enqueues for a schedule whose first unhandled occurrence
        is `next_run_at`, and the schedule's next pointer (the first occurrence after `now`)."""
        if catch_up not in CATCH_UP_POLICIES:
            raise InvalidScheduleError(f"unknown catch_up {catch_up!r}")
        if next_run_at > now:
            return [], next_run_at
        following = self.after(now)
        cutoff = now - MISSED_AFTER
        missed: list[datetime] = []
        if catch_up != "skip" and next_run_at < cutoff:
            limit = 1 if catch_up == "latest" else CATCH_UP_ALL_LIMIT
            missed = self.last_before(cutoff, next_run_at, limit)
        return missed + self.between(max(next_run_at, cutoff), now), following


def _micros(instant: datetime) -> int:
    delta = instant - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _instant(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)
