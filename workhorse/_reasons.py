"""Reason codes (docs/design.md "Reason codes"): why a queue's or a budget's work is not moving,
as stable codes an alerting rule can match, each with the number behind it. Pure: `health()`
reads the facts (policies, the backlog and the workers, budgets, expired leases) and this module
names them, so the rules are one function each side and testable without a database.

>>> from datetime import UTC, datetime
>>> from workhorse.types import PolicyHealth
>>> p = PolicyHealth("app", "mail", 5, None, 5, 0, 40, 0, False)
>>> [(r.code, r.count) for r in queue_reasons(policies=[p], now=datetime.now(UTC))]
[('at_limit', 40)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from ._incident import Backlog, stall_reasons
from .types import REASON_CODES, BudgetHealth, PolicyHealth, Reason, WorkerInfo

_ORDER = {code: n for n, code in enumerate(REASON_CODES)}


def _served(queue: str, workers: Sequence[WorkerInfo]) -> bool:
    return any(w.alive and queue in w.queues for w in workers)


def _from_backlog(b: Backlog, workers: Sequence[WorkerInfo],
                  unknown: Mapping[str, tuple[int, list[str]]], level: int) -> Iterable[Reason]:
    if not _served(b.queue, workers):
        # The same sentence as the stalled banner (_incident.stall_reasons' first, about workers).
        detail = stall_reasons(b.queue, paused=False, limits=(), workers=workers)[0]
        yield Reason("no_worker", b.ready, detail, b.queue)
    count, tasks = unknown.get(b.queue, (0, []))
    if count:
        names = ", ".join(tasks[:5]) + (", ..." if len(tasks) > 5 else "")
        yield Reason("unknown_task", count,
                     f"no live supervisor serving it declares task {names}", b.queue)
    if b.feature_level > level:
        yield Reason("feature_level", b.ready,
                     f"it needs workers of feature level {b.feature_level}; this release's "
                     f"claim {level} admits nothing there (upgrade the workers)", b.queue)
    if b.paused:
        yield Reason("paused", b.ready, "paused: nothing starts until it is resumed", b.queue)
    limits = (b.max_active, b.max_active_per_key, b.rate_limit, b.rate_limit_per_key)
    if any(limit == 0 for limit in limits):
        yield Reason("at_limit", b.ready, "a limit in force is 0: nothing can start", b.queue)


def _backoff_detail(until: datetime, by_job: int | None, scope: str, now: datetime) -> str:
    """"backed off until 15:02:09 UTC by job 4812 (scope queue; 29.5 s left)": the end as the
    server's session zone gave it (a backoff lasts a day at most, so the time of day says it)."""
    by = "" if by_job is None else f" by job {by_job}"
    left = max((until - now).total_seconds(), 0.0)
    clock = f"{until:%H:%M:%S %Z}".rstrip()
    return f"backed off until {clock}{by} ({scope}; {left:.1f} s left)"


def _backed_off(p: PolicyHealth, now: datetime) -> Iterable[Reason]:
    """`backed_off` while the queue's own backoff or some of its keys' is in force and holds
    ready work back; the count is those ready jobs (within the sample), the detail the queue's
    own backoff, else the key whose backoff ends first."""
    keys = [k for k in p.backed_off_keys if k.until > now]
    own = p.backed_off_until is not None and p.backed_off_until > now
    if not p.backed_off_ready or not (own or keys):
        return
    if own:
        assert p.backed_off_until is not None
        detail = _backoff_detail(p.backed_off_until, p.backed_off_by, "scope queue", now)
    else:
        more = f", and {len(keys) - 1} more keys" if len(keys) > 1 else ""
        detail = _backoff_detail(keys[0].until, keys[0].by_job,
                                 f"scope key {keys[0].key}{more}", now)
    yield Reason("backed_off", p.backed_off_ready, detail, p.queue)


def _from_policy(p: PolicyHealth, now: datetime) -> Iterable[Reason]:
    yield from _backed_off(p, now)
    if p.paused:
        yield Reason("paused", p.blocked_ready, "paused: nothing starts until it is resumed",
                     p.queue)
        return  # while paused, the limits hold nothing back themselves
    if p.backed_off_until is not None and p.backed_off_until > now:
        return  # nor while the queue is backed off: nothing starts before it ends either
    if not p.blocked_ready:
        return
    if p.max_active is not None and p.active >= p.max_active:
        yield Reason("at_limit", p.blocked_ready,
                     f"{p.active} of max_active={p.max_active} in use", p.queue)
    if p.saturated_keys:
        # With per-key limits as data a key's limit is its own (docs/design.md "Per-key
        # limits"), so the detail names no single number then.
        at = ("their own limit (key limits)" if p.key_limits or p.key_limit_default
              else f"max_active_per_key={p.max_active_per_key}")
        yield Reason("key_saturated", p.saturated_keys,
                     f"{p.saturated_keys} keys at {at}", p.queue)
    if p.next_start_at is not None and p.next_start_at > now:
        wait = (p.next_start_at - now).total_seconds()
        yield Reason("rate_limited", p.blocked_ready,
                     f"out of starts ({p.rate_limit}): the next in {wait:.1f} s", p.queue)
    elif p.rate_limited_keys:
        yield Reason("rate_limited", p.rate_limited_keys,
                     f"{p.rate_limited_keys} keys out of starts ({p.rate_limit_per_key} each)",
                     p.queue)


# What a suspended job waits for (`Job.suspended_on`), in words, in the order details list them.
SUSPENDED_WORDS = (("sleep", "sleeping"), ("signal", "waiting for a signal"),
                   ("children", "waiting for their children"))


def suspended_detail(counts: Mapping[str, int]) -> str:
    """"12 suspended: 10 sleeping, 2 waiting for a signal": a queue's suspended jobs by what
    they wait for (`QueueHealth.suspended`'s counts; a reason without words is named as is).

    >>> suspended_detail({"sleep": 10, "signal": 2, "children": 0})
    '12 suspended: 10 sleeping, 2 waiting for a signal'
    """
    words = dict(SUSPENDED_WORDS)
    order = [key for key, _ in SUSPENDED_WORDS] + sorted(set(counts) - set(words))
    parts = [f"{counts[key]} {words.get(key, f'waiting on {key}')}" for key in order
             if counts.get(key)]
    return f"{sum(counts.values())} suspended: {', '.join(parts)}"


def budget_reasons(budget: BudgetHealth, now: datetime) -> list[Reason]:
    """`BudgetHealth.reasons`: `backed_off` while its backoff is in force and it has ready
    work (then only that: nothing of it starts before the backoff ends, whatever its limits),
    else `budget_full` while its units are all in use and it holds ready work back, else
    `rate_limited` while it is out of starts; the count is its ready jobs held back (across its
    queues)."""
    if not budget.blocked_ready:
        return []
    if budget.backed_off_until is not None and budget.backed_off_until > now:
        return [Reason("backed_off", budget.blocked_ready, _backoff_detail(
            budget.backed_off_until, budget.backed_off_by, f"scope budget {budget.name}", now))]
    limit = (budget.effective_max_active if budget.effective_max_active is not None
             else budget.max_active)
    if limit is not None and budget.active_units >= limit:
        held = f" ({budget.held_units} held outside tasks)" if budget.held_units else ""
        halved = (f", halved from {budget.max_active} by back-pressure"
                  if limit != budget.max_active else "")
        return [Reason("budget_full", budget.blocked_ready,
                       f"budget {budget.name}: {budget.active_units} of "
                       f"max_active={limit}{halved} units in use{held}")]
    if budget.next_start_at is not None and budget.next_start_at > now:
        wait = (budget.next_start_at - now).total_seconds()
        return [Reason("rate_limited", budget.blocked_ready,
                       f"budget {budget.name} is out of starts ({budget.rate_limit}): "
                       f"the next in {wait:.1f} s")]
    return []


def queue_reasons(
    *,
    policies: Sequence[PolicyHealth] = (),
    backlog: Sequence[Backlog] = (),
    workers: Sequence[WorkerInfo] = (),
    unknown: Mapping[str, tuple[int, list[str]]] | None = None,
    budgets: Sequence[BudgetHealth] = (),
    expired: Mapping[str, int] | None = None,
    past_deadline: Mapping[str, int] | None = None,
    suspended: Mapping[str, Mapping[str, int]] | None = None,
    now: datetime,
    level: int = 2,
) -> list[Reason]:
    """`QueueHealth.reasons`: each queue's codes, by queue and then in `REASON_CODES`' order, a
    code at most once per queue (the first cause found: a limit of 0 before a full queue).
    `backlog` and `workers` as `_incident.backlog` reads them, `unknown` as
    `_incident.unknown_task_ready`, `expired`: queue -> its active jobs with an expired lease,
    `past_deadline`: queue -> its jobs that ended `expired` (not started by their expiry or
    deadline) in the last hour, `suspended`: queue -> its suspended jobs by what they wait for
    (`QueueHealth.suspended`; the code `suspended` while a queue has any: informational, the
    jobs wait as their handler asked), `level` the feature level of this release's claim."""
    found: dict[tuple[str, str], Reason] = {}

    def add(reasons: Iterable[Reason]) -> None:
        for reason in reasons:
            assert reason.queue is not None
            found.setdefault((reason.queue, reason.code), reason)

    for b in backlog:
        add(_from_backlog(b, workers, unknown or {}, level))
    for p in policies:
        add(_from_policy(p, now))
    for budget in budgets:
        for reason in budget_reasons(budget, now):
            for queue in budget.queues:
                add([Reason(reason.code, reason.count, reason.detail, queue)])
    for queue, count in (past_deadline or {}).items():
        if count:
            add([Reason("expired", count,
                        f"{count} jobs ended expired in the last hour: not started by their "
                        "expiry or deadline (docs/design.md \"Deadlines\")", queue)])
    for queue, counts in (suspended or {}).items():
        if sum(counts.values()):
            add([Reason("suspended", sum(counts.values()), suspended_detail(counts), queue)])
    for queue, count in (expired or {}).items():
        if count:
            add([Reason("stalled", count,
                        f"{count} active jobs' leases expired (their worker stopped renewing "
                        "them); the next claim takes them again", queue)])
    return sorted(found.values(), key=lambda r: (r.queue or "", _ORDER[r.code]))
