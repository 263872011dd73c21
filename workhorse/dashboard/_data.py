"""What each page shows, read through the bounded operations of `_ops.py` (no SQL here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from .. import _ops
from .._occurrences import MISSED_AFTER
from ..types import (
    ConcurrencyPolicy,
    Job,
    JobPage,
    KeyPressure,
    PolicyHealth,
    QueueSummary,
    ThroughputMinute,
    WorkerInfo,
)

CHART_MINUTES = 60
CHART_WIDTH = 600
CHART_HEIGHT = 140
JOBS_PAGE = 100
RUNNING_SHOWN = 20
# The three throughput series the chart draws, with the counter each one reads.
SERIES = (("claims", "claimed"), ("completions", "succeeded"), ("failures", "failed"))


@dataclass(frozen=True)
class Series:
    name: str
    points: str          # SVG polyline points
    latest: float        # per second, in the latest minute with data


@dataclass(frozen=True)
class Chart:
    series: list[Series]
    peak: float          # per second, the top of the y axis
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    empty: bool = True


@dataclass(frozen=True)
class Overview:
    policies: list[PolicyHealth]
    queues: list[QueueSummary]
    depth: dict[str, int]
    chart: Chart
    workers_alive: int


@dataclass(frozen=True)
class QueuePage:
    queue: str
    health: PolicyHealth | None
    summary: QueueSummary | None
    policy: ConcurrencyPolicy | None
    saturated: list[KeyPressure]
    rate_limited: list[KeyPressure]
    running: list[Job]


@dataclass(frozen=True)
class JobFilter:
    queue: str | None = None
    status: str | None = None
    task: str | None = None
    key: str | None = None
    id: int | None = None
    before: int | None = None    # ids below this one: the page after a full one

    def query(self, **changes: Any) -> dict[str, Any]:
        """The filter as URL parameters, with `changes` applied (None removes one)."""
        chosen = {**self.__dict__, **changes}
        return {k: v for k, v in chosen.items() if v is not None}


@dataclass(frozen=True)
class ScheduleRow:
    namespace: str
    name: str
    task: str
    queue: str
    spec: str
    tz: str
    catch_up: str
    next_run_at: datetime
    last_run_at: datetime | None
    due: bool = False        # the next occurrence has come: a supervisor fires it within seconds
    # ... and is more than MISSED_AFTER past: no supervisor of the app fired it, so it is missed
    # (its catch_up decides what fires when one runs again).
    overdue: bool = False


@dataclass(frozen=True)
class SchedulesPage:
    available: bool
    schedules: list[ScheduleRow] = field(default_factory=list)


def chart(minutes: list[ThroughputMinute], now: datetime) -> Chart:
    """Per-second rates for each of the last CHART_MINUTES minutes (0 where nobody counted)."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=CHART_MINUTES - 1)
    by_minute = {m.minute: m for m in minutes}
    rates: dict[str, list[float]] = {name: [] for name, _ in SERIES}
    for i in range(CHART_MINUTES):
        found = by_minute.get(start + timedelta(minutes=i))
        for name, counter in SERIES:
            rates[name].append(getattr(found, counter) / found.seconds if found else 0.0)
    peak = max((max(values) for values in rates.values()), default=0.0)
    top = peak if peak > 0 else 1.0
    step = CHART_WIDTH / (CHART_MINUTES - 1)
    series = []
    for name, _ in SERIES:
        values = rates[name]
        points = " ".join(
            f"{i * step:.1f},{CHART_HEIGHT - value / top * (CHART_HEIGHT - 4):.1f}"
            for i, value in enumerate(values)
        )
        latest = next((v for v in reversed(values) if v > 0), 0.0) if minutes else 0.0
        series.append(Series(name, points, latest))
    return Chart(series=series, peak=peak, empty=not minutes)


def overview(conn: psycopg.Connection[Any]) -> Overview:
    health = _ops.execute(conn, _ops.health())
    queues = _ops.execute(conn, _ops.list_queues())
    minutes = _ops.execute(conn, _ops.throughput(CHART_MINUTES))
    workers = _ops.execute(conn, _ops.list_workers())
    now = datetime.now(UTC)
    return Overview(
        policies=health.policies, queues=queues, depth=health.depth,
        chart=chart(minutes, now), workers_alive=sum(1 for w in workers if w.alive),
    )


def queue_page(conn: psycopg.Connection[Any], queue: str) -> QueuePage:
    health = _ops.execute(conn, _ops.health())
    summaries = _ops.execute(conn, _ops.list_queues())
    policies = _ops.execute(conn, _ops.list_policies(None))
    row = next((p for p in health.policies if p.queue == queue), None)
    return QueuePage(
        queue=queue,
        health=row,
        summary=next((s for s in summaries if s.queue == queue), None),
        policy=next((p for p in policies if p.queue == queue), None),
        saturated=_ops.execute(conn, _ops.saturated_keys(queue)),
        rate_limited=_ops.execute(conn, _ops.rate_limited_keys(queue)),
        running=_ops.execute(conn, _ops.list_jobs(queue=queue, status="active",
                                                  limit=RUNNING_SHOWN)),
    )


def jobs(conn: psycopg.Connection[Any], chosen: JobFilter) -> JobPage:
    if chosen.id is not None:
        job = _ops.execute(conn, _ops.get_job(chosen.id))
        return JobPage([job] if job is not None else [])
    return _ops.execute(conn, _ops.browse_jobs(
        queue=chosen.queue, status=chosen.status, key=chosen.key, task=chosen.task,
        before=chosen.before, limit=JOBS_PAGE,
    ))


def job(conn: psycopg.Connection[Any], job_id: int) -> Job | None:
    return _ops.execute(conn, _ops.get_job(job_id))


def workers(conn: psycopg.Connection[Any]) -> list[WorkerInfo]:
    return _ops.execute(conn, _ops.list_workers())


def schedules(conn: psycopg.Connection[Any]) -> SchedulesPage:
    """Every namespace's schedules, with the next occurrence each will fire and the latest it
    fired; an empty page that says so on a schema without schedules."""
    if not _ops.execute(conn, _ops.schedules_present()):
        return SchedulesPage(available=False)
    now = datetime.now(UTC)
    rows = [
        ScheduleRow(
            namespace=s.namespace, name=s.name, task=s.task, queue=s.queue,
            spec=s.cron if s.cron is not None else f"every {s.every}", tz=s.tz,
            catch_up=s.catch_up, next_run_at=s.next_run_at, last_run_at=s.last_run_at,
            due=s.next_run_at <= now, overdue=s.next_run_at < now - MISSED_AFTER,
        )
        for s in _ops.execute(conn, _ops.list_schedules())
    ]
    return SchedulesPage(available=True, schedules=rows)
