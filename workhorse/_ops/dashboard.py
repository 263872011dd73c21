"""What only the dashboard reads: throughput, keys under pressure, whether schedules exist."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .. import _sql
from .._driver import Operation
from ..errors import (
    InvalidOptionsError,
)
from ..types import (
    JobStatus,
    KeyPressure,
    KeyShare,
    ThroughputMinute,
    check_id,
    check_name,
)
from .jobs import HEALTH_SAMPLE

# The supervisor counters the throughput history keeps, per minute (a column each).
THROUGHPUT_FIELDS = ("claimed", "succeeded", "failed", "retried", "held", "canceled")
# A saturated key's backlog is counted up to this many ready jobs (then shown as "more than").
BACKLOG_CAP = 200


def record_throughput(deltas: dict[str, int]) -> Operation[None]:
    """Add one supervisor's counter deltas to the current minute (and prune rows over a day)."""
    yield _sql.statement("record_throughput"), {
        name: max(int(deltas.get(name, 0)), 0) for name in THROUGHPUT_FIELDS
    }


def throughput(minutes: int = 60) -> Operation[list[ThroughputMinute]]:
    """The fleet's counters per minute over the last `minutes` (1-1440), oldest first; minutes
    nobody counted in are absent."""
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
        raise InvalidOptionsError(f"minutes must be an int in [1, 1440], got {minutes!r}")
    rows = yield _sql.statement("throughput"), {"minutes": minutes}
    found = []
    for row in rows:
        elapsed = (row[7] - row[0]).total_seconds()
        found.append(ThroughputMinute(
            minute=row[0], claimed=int(row[1]), succeeded=int(row[2]), failed=int(row[3]),
            retried=int(row[4]), held=int(row[5]), canceled=int(row[6]),
            seconds=min(max(elapsed, 1.0), 60.0)))
    return found


def _key_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= HEALTH_SAMPLE:
        raise InvalidOptionsError(f"limit must be an int in [1, {HEALTH_SAMPLE}], got {limit!r}")
    return limit


def saturated_keys(queue: str, limit: int = 20) -> Operation[list[KeyPressure]]:
    """The keys of `queue` at their limit in force (their own key limit, else the set's default,
    else max_active_per_key; `active` units of `limit`), the biggest ready backlog first
    (bounded as health() is: a sample of keys, each backlog counted up to BACKLOG_CAP)."""
    check_name("queue", queue)
    rows = yield _sql.statement("saturated_keys"), {
        "queue": queue, "sample": HEALTH_SAMPLE, "cap": BACKLOG_CAP, "limit": _key_limit(limit),
    }
    return [KeyPressure(key=row[0], active=row[1], backlog=min(row[2], BACKLOG_CAP),
                        capped=bool(row[3]), limit=row[4]) for row in rows]


def key_shares(queue: str, max_active: int | None, limit: int = 20
               ) -> Operation[list[KeyShare]]:
    """A fair queue's keys by active units, each with its fair share of `max_active` (bounded:
    the active jobs, and a sample of the keys with ready work)."""
    check_name("queue", queue)
    rows = yield _sql.statement("dashboard_key_shares"), {
        "queue": queue, "sample": HEALTH_SAMPLE * 10, "shown": _key_limit(limit)}
    return [KeyShare(key=row[0], units=int(row[1]), jobs=row[2], weight=row[3], ready=row[4],
                     share=(None if max_active is None or not row[5]
                            else max_active * row[3] / int(row[5])),
                     capped=bool(row[7]))
            for row in rows]


def rate_limited_keys(queue: str, limit: int = 20) -> Operation[list[KeyPressure]]:
    """The keys of `queue` out of their per-key rate limit now, the most used first."""
    check_name("queue", queue)
    rows = yield _sql.statement("rate_limited_keys"), {
        "queue": queue, "sample": HEALTH_SAMPLE, "limit": _key_limit(limit),
    }
    return [KeyPressure(key=row[0], used=row[1], limit=row[2]) for row in rows]


def schedules_present() -> Operation[bool]:
    """Whether this database has the schedules table (so that a page can say "no schedules"
    on a schema without it)."""
    rows = yield _sql.statement("schedules_present"), ()
    return bool(rows and rows[0][0])



# A parent's children listed on its job page and by `workhorse jobs show` (then "more").
CHILDREN_SHOWN = 50


def job_children_page(job_id: int, limit: int = CHILDREN_SHOWN
                      ) -> Operation[list[tuple[int, str | None, str, JobStatus]]]:
    """A parent's first `limit` children (docs/design.md "Children"), by step and id: (id,
    step, task, status); one more than `limit` says there are more."""
    rows = yield _sql.statement("dashboard_job_children"), {"id": check_id(job_id),
                                                            "limit": limit}
    return [(child, step, task, JobStatus.of_row(status)) for child, step, task, status in rows]


# A job's steps shown on its page (then "more"), and how much of each result and error.
STEPS_SHOWN = 200
STEP_TEXT_SHOWN = 500


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step on a job's page: a `Step` with its result as JSON text, cut to
    STEP_TEXT_SHOWN characters (`result_length`: the whole text's), and its error's type and
    message (cut)."""

    name: str
    kind: str
    created_at: datetime | None
    recorded_at: datetime | None
    wake_at: datetime | None
    signal: str | None
    result: str | None
    result_length: int
    error_type: str | None
    error_message: str | None

    @property
    def pending(self) -> bool:
        return self.recorded_at is None

    @property
    def cut(self) -> bool:
        return self.result is not None and self.result_length > len(self.result)


def job_step_rows(job_id: int, limit: int = STEPS_SHOWN) -> Operation[list[StepRow]]:
    """A job's first `limit` steps, in the order it reached them, results cut short
    (dashboard_job_steps.sql); one more than `limit` says there are more."""
    rows = yield _sql.statement("dashboard_job_steps"), {
        "id": check_id(job_id), "limit": limit, "width": STEP_TEXT_SHOWN}
    return [StepRow(name, kind, created, recorded, wake_at, signal, result, length or 0,
                    error_type, error_message)
            for (name, kind, created, recorded, wake_at, signal, result, length, error_type,
                 error_message) in rows]
