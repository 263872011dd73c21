"""Schedules: their definitions, and the firing of the due ones."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from .. import _occurrences, _sql
from .._driver import Operation, encode_json
from ..errors import (
    InvalidScheduleError,
)
from ..types import (
    FiringPass,
    Schedule,
    ScheduleDefinition,
    SyncReport,
    check_name,
    check_optional_name,
)
from .jobs import or_null, tags_json, unless_one

# At most this many schedules in one sync, and due ones in one firing pass (the rest: next pass).
MAX_SCHEDULE_DEFINITIONS = 10_000
FIRING_BATCH = 500


def _timing(cron: str | None, every: timedelta | str | None, tz: str) -> _occurrences.Timing:
    if every is None:
        return _occurrences.Timing(cron, None, tz)
    micros = (every // timedelta(microseconds=1) if isinstance(every, timedelta)
              else _occurrences.every_microseconds(every))
    return _occurrences.Timing(None, micros, tz)


def _schedule_from_row(row: Sequence[Any]) -> Schedule:
    every = row[4]
    return Schedule(
        namespace=row[0], name=row[1], task=row[2], cron=row[3],
        every=None if every is None else _occurrences.every_text(
            every // timedelta(microseconds=1)),
        args=row[5], kwargs=row[6], queue=row[7], tz=row[8], catch_up=row[9], priority=row[10],
        max_attempts=row[11], concurrency_key=row[12], on_failure=row[13], next_run_at=row[14],
        last_run_at=row[15], created_at=row[16], updated_at=row[17],
        cost=row[18], rate_cost=row[19], weight=row[20], tags=tuple(row[21] or ()),
    )


def list_schedules(namespace: str | None = None) -> Operation[list[Schedule]]:
    check_optional_name("namespace", namespace)
    rows = yield _sql.statement("list_schedules"), (namespace, namespace)
    return [_schedule_from_row(row) for row in rows]


def sync_schedules(
    namespace: str,
    definitions: Iterable[ScheduleDefinition],
    prune: bool,
) -> Operation[tuple[SyncReport, list[Schedule]]]:
    """Desired state for `namespace`'s schedules (sync_schedules.sql); every definition
    is checked before anything is sent."""
    check_name("namespace", namespace, InvalidScheduleError)
    definitions = list(definitions)
    if len(definitions) > MAX_SCHEDULE_DEFINITIONS:
        raise InvalidScheduleError(
            f"{len(definitions)} schedules; at most {MAX_SCHEDULE_DEFINITIONS} in one sync")
    seen: set[str] = set()
    for definition in definitions:
        if not isinstance(definition, ScheduleDefinition):
            raise InvalidScheduleError(f"expected ScheduleDefinition, got {definition!r}")
        if definition.name in seen:
            raise InvalidScheduleError(f"schedule {definition.name!r} is defined twice")
        seen.add(definition.name)
    args = [encode_json(d.args, f"schedule {d.name!r} args") for d in definitions]
    kwargs = [encode_json(d.kwargs, f"schedule {d.name!r} kwargs") for d in definitions]
    timings = [_timing(d.cron, d.every, d.tz) for d in definitions]  # type: ignore[arg-type]
    rows = yield _sql.statement("database_now"), ()
    now = rows[0][0]
    rows = yield _sql.statement("sync_schedules"), (
        namespace,
        [d.name for d in definitions],
        [d.task for d in definitions],
        [d.cron for d in definitions],
        [None if t.every_us is None else timedelta(microseconds=t.every_us) for t in timings],
        [d.tz for d in definitions],
        args,
        kwargs,
        [d.target_queue for d in definitions],
        [d.concurrency_key for d in definitions],
        [d.priority for d in definitions],
        [d.max_attempts for d in definitions],
        [d.on_failure for d in definitions],
        [d.catch_up for d in definitions],
        [t.after(now) for t in timings],
        bool(prune),
        or_null([unless_one(d.cost) for d in definitions]),
        or_null([unless_one(d.rate_cost) for d in definitions]),
        or_null([unless_one(d.weight) for d in definitions]),
        or_null([tags_json(d.tags) for d in definitions]),
    )
    report = SyncReport()
    for action, name in rows:
        getattr(report, action).append(name)
    schedules = yield from list_schedules(namespace)
    return report, schedules


def fire_due_schedules(namespace: str, limit: int = FIRING_BATCH) -> Operation[FiringPass]:
    """One firing pass for `namespace`: lock its due schedules (skipping those another pass
    holds), enqueue their occurrences by the catch-up rule, move their pointers past now().
    Run it inside a transaction, which holds the rows until it commits."""
    rows = yield _sql.statement("schedules_due"), {"namespace": namespace, "limit": limit}
    run_ids: list[int] = []
    run_occurrences: list[datetime] = []
    ids: list[int] = []
    next_run_ats: list[datetime] = []
    broken: list[tuple[str, str]] = []
    for schedule_id, name, cron, every, tz, catch_up, next_run_at, now in rows:
        try:
            occurrences, following = _timing(cron, every, tz).due(next_run_at, now, catch_up)
        except (InvalidScheduleError, ValueError, OverflowError) as exc:
            # Unreadable here (e.g. a zone this host's tzdata lacks): look again in a minute.
            broken.append((name, str(exc)))
            occurrences, following = [], now + _occurrences.MISSED_AFTER
        run_ids.extend([schedule_id] * len(occurrences))
        run_occurrences.extend(occurrences)
        ids.append(schedule_id)
        next_run_ats.append(following)
    fired: list[tuple[int, datetime, int]] = []
    if ids:
        fired_rows = yield _sql.statement("fire_schedules"), (
            run_ids, run_occurrences, ids, next_run_ats)
        fired = [(row[0], row[1], row[2]) for row in fired_rows]
    due_rows = yield _sql.statement("schedules_next_due"), (namespace,)
    next_due, now = due_rows[0]
    return FiringPass(
        fired=fired,
        locked=len(rows),
        full=len(rows) >= limit,
        next_due_in=None if next_due is None else (next_due - now).total_seconds(),
        now=now,
        broken=broken,
    )
