"""Concurrency policies and queue health, and the operator's controls of a queue (pause, an
override of its limits), the queue list and the admission tables' housekeeping."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from .. import _incident, _reasons, _sql
from .._driver import Operation, Rows
from ..errors import (
    InvalidOptionsError,
    InvalidPolicyError,
)
from ..types import (
    MAX_DELAY_SECONDS,
    MAX_POLICY_DEFINITIONS,
    BackoffState,
    ConcurrencyPolicy,
    ConcurrencyPolicyDefinition,
    JobStatus,
    KeyLimit,
    PolicyHealth,
    PolicyOverride,
    QueueControl,
    QueueHealth,
    QueueSummary,
    RateLimit,
    SyncReport,
    check_name,
    check_optional_name,
    rate_text,
)
from .admission import FEATURE_LEVEL
from .budgets import budget_health
from .durable import SUSPEND_REASONS
from .jobs import HEALTH_SAMPLE

# ---- policies and health ------------------------------------------------------------------------


def list_policies(namespace: str | None) -> Operation[list[ConcurrencyPolicy]]:
    check_optional_name("namespace", namespace)
    rows = yield _sql.statement("list_policies"), (namespace, namespace)
    return [
        ConcurrencyPolicy(
            namespace=row[0], queue=row[1], max_active=row[2], max_active_per_key=row[3],
            created_at=row[4], updated_at=row[5], rate_limit=rate_text(row[6], row[7]),
            rate_limit_per_key=rate_text(row[8], row[9]), fairness=row[10],
            on_key_full=row[11], rate_burst=row[12], rate_burst_per_key=row[13],
        )
        for row in rows
    ]


def _override(row: Sequence[Any], bursts: Sequence[Any] = (None, None)) -> PolicyOverride:
    """From (max_active, per_key, rate n, rate period, per-key n, per-key period, set, expires),
    and the override's (rate_burst, rate_burst_per_key)."""
    return PolicyOverride(
        max_active=row[0], max_active_per_key=row[1], rate_limit=rate_text(row[2], row[3]),
        rate_limit_per_key=rate_text(row[4], row[5]), set_at=row[6], expires_at=row[7],
        rate_burst=bursts[0], rate_burst_per_key=bursts[1],
    )


def sync_policies(
    namespace: str,
    definitions: Iterable[ConcurrencyPolicyDefinition],
    prune: bool,
) -> Operation[tuple[SyncReport, list[ConcurrencyPolicy]]]:
    check_name("namespace", namespace, InvalidPolicyError)
    definitions = list(definitions)
    if len(definitions) > MAX_POLICY_DEFINITIONS:
        raise InvalidPolicyError(
            f"{len(definitions)} definitions; at most {MAX_POLICY_DEFINITIONS} in one sync"
        )
    seen: set[str] = set()
    for definition in definitions:
        if not isinstance(definition, ConcurrencyPolicyDefinition):
            raise InvalidPolicyError(f"expected ConcurrencyPolicyDefinition, got {definition!r}")
        if definition.queue in seen:
            raise InvalidPolicyError(f"queue {definition.queue!r} is defined twice")
        seen.add(definition.queue)
    rates = [d.rate for d in definitions]
    per_key = [d.rate_per_key for d in definitions]
    rows = yield _sql.statement("sync_policies"), (
        namespace,
        [d.queue for d in definitions],
        [d.max_active for d in definitions],
        [d.max_active_per_key for d in definitions],
        [r.n if r else None for r in rates],
        [r.period if r else None for r in rates],
        [r.n if r else None for r in per_key],
        [r.period if r else None for r in per_key],
        bool(prune),
        [d.fairness for d in definitions],
        [d.on_key_full for d in definitions],
        [d.rate_burst for d in definitions],
        [d.rate_burst_per_key for d in definitions],
    )
    report = SyncReport()
    for action, queue in rows:
        getattr(report, action).append(queue)
    policies = yield from list_policies(namespace)
    return report, policies


def _key_limit(max_active: int | None, weight: int | None, n: int | None,
               period: float | None) -> KeyLimit | None:
    """A key limit set's default from its columns (None: it has none)."""
    if max_active is None and weight is None and n is None:
        return None
    return KeyLimit(max_active=max_active, weight=weight, rate_limit=rate_text(n, period))


def health() -> Operation[QueueHealth]:
    rows = yield _sql.statement("policy_health"), {"sample": HEALTH_SAMPLE}
    policies = [
        PolicyHealth(
            namespace=row[0], queue=row[1], max_active=row[2], max_active_per_key=row[3],
            active=row[4], available=row[5], blocked_ready=row[6], saturated_keys=row[7],
            capped=row[8], rate_limit=rate_text(row[9], row[10]),
            rate_limit_per_key=rate_text(row[11], row[12]), rate_limited_keys=row[13],
            paused=row[14], override=_override(row[16:24], row[30:32]) if row[15] else None,
            fairness=row[25], active_units=row[26], on_key_full=row[27], rate_burst=row[28],
            rate_burst_per_key=row[29], active_jobs=row[32], next_start_at=row[33],
            next_key_start_at=row[34], budgets=list(row[35] or []),
            backed_off_until=row[36], backed_off_by=row[37],
            backed_off_keys=[BackoffState("key", row[1], key, until, by_job)
                             for key, until, by_job in zip(row[38], row[39], row[40],
                                                           strict=True)],
            backed_off_ready=row[41], key_limits=row[42],
            key_limit_default=_key_limit(*row[44:48]) if row[43] else None,
        )
        for row in rows
    ]
    depth_rows = yield _sql.statement("depth"), ()
    depth = {status.value: 0 for status in JobStatus}
    depth.update({status: int(count) for status, count in depth_rows})
    waiting_rows = yield _sql.statement("waiting_depth"), ()
    depth[JobStatus.WAITING.value] = sum(int(n) for _, n in waiting_rows)
    unknown = yield from _incident.unknown_task_ready(HEALTH_SAMPLE)
    backlog, workers = yield from _incident.backlog(HEALTH_SAMPLE)
    budgets = yield from budget_health()
    suspended, next_wake = yield from suspended_health()
    # Last, so that the server's clock it reads is later than every next start read above.
    expired_rows = yield _sql.statement("expired_leases"), ()
    now, expired_queues, expired_counts, ended_queues, ended_counts = expired_rows[0]
    budgets = [dataclasses.replace(b, reasons=_reasons.budget_reasons(b, now)) for b in budgets]
    reasons = _reasons.queue_reasons(
        policies=policies, backlog=backlog, workers=workers, unknown=unknown, budgets=budgets,
        expired=dict(zip(expired_queues, expired_counts, strict=True)),
        past_deadline=dict(zip(ended_queues, ended_counts, strict=True)),
        suspended=suspended, now=now, level=FEATURE_LEVEL)
    return QueueHealth(policies=policies, depth=depth,
                       stalled=_incident.stalled_from(backlog, workers, unknown),
                       unknown_task_ready={queue: n for queue, (n, _) in unknown.items()},
                       budgets=budgets, reasons=reasons, suspended=suspended,
                       suspended_next_wake_at=next_wake)


def suspended_health() -> Operation[tuple[dict[str, dict[str, int]], dict[str, datetime]]]:
    """`QueueHealth.suspended` and `suspended_next_wake_at` (suspended_health.sql, through
    jobs_suspended_idx): queue -> its suspended jobs by what they wait for (sleep, signal,
    children: each key there), and queue -> the soonest timer among them."""
    rows = yield _sql.statement("suspended_health"), ()
    counts: dict[str, dict[str, int]] = {}
    next_wake: dict[str, datetime] = {}
    for queue, reason, n, wake_at in rows:
        found = counts.setdefault(queue, dict.fromkeys(SUSPEND_REASONS, 0))
        found[reason or "unknown"] = found.get(reason or "unknown", 0) + int(n)
        if wake_at is not None and (queue not in next_wake or wake_at < next_wake[queue]):
            next_wake[queue] = wake_at
    return counts, next_wake

# ---- operator controls ------------------------------------------------------------------------


def _control(rows: Rows, queue: str) -> QueueControl:
    if not rows:
        return QueueControl(queue)
    row = rows[0]
    overridden = row[9] is not None
    return QueueControl(
        queue=row[0], paused=row[1], paused_at=row[2],
        override=_override(row[3:11], row[11:13]) if overridden else None,
    )


def set_queue_control(
    queue: str,
    action: str,
    *,
    max_active: int | None = None,
    max_active_per_key: int | None = None,
    rate_limit: str | None = None,
    rate_limit_per_key: str | None = None,
    expires_in: float | None = None,
    rate_burst: int | None = None,
    rate_burst_per_key: int | None = None,
) -> Operation[QueueControl]:
    """Pause, resume, override or clear a queue's override (set_queue_control.sql). An
    override's bursts must fit its own rates when it sets them; else the SQL checks them against
    the rates in force (InvalidPolicyError, nothing written)."""
    check_name("queue", queue)
    for what, value in (("max_active", max_active), ("max_active_per_key", max_active_per_key)):
        if value is not None and (type(value) is not int or not 1 <= value <= 1_000_000):
            raise InvalidPolicyError(f"{what} must be an int in [1, 1000000], got {value!r}")
    rate = RateLimit.optional(rate_limit, "rate_limit")
    rate_key = RateLimit.optional(rate_limit_per_key, "rate_limit_per_key")
    for what, burst, limit in (("rate_burst", rate_burst, rate),
                               ("rate_burst_per_key", rate_burst_per_key, rate_key)):
        if burst is not None and (type(burst) is not int or not 1 <= burst <= 1_000_000):
            raise InvalidPolicyError(f"{what} must be an int in [1, 1000000], got {burst!r}")
        if burst is not None and limit is not None and burst > limit.n:
            raise InvalidPolicyError(
                f"queue {queue!r}: {what} ({burst}) must be at most the override's N "
                f"({limit})")
    if action == "override" and max_active is None and max_active_per_key is None and (
        rate is None and rate_key is None and rate_burst is None and rate_burst_per_key is None
    ):
        raise InvalidPolicyError(
            "an override needs at least one of max_active, max_active_per_key, rate_limit, "
            "rate_limit_per_key, rate_burst, rate_burst_per_key"
        )
    if expires_in is not None and (
        isinstance(expires_in, bool) or not isinstance(expires_in, int | float)
        or not 0 < expires_in <= MAX_DELAY_SECONDS
    ):
        raise InvalidOptionsError(f"expires_in must be positive seconds, got {expires_in!r}")
    rows = yield _sql.statement("set_queue_control"), (
        queue, action, max_active, max_active_per_key,
        rate.n if rate else None, rate.period if rate else None,
        rate_key.n if rate_key else None, rate_key.period if rate_key else None,
        float(expires_in) if expires_in is not None else None,
        rate_burst if action == "override" else None,
        rate_burst_per_key if action == "override" else None,
    )
    return _control(rows, queue)


def list_queues() -> Operation[list[QueueSummary]]:
    rows = yield _sql.statement("list_queues"), ()
    waiting_rows = yield _sql.statement("waiting_depth"), ()
    waiting = {queue: int(n) for queue, n in waiting_rows}
    summaries = []
    for row in rows:
        depth = {status.value: 0 for status in JobStatus if status != JobStatus.SUCCEEDED}
        depth.update({status: int(n) for status, n in (row[1] or {}).items()})
        depth[JobStatus.WAITING.value] = waiting.pop(row[0], 0)
        summaries.append(QueueSummary(
            queue=row[0], depth=depth, namespace=row[2], max_active=row[3],
            max_active_per_key=row[4], rate_limit=rate_text(row[5], row[6]),
            rate_limit_per_key=rate_text(row[7], row[8]), paused=row[9],
            override=_override(row[11:19]) if row[10] else None, budgets=list(row[19] or []),
        ))
    for queue, n in sorted(waiting.items()):  # a queue with only waiting members
        depth = {status.value: 0 for status in JobStatus if status != JobStatus.SUCCEEDED}
        depth[JobStatus.WAITING.value] = n
        summaries.append(QueueSummary(queue=queue, depth=depth))
    return summaries


def housekeeping() -> Operation[tuple[int, int]]:
    """Clear expired overrides (of queues and of budgets) and prune old start buckets:
    (overrides cleared, rows pruned)."""
    rows = yield _sql.statement("housekeeping"), ()
    return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)

