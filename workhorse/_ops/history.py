"""History (docs/design.md "History"): jobs that ended succeeded or expired leave the claim's
table an hour later for job_history, partitioned by day, which the pruner drops a day at a
time; an export reads finished jobs of a range from both, in finish order."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from .. import _sql
from .._driver import Operation
from .._durations import parse_duration
from ..errors import InvalidOptionsError
from ..types import Job, check_count, check_optional_name, shown
from ..types._validate import MAX_DELAY_SECONDS
from .jobs import job_from_row

# How long a succeeded or expired job stays in `jobs` before it moves: the window the health
# and dashboard statements of "the last hour" read there, and what result waiters find first.
HISTORY_AFTER = 3600.0
# Jobs moved a batch (one transaction each), as the pruner deletes.
MOVE_BATCH = 5000
# Jobs an export reads a page.
EXPORT_PAGE = 1000


def move_to_history(limit: int = MOVE_BATCH, after: float = HISTORY_AFTER) -> Operation[int]:
    """Move up to `limit` jobs that ended succeeded or expired at least `after` seconds ago to
    history; how many moved, or -1 while another mover or pruner holds the lock."""
    check_count(limit, "limit", 0)
    if isinstance(after, bool) or not isinstance(after, int | float) \
            or not 0 <= after <= MAX_DELAY_SECONDS:  # also NaN and infinity
        raise InvalidOptionsError(
            f"after must be seconds in [0, {MAX_DELAY_SECONDS:.0f}], got {shown(after)}")
    rows = yield _sql.statement("move_to_history"), (limit, float(after))
    return int(rows[0][0])


def history_moment(name: str, value: object) -> datetime:
    """An export bound: an aware datetime, a date (its UTC midnight), ISO 8601 text of either
    (a time without an offset is UTC), or a duration ago ("2d", seconds, a timedelta).

    >>> history_moment("since", "2026-12-01")
    datetime.datetime(2026, 12, 1, 0, 0, tzinfo=datetime.timezone.utc)
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidOptionsError(f"{name} must be an aware datetime, got {value!r}")
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    if isinstance(value, bool) or not isinstance(value, str | int | float | timedelta):
        raise InvalidOptionsError(
            f"{name} must be a datetime, a date or a duration ago, got {shown(value)}")
    try:
        seconds = parse_duration(value, maximum=None)
    except (TypeError, ValueError):
        raise InvalidOptionsError(
            f"{name} must be a datetime, a date (2026-12-01) or a duration ago (2d), "
            f"got {shown(value)}") from None
    if seconds < 0:
        raise InvalidOptionsError(f"{name} must not be negative, got {shown(value)}")
    try:
        return datetime.now(UTC) - timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidOptionsError(f"{name} is too long ago: {shown(value)}") from None


def history_range(since: object, until: object | None,
                  queue: str | None) -> dict[str, Any]:
    """The export's bounds and filter, checked: [since, until), until defaulting to now."""
    check_optional_name("queue", queue)
    start = history_moment("since", since)
    end = datetime.now(UTC) if until is None else history_moment("until", until)
    if end < start:
        raise InvalidOptionsError(f"until ({end.isoformat()}) is before since "
                                  f"({start.isoformat()})")
    return {"since": start, "until": end, "queue": queue}


def history_page(bounds: dict[str, Any], after: tuple[datetime, int] | None,
                 limit: int = EXPORT_PAGE) -> Operation[list[Job]]:
    """The next page of finished jobs in `bounds`, in finish order, after `after`'s
    (finished_at, id) (None: from the start)."""
    after_at, after_id = after if after is not None else (bounds["since"], -1)
    rows = yield _sql.statement("history_export"), {
        **bounds, "after_at": after_at, "after_id": after_id, "limit": limit}
    return [job_from_row(row) for row in rows]
