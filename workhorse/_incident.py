"""What an operator must be able to trust in an incident (docs/design.md, "The dashboard in an
incident"): why a queue's ready work is not moving (`stalled`), and whether a queue an action
names exists at all (so that a typo is refused instead of creating a queue).

One implementation, used by `health()` (`QueueHealth.stalled`), the dashboard's banners and
`workhorse queues pause`:

>>> stall_reasons("mail", paused=True, limits=(None,), workers=[])
['no live supervisor: none is registered', 'paused: nothing starts until it is resumed']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from . import _sql
from ._driver import Operation
from .types import WorkerInfo, check_name

# How many of the newest job ids `queue_known` searches for a queue's jobs beyond the indexed
# statuses (as the dashboard's job list does: finished history has no index by queue).
KNOWN_WINDOW = 10_000


@dataclass(frozen=True, slots=True)
class Backlog:
    """A queue with ready or due work, and what in force may hold it (stalled_queues.sql)."""

    queue: str
    paused: bool
    max_active: int | None
    max_active_per_key: int | None
    rate_limit: int | None
    rate_limit_per_key: int | None
    feature_level: int = 1  # the claim level the queue needs (above the workers': it is idle)
    ready: int = 0  # its ready jobs, counted up to the sample


def _since(moment: datetime, now: datetime) -> str:
    seconds = max(int((now - moment).total_seconds()), 0)
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def stall_reasons(queue: str, *, paused: bool, limits: Sequence[int | None],
                  workers: Sequence[WorkerInfo], now: datetime | None = None,
                  unknown_tasks: Sequence[str] = ()) -> list[str]:
    """Why `queue`'s ready or due jobs cannot start, each reason a short sentence (empty: none
    stops it; a limit that is merely reached is not a stall, the dashboard says which one
    holds it). `workers` is the registry (alive or not); `limits` the limits in force.

    The reasons, in order: no live supervisor at all (none registered, or none seen for
    30 s); none whose `--queues` include the queue; none of those serving it whose app
    declares the task of some of its ready jobs (`unknown_tasks`, from unknown_task_ready);
    paused; a limit of 0.
    """
    now = now or datetime.now(UTC)
    reasons = []
    live = [w for w in workers if w.alive]
    if not workers:
        reasons.append("no live supervisor: none is registered")
    elif not live:
        last = max(w.last_seen for w in workers)
        reasons.append(f"no live supervisor: the last one was seen {_since(last, now)}")
    elif not any(queue in w.queues for w in live):
        served = sorted({q for w in live for q in w.queues})
        shown = ", ".join(served[:5]) + (", ..." if len(served) > 5 else "")
        reasons.append(f"no live supervisor serves it: none has it in --queues ({shown})")
    if unknown_tasks:
        names = ", ".join(unknown_tasks[:5]) + (", ..." if len(unknown_tasks) > 5 else "")
        reasons.append(f"no live supervisor's app declares task {names}")
    if paused:
        reasons.append("paused: nothing starts until it is resumed")
    if any(limit == 0 for limit in limits):
        reasons.append("a limit in force is 0: nothing can start")
    return reasons


def unknown_task_ready(sample: int) -> Operation[dict[str, tuple[int, list[str]]]]:
    """`QueueHealth.unknown_task_ready`, with the tasks: queue -> (how many of its first
    `sample` ready jobs have a task no live supervisor serving the queue declares, those
    tasks). Only queues some live supervisor serves (else the queue is stalled for that)."""
    rows = yield _sql.statement("unknown_task_ready"), {"sample": sample}
    return {row[0]: (int(row[1]), list(row[2] or [])) for row in rows}


def backlog(sample: int) -> Operation[tuple[list[Backlog], list[WorkerInfo]]]:
    """The queues with ready or due work and what in force may hold it, with the workers'
    registry (read only when some queue has such work: empty otherwise)."""
    rows = yield _sql.statement("stalled_queues"), {"sample": sample}
    found = [Backlog(*row) for row in rows]
    if not found:
        return [], []
    worker_rows = yield _sql.statement("list_workers"), ()
    return found, [WorkerInfo(*row) for row in worker_rows]


def stalled_from(backlog: Sequence[Backlog], workers: Sequence[WorkerInfo],
                 unknown: dict[str, tuple[int, list[str]]] | None = None) -> dict[str, str]:
    """`QueueHealth.stalled` from `backlog`'s answer: queue -> why its ready (or due) work
    cannot move, the reasons joined by "; ". Only queues with such work and at least one
    reason are in it. `unknown`: unknown_task_ready's answer, when the caller has it."""
    found = {}
    for b in backlog:
        reasons = stall_reasons(
            b.queue, paused=b.paused, workers=workers,
            limits=(b.max_active, b.max_active_per_key, b.rate_limit, b.rate_limit_per_key),
            unknown_tasks=(unknown or {}).get(b.queue, (0, []))[1])
        if reasons:
            found[b.queue] = "; ".join(reasons)
    return found


def stalled(unknown: dict[str, tuple[int, list[str]]] | None = None, sample: int = 1000
            ) -> Operation[dict[str, str]]:
    """`QueueHealth.stalled` (see `stalled_from`), read."""
    found, workers = yield from backlog(sample)
    return stalled_from(found, workers, unknown)


def queue_known(queue: str) -> Operation[bool]:
    """Whether `queue` has a policy, a control, a schedule, a live supervisor serving it, a
    named budget its jobs have named, or a job (of an indexed status, or among the newest
    KNOWN_WINDOW); an operator action on any other queue is refused (a typo must not create
    one)."""
    check_name("queue", queue)
    rows = yield _sql.statement("queue_known"), {"queue": queue, "window": KNOWN_WINDOW}
    return bool(rows and rows[0][0])

