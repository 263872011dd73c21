"""Rows that workhorse's own readers return (the dashboard's charts and job pages, the
scheduler's firing pass): not public API, so free to change between releases."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .records import Job


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


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of the dashboard's job list: the newest matches below an id, newest first.

    Every status but succeeded is searched to the oldest job (each through its partial index);
    succeeded jobs, the bulk of history with no index of their own, only within a window of job
    ids below the page's start. `unsearched_below` is that window's floor when the page is not
    full and succeeded jobs below it could still match (None: nothing was left unsearched)."""

    jobs: list[Job]
    unsearched_below: int | None = None
