"""The worker's own rows and wake-ups: lease renewals, LISTEN/NOTIFY, the supervisor registry and
the admission tables' vacuum."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import _sql
from .._driver import Operation
from ..types import (
    WorkerInfo,
    check_id,
)
from .admission import lease_seconds

HOUSEKEEPING_LOCK = 0x776B686B656570  # "wkhkeep": one vacuum of the admission tables at a time


def renew_leases(leases: Sequence[tuple[int, int, float]]) -> Operation[dict[int, bool]]:
    """Extend `(job_id, fence, seconds)` leases; returns the ids still held, each with whether
    its cancel was requested."""
    if not leases:
        return {}
    rows = yield _sql.statement("heartbeat"), (
        [check_id(job_id) for job_id, _, _ in leases],
        [check_id(fence, "a fence") for _, fence, _ in leases],
        [lease_seconds(seconds) for _, _, seconds in leases],
    )
    return {row[0]: bool(row[1]) for row in rows}


def heartbeat(leases: Sequence[tuple[int, int, float]]) -> Operation[set[int]]:
    held = yield from renew_leases(leases)
    return set(held)


# ---- wake-ups and the supervisor's row ----------------------------------------------------------


def listen() -> Operation[None]:
    """LISTEN on the wake-up channel (only SQL names it)."""
    yield _sql.statement("listen"), ()


def listen_probe() -> Operation[None]:
    yield _sql.statement("listen_probe"), ()


def notify_probe(token: str) -> Operation[None]:
    yield _sql.statement("notify_probe"), (token,)


def unlisten_probe() -> Operation[None]:
    yield _sql.statement("unlisten_probe"), ()


def unlisten_all() -> Operation[None]:
    yield _sql.statement("unlisten_all"), ()


def ready_queues(queues: Sequence[str]) -> Operation[set[str]]:
    """Which of `queues` have a ready job (the polled wake-ups, where LISTEN cannot work)."""
    rows = yield _sql.statement("ready_queues"), (list(queues),)
    return {row[0] for row in rows}


@dataclass(frozen=True, slots=True)
class QueueTimer:
    """What the supervisor's timer reads of one served queue: whether it is governed, the
    earliest moment a job may become claimable there without a NOTIFY (None: none is waiting),
    the database clock, and a slot's share of its max_active (None: no queue-wide limit)."""

    queue: str
    governed: bool
    due: datetime | None
    now: datetime
    share: float | None


def next_due(queues: Sequence[str]) -> Operation[list[QueueTimer]]:
    """Per served queue, its timer (QueueTimer)."""
    rows = yield _sql.statement("next_due"), (list(queues),)
    return [QueueTimer(row[0], bool(row[1]), row[2], row[4], row[3]) for row in rows]


def register_worker(
    app: str, host: str, pid: int, slots: int, queues: Sequence[str], stats: dict[str, Any],
    tasks: Sequence[str] | None = None,
) -> Operation[int | None]:
    """Insert a supervisor's row; `tasks`, the task names its app declares (None: not said)."""
    if tasks is None:
        rows = yield _sql.statement("worker_register"), (
            app, host, pid, slots, list(queues), json.dumps(stats),
        )
    else:
        rows = yield _sql.statement("worker_register_tasks"), (
            app, host, pid, slots, list(queues), json.dumps(stats), sorted(tasks),
        )
    return int(rows[0][0]) if rows else None


def touch_worker(worker_id: int, stats: dict[str, Any]) -> Operation[bool]:
    """Refresh the row's last_seen and counters; False when the row is gone (pruned)."""
    rows = yield _sql.statement("worker_heartbeat"), (json.dumps(stats), worker_id)
    return bool(rows)


def unregister_worker(worker_id: int) -> Operation[None]:
    yield _sql.statement("worker_unregister"), (worker_id,)


def list_workers() -> Operation[list[WorkerInfo]]:
    rows = yield _sql.statement("list_workers"), ()
    return [WorkerInfo(*row) for row in rows]


def top_counters() -> Operation[tuple[int, int, int]]:
    """Running totals (claimed, succeeded, failed), cheap enough to read every second."""
    rows = yield _sql.statement("top_counters"), ()
    return (int(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if rows else (0, 0, 0)


def try_lock_housekeeping() -> Operation[bool]:
    """One supervisor at a time does the fleet's housekeeping: False when another one is. A
    transaction-scoped lock: run it inside the transaction that does the housekeeping."""
    rows = yield _sql.statement("housekeeping_try_lock"), (HOUSEKEEPING_LOCK,)
    return bool(rows and rows[0][0])


def jobs_statistics_stale() -> Operation[bool]:
    """Whether `jobs` needs fresh planner statistics (never analyzed, or much changed since)."""
    rows = yield _sql.statement("jobs_statistics_stale"), ()
    return bool(rows and rows[0][0])


def analyze_jobs() -> Operation[None]:
    """ANALYZE `jobs` (allowed inside a transaction, unlike VACUUM)."""
    yield _sql.statement("analyze_jobs"), ()


def vacuum_admission_tables() -> Operation[None]:
    """VACUUM the key hints and heads. Needs an autocommit connection: VACUUM cannot run in a
    transaction block."""
    yield _sql.statement("vacuum_admission_tables"), ()

