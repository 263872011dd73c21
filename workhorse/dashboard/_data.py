"""What each page shows, read through the bounded operations of `_ops.py` (no SQL here)."""

from __future__ import annotations

import dataclasses
import difflib
import heapq
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import psycopg

from .. import _incident, _ops
from .._occurrences import MISSED_AFTER
from .._ops import dashboard as _ops_dashboard
from ..errors import InvalidPolicyError
from ..types import (
    Attempt,
    BackoffState,
    BudgetHealth,
    ConcurrencyPolicy,
    Job,
    JobStatus,
    KeyLimitSet,
    KeyPressure,
    KeyShare,
    PolicyHealth,
    QueueHealth,
    QueueSummary,
    RateLimit,
    Reason,
    ThroughputMinute,
    WorkerInfo,
)
from . import _queries

CHART_MINUTES = 60
# The chart's window starts at its first minute with data, and spans at least this many.
CHART_MIN_SPAN = 5
CHART_WIDTH = 600
CHART_HEIGHT = 140
JOBS_PAGE = 100
RUNNING_SHOWN = 20
# A queue page lists at most this many of its keys' backoffs (and says how many there are).
KEY_BACKOFFS_SHOWN = 50
# ... and at most this many of its keys' own limits (docs/design.md "Per-key limits"), in key
# order, with how many more there are.
KEY_LIMITS_SHOWN = 50
# The three throughput series the chart draws, with the counter each one reads.
SERIES = (("claims", "claimed"), ("completions", "succeeded"), ("failures", "failed"))


@dataclass(frozen=True)
class Series:
    name: str
    points: str          # SVG polyline points
    latest: float        # per second, in the latest minute (zero when nothing was counted)


@dataclass(frozen=True)
class Chart:
    series: list[Series]
    peak: float          # per second, the highest value drawn
    top: float = 1.0     # per second, the top of the y axis (a round number >= peak)
    span: int = CHART_MINUTES   # minutes on the x axis, ending now
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    empty: bool = True
    scope: str = "fleet-wide"

    @property
    def y_ticks(self) -> list[str]:
        """The y axis' labels, top first."""
        return [_rate(self.top), _rate(self.top / 2), "0"]

    @property
    def x_ticks(self) -> list[str]:
        """The x axis' labels, oldest first."""
        return [f"{self.span} min ago", f"{self.span // 2} min ago", "now"]


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2g}"


def _round_up(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is >= value (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power


@dataclass(frozen=True)
class BudgetRow:
    """One budget on the budgets page: its `BudgetHealth`, its rate windows now (None without a
    rate in force), and what follows from them: `full` (its active units reach its max_active),
    `out_of_rate` (its rate or its burst window allows no start now; `next_start` the seconds
    until one is allowed, 0 when one is, None without a rate; `next_start_at` that moment while
    it is out of rate), its ready jobs held back (`blocked_ready`, within the health
    sample), and its ready jobs per queue (from budget_queues). `queues` are every queue whose
    jobs name it, live or not."""

    health: BudgetHealth
    window: _queries.BudgetWindow | None = None
    full: bool = False
    out_of_rate: bool = False
    next_start: float | None = None
    next_start_at: datetime | None = None
    blocked_ready: int = 0
    ready_by_queue: dict[str, int] = field(default_factory=dict)
    rate_n: int | None = None   # the N of the rate in force

    @property
    def name(self) -> str:
        return self.health.name

    @property
    def queues(self) -> list[str]:
        """Every queue whose jobs have named the budget: those with ready or active jobs of it,
        those its enqueues recorded (scheduled, waiting or finished jobs), and those with ready
        jobs of it in budget_queues, sorted."""
        return sorted({*self.health.queues, *self.health.used_by, *self.ready_by_queue})

    @property
    def limited(self) -> bool:
        """Whether any limit is in force (a name nobody declared or overrode limits nothing)."""
        return self.health.max_active is not None or self.health.rate_limit is not None

    @property
    def hold(self) -> str | None:
        """Why the budget holds its ready work back now, in words (None: it does not)."""
        h = self.health
        parts = []
        if self.full:
            parts.append(f"budget {h.name} full ({h.active_units} of {h.max_active} units)")
        if self.out_of_rate:
            parts.append(f"budget {h.name} out of rate (next start {_in(self.next_start)})")
        return "; ".join(parts) or None


@dataclass(frozen=True)
class Governance:
    """What the governed-queue views need beyond health(): health's policy rows plus one for
    each queue that only a budget governs, which limits hold each queue's ready work back, the
    budgets, and each queue's budgets (with their ready jobs in it)."""

    policies: list[PolicyHealth]
    holds: dict[str, list[str]]
    budgets: list[BudgetRow]
    uses: dict[str, list[_queries.BudgetUse]]
    rates: dict[str, _queries.RateWindow]


@dataclass(frozen=True)
class QueueBackoffs:
    """The backoffs in force on one queue (docs/design.md "Back-pressure"): its own, and its
    keys' (soonest end first)."""

    queue: str
    own: BackoffState | None = None
    keys: list[BackoffState] = field(default_factory=list)

    @property
    def keys_until(self) -> datetime | None:
        """When the last of its keys' backoffs ends (None: no key is backed off)."""
        return max((b.until for b in self.keys), default=None)


@dataclass(frozen=True)
class Backoffs:
    """The backoffs in force, read once per page (`Queue.backoffs()`): each budget's by name,
    and each queue's (its own and its keys') by queue."""

    budgets: dict[str, BackoffState] = field(default_factory=dict)
    queues: dict[str, QueueBackoffs] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.budgets or self.queues)

    def holding(self, queue: str, budgets: list[str]) -> bool:
        """Whether any of these holds `queue` back: its own, a key's, or a budget's of
        `budgets` (those its jobs name)."""
        return queue in self.queues or any(name in self.budgets for name in budgets)


def backoffs(conn: psycopg.Connection[Any]) -> Backoffs:
    """The backoffs in force (one statement), grouped for the pages."""
    found = Backoffs()
    own: dict[str, BackoffState] = {}
    keys: dict[str, list[BackoffState]] = {}
    for b in _ops.execute(conn, _ops.list_backoffs()):
        if b.scope == "budget":
            found.budgets[b.name] = b
        elif b.scope == "queue":
            own[b.name] = b
        else:
            keys.setdefault(b.name, []).append(b)
    for queue in sorted({*own, *keys}):
        found.queues[queue] = QueueBackoffs(queue, own.get(queue), keys.get(queue, []))
    return found


@dataclass(frozen=True)
class BudgetsPage:
    budgets: list[BudgetRow]
    sample: int = _ops.HEALTH_SAMPLE
    pair_sample: int = _queries.PAIR_SAMPLE   # a queue's ready jobs of a budget: "100+"
    backoffs: Backoffs = field(default_factory=Backoffs)


@dataclass(frozen=True)
class Overview:
    policies: list[PolicyHealth]
    queues: list[QueueSummary]
    depth: dict[str, int]
    chart: Chart
    workers_alive: int
    stalled: dict[str, str] = field(default_factory=dict)
    holds: dict[str, list[str]] = field(default_factory=dict)
    unknown_task_ready: dict[str, int] = field(default_factory=dict)
    # queue -> its reason codes (docs/design.md "Reason codes"), as health() has them.
    reasons: dict[str, list[Reason]] = field(default_factory=dict)
    # name -> BudgetRow: the budgets the governed queues' jobs name (PolicyHealth.budgets), for
    # their units against their limits on each queue's row.
    budgets: dict[str, BudgetRow] = field(default_factory=dict)
    backoffs: Backoffs = field(default_factory=Backoffs)
    # The throughput minutes the chart was drawn from (a chart of several databases adds them).
    minutes: list[ThroughputMinute] = field(default_factory=list)


@dataclass(frozen=True)
class QueuePage:
    queue: str
    health: PolicyHealth | None
    summary: QueueSummary | None
    policy: ConcurrencyPolicy | None
    saturated: list[KeyPressure]
    rate_limited: list[KeyPressure]
    running: list[Job]
    stalled: str | None = None
    holds: list[str] = field(default_factory=list)
    rate: _queries.RateWindow | None = None
    chart: Chart | None = None
    shares: list[KeyShare] = field(default_factory=list)  # a fair queue's keys by units
    # The budgets the queue's jobs have named, with the queue's ready jobs of each.
    budgets: list[tuple[BudgetRow, _queries.BudgetUse]] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)  # docs/design.md "Reason codes"
    # Back-pressure in force on it: its own backoff and its keys' (the first
    # KEY_BACKOFFS_SHOWN of them), and the backoffs of the budgets its jobs name.
    backoffs: QueueBackoffs | None = None
    budget_backoffs: dict[str, BackoffState] = field(default_factory=dict)
    key_backoffs_shown: int = KEY_BACKOFFS_SHOWN
    # Its per-key limits (None: it has none): the default and its first KEY_LIMITS_SHOWN keys
    # by key; `key_limit_count` is health()'s count of its keys' rows (bounded by the sample).
    key_limits: KeyLimitSet | None = None
    key_limit_count: int = 0
    # Its suspended jobs by what they wait for (QueueHealth.suspended; None: it has none), and
    # the soonest timer among them (docs/design.md "Durable execution").
    suspended: dict[str, int] | None = None
    next_wake_at: datetime | None = None

    @property
    def key_limit_default(self) -> str | None:
        """The key limits' default in words ("max active 1, rate 10/m"; None: it has none)."""
        found = self.key_limits.default if self.key_limits is not None else None
        if found is None:
            return None
        return ", ".join(f"{name} {value}" for name, value in (
            ("max active", found.max_active), ("weight", found.weight),
            ("rate", found.rate_limit)) if value is not None)

    @property
    def key_limits_more(self) -> str | None:
        """How many keys' limits are not listed ("12", or "950+" past the health sample's
        count; None: none is left out)."""
        if self.key_limits is None:
            return None
        shown = len(self.key_limits.limits)
        if self.key_limit_count > _ops.HEALTH_SAMPLE:
            return f"{_ops.HEALTH_SAMPLE - shown}+"
        more = self.key_limit_count - shown
        return str(more) if more > 0 else None


@dataclass(frozen=True)
class JobFilter:
    queue: str | None = None
    status: str | None = None
    task: str | None = None
    key: str | None = None
    tag: str | None = None       # exact; its newest page only (_queries.find_tagged)
    id: int | None = None
    before: int | None = None    # ids below this one: the page after a full one
    # Several databases (docs/design.md "Several databases"): the one whose jobs are listed
    # (None: every one); never reaches SQL, it chooses the pool.
    database: str | None = None

    def query(self, **changes: Any) -> dict[str, Any]:
        """The filter as URL parameters, with `changes` applied (None removes one)."""
        chosen = {**self.__dict__, **changes}
        return {k: v for k, v in chosen.items() if v is not None}

    def search(self) -> _queries.Search:
        return _queries.Search(queue=self.queue, status=self.status, task=self.task,
                               key=self.key, tag=self.tag)

    @property
    def described(self) -> str:
        """The filter in words, for a confirm ("queue ~ mail, status failed")."""
        parts = [f"queue ~ {self.queue!r}" if self.queue else "",
                 f"status {self.status}" if self.status else "",
                 f"task ~ {self.task!r}" if self.task else "",
                 f"key {self.key!r}" if self.key else "",
                 f"tag {self.tag!r}" if self.tag else "",
                 f"database {self.database}" if self.database else ""]
        return ", ".join(p for p in parts if p) or "no filter"


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


def chart(minutes: list[ThroughputMinute], now: datetime, scope: str = "fleet-wide") -> Chart:
    """Per-second rates for each minute from the first one with data (at most CHART_MINUTES,
    at least CHART_MIN_SPAN ago) to now's, 0 where nobody counted; `latest` is now's minute's."""
    current = now.replace(second=0, microsecond=0)
    first = min((m.minute for m in minutes), default=current)
    span = int((current - first).total_seconds() // 60) + 1
    span = min(max(span, CHART_MIN_SPAN), CHART_MINUTES)
    start = current - timedelta(minutes=span - 1)
    by_minute = {m.minute: m for m in minutes}
    rates: dict[str, list[float]] = {name: [] for name, _ in SERIES}
    for i in range(span):
        found = by_minute.get(start + timedelta(minutes=i))
        for name, counter in SERIES:
            rates[name].append(getattr(found, counter) / found.seconds if found else 0.0)
    peak = max((max(values) for values in rates.values()), default=0.0)
    top = _round_up(peak)
    step = CHART_WIDTH / (span - 1)
    series = []
    for name, _ in SERIES:
        values = rates[name]
        points = " ".join(
            f"{i * step:.1f},{CHART_HEIGHT - value / top * CHART_HEIGHT:.1f}"
            for i, value in enumerate(values)
        )
        series.append(Series(name, points, values[-1]))
    return Chart(series=series, peak=peak, top=top, span=span, empty=not minutes, scope=scope)


def holds(p: PolicyHealth, rate: _queries.RateWindow | None) -> list[str]:
    """Which limits hold a governed queue's ready work back now, each in words with when the
    next start is allowed where a rate says so (empty: none does)."""
    found = []
    if p.max_active is not None and p.active >= p.max_active:
        found.append(f"queue limit: {p.active} of {p.max_active} active; the next starts when "
                     "one ends")
    if rate is not None and rate.limit is not None and rate.used is not None and (
            rate.used >= rate.limit):
        found.append(f"queue rate: {rate.used} of {p.rate_limit} started in the window; the "
                     f"next start is allowed {_in(rate.next_start)}")
    if p.saturated_keys and (p.key_limits or p.key_limit_default is not None):
        # Each key at its own limit (docs/design.md "Per-key limits"), which may differ.
        found.append(f"key limit: {p.saturated_keys} key(s) at their own limit (a key's own, "
                     "else the key limits' default, else the policy's per-key limit); their "
                     "next starts when one of theirs ends")
    elif p.saturated_keys:
        found.append(f"key limit: {p.saturated_keys} key(s) at {p.max_active_per_key} active "
                     "each; their next starts when one of theirs ends")
    if p.rate_limited_keys:
        soonest = rate.key_next_start if rate is not None else None
        found.append(f"key rate: {p.rate_limited_keys} key(s) out of {p.rate_limit_per_key}; "
                     f"the soonest may start {_in(soonest)}")
    return found


def _in(seconds: float | None) -> str:
    if seconds is None:
        return "when the window moves on"
    if seconds <= 0:
        return "now"
    return f"in {seconds:.0f} s" if seconds < 120 else f"in {seconds / 60:.0f} min"


def budget_rows(conn: psycopg.Connection[Any], health: QueueHealth,
                uses: list[_queries.BudgetUse] | None = None) -> list[BudgetRow]:
    """health()'s budgets with their rate windows, whether each is full or out of rate now, and
    their ready jobs per queue."""
    if uses is None:
        uses = _ops.execute(conn, _queries.budget_uses(_queries.PAIR_SAMPLE))
    rates: dict[str, tuple[str, int, float, int | None]] = {}
    for b in health.budgets:
        if b.rate_limit is None:
            continue
        try:
            rate = RateLimit.parse(b.rate_limit)
        except InvalidPolicyError:  # health printed it from a stored pair: cannot happen
            continue
        rates[b.name] = (b.name, rate.n, rate.period, b.rate_burst)
    windows = _ops.execute(conn, _queries.budget_windows(list(rates.values())))
    by_budget: dict[str, dict[str, int]] = {}
    for use in uses:
        if use.ready:
            by_budget.setdefault(use.budget, {})[use.queue] = use.ready
    now = datetime.now(UTC)
    rows = []
    for b in health.budgets:
        window = windows.get(b.name)
        full = b.max_active is not None and b.active_units >= b.max_active
        next_start = None
        if window is not None:
            # The claim's own count (need 1 unit): a start is allowed once both windows say 0.
            next_start = max(window.next_start, window.burst_next_start or 0.0)
        elif b.next_start_at is not None:
            next_start = max((b.next_start_at - now).total_seconds(), 0.0)
        out_of_rate = next_start is not None and next_start > 0
        next_start_at = now + timedelta(seconds=next_start or 0.0) if out_of_rate else None
        blocked = max(b.blocked_ready, b.ready if full or out_of_rate else 0)
        rows.append(BudgetRow(
            health=b, window=window, full=full, out_of_rate=out_of_rate, next_start=next_start,
            next_start_at=next_start_at, blocked_ready=blocked,
            ready_by_queue=by_budget.get(b.name, {}),
            rate_n=rates[b.name][1] if b.name in rates else None))
    return rows


def budget_holds(budgets: dict[str, BudgetRow], uses: list[_queries.BudgetUse]) -> list[str]:
    """The budgets that hold this queue's ready work back: those its ready jobs name that are
    full or out of rate now, each in words ("budget openai full (3 of 3 units)"), or whose
    places go to another queue first (turns between queues, docs/design.md "Named budgets")."""
    found = []
    for use in uses:
        row = budgets.get(use.budget)
        if not use.ready or row is None:
            continue
        if row.hold is not None:
            found.append(row.hold)
        elif use.defers_to is not None and row.limited:
            found.append(f"budget {row.name} turns: its next places go to queue "
                         f"{use.defers_to} first (it has waited longer)")
    return found


def governance(conn: psycopg.Connection[Any], health: QueueHealth) -> Governance:
    """Every governed queue, with a queue that only a budget governs (it has used a budget and
    has no policy and no control; docs/design.md "Named budgets"), which health() lists with
    its `budgets` (and which is made a row here should health() not list it), and the limits
    that hold each one's ready work back: its policy's (holds) and its budgets'."""
    uses = _ops.execute(conn, _queries.budget_uses(_queries.PAIR_SAMPLE))
    budgets = budget_rows(conn, health, uses)
    by_name = {b.name: b for b in budgets}
    by_queue: dict[str, list[_queries.BudgetUse]] = {}
    for use in uses:
        by_queue.setdefault(use.queue, []).append(use)
    listed = {p.queue for p in health.policies}
    only_budget = sorted(q for q, found in by_queue.items()
                         if q not in listed and not any(u.listed for u in found))
    budget_lines = {q: lines for q, found in by_queue.items()
                    if (lines := budget_holds(by_name, found))}
    blocked = sorted(b.name for b in budgets if b.hold is not None)
    counted = _ops.execute(conn, _queries.budgeted_queues(
        sorted(set(only_budget) | (set(budget_lines) & listed)), blocked, _ops.HEALTH_SAMPLE))
    policies = []
    for p in health.policies:
        found = counted.get(p.queue)
        if found is not None and found.blocked > p.blocked_ready:
            # health() does not count what a budget holds back: at least these are blocked.
            p = dataclasses.replace(p, blocked_ready=found.blocked,
                                    capped=p.capped or found.sampled > _ops.HEALTH_SAMPLE)
        policies.append(p)
    for queue in only_budget:
        found = counted.get(queue)
        if found is None:
            continue
        policies.append(PolicyHealth(
            namespace=None, queue=queue, max_active=None, max_active_per_key=None,
            active=found.units, available=None, blocked_ready=found.blocked, saturated_keys=0,
            capped=found.sampled > _ops.HEALTH_SAMPLE, active_units=found.units,
            active_jobs=found.jobs, budgets=sorted({u.budget for u in by_queue[queue]})))
    policies.sort(key=lambda p: (p.namespace is None, p.namespace or "", p.queue))
    held = [p.queue for p in policies if p.blocked_ready]
    rates = _ops.execute(conn, _queries.rate_windows(held))
    holds_by_queue = {}
    for p in policies:
        if p.blocked_ready or p.queue in budget_lines:
            lines = holds(p, rates.get(p.queue)) + budget_lines.get(p.queue, [])
            if lines:
                holds_by_queue[p.queue] = lines
    return Governance(policies=policies, holds=holds_by_queue, budgets=budgets, uses=by_queue,
                      rates=rates)


def _by_queue(reasons: list[Reason]) -> dict[str, list[Reason]]:
    found: dict[str, list[Reason]] = {}
    for reason in reasons:
        found.setdefault(reason.queue or "", []).append(reason)
    return found


def overview(conn: psycopg.Connection[Any]) -> Overview:
    health = _ops.execute(conn, _ops.health())
    queues = _ops.execute(conn, _ops.list_queues())
    minutes = _ops.execute(conn, _ops.throughput(CHART_MINUTES))
    workers = _ops.execute(conn, _ops.list_workers())
    governed = governance(conn, health)
    now = datetime.now(UTC)
    return Overview(
        policies=governed.policies, queues=queues, depth=health.depth,
        chart=chart(minutes, now), workers_alive=sum(1 for w in workers if w.alive),
        stalled=health.stalled, holds=governed.holds,
        unknown_task_ready=health.unknown_task_ready, reasons=_by_queue(health.reasons),
        budgets={b.name: b for b in governed.budgets}, backoffs=backoffs(conn),
        minutes=minutes,
    )


def budgets(conn: psycopg.Connection[Any]) -> BudgetsPage:
    """The budgets page: every declared, overridden or named budget, as health() has it, with
    its rate windows and what it holds back."""
    health = _ops.execute(conn, _ops.health())
    return BudgetsPage(budgets=budget_rows(conn, health), backoffs=backoffs(conn))


def queue_known(conn: psycopg.Connection[Any], queue: str) -> bool:
    return _ops.execute(conn, _incident.queue_known(queue))


def close_names(conn: psycopg.Connection[Any], queue: str) -> list[str]:
    """Known queue names like `queue` (containing it, or close to it), for a 404's "did you
    mean"."""
    known, matching = _ops.execute(conn, _queries.known_queues(queue.strip() or queue))
    near = difflib.get_close_matches(queue, known, n=5, cutoff=0.6)
    return list(dict.fromkeys([*near, *(matching or [])]))[:5]


def queue_page(conn: psycopg.Connection[Any], queue: str) -> QueuePage:
    health = _ops.execute(conn, _ops.health())
    summaries = _ops.execute(conn, _ops.list_queues())
    policies = _ops.execute(conn, _ops.list_policies(None))
    governed = governance(conn, health)
    row = next((p for p in governed.policies if p.queue == queue), None)
    rate = governed.rates.get(queue)
    if row is not None and rate is None:
        rate = _ops.execute(conn, _queries.rate_windows([queue])).get(queue)
    minutes, now = _ops.execute(conn, _queries.queue_minutes(queue, CHART_MINUTES))
    by_name = {b.name: b for b in governed.budgets}
    summary = next((s for s in summaries if s.queue == queue), None)
    named = {*(summary.budgets if summary else []), *(row.budgets if row else []),
             *(u.budget for u in governed.uses.get(queue, []))}
    held = backoffs(conn)
    return QueuePage(
        queue=queue,
        health=row,
        summary=summary,
        policy=next((p for p in policies if p.queue == queue), None),
        saturated=_ops.execute(conn, _ops.saturated_keys(queue)),
        rate_limited=_ops.execute(conn, _ops.rate_limited_keys(queue)),
        running=_ops.execute(conn, _ops.list_jobs(queue=queue, status="active",
                                                  limit=RUNNING_SHOWN)),
        stalled=health.stalled.get(queue),
        reasons=[r for r in health.reasons if r.queue == queue],
        holds=governed.holds.get(queue, []),
        rate=rate,
        chart=chart(minutes, now or datetime.now(UTC), scope=f"queue {queue}"),
        shares=(_ops.execute(conn, _ops.key_shares(queue, row.max_active))
                if row is not None and row.fairness == "key" else []),
        budgets=[(by_name[u.budget], u) for u in governed.uses.get(queue, [])
                 if u.budget in by_name],
        backoffs=held.queues.get(queue),
        budget_backoffs={name: b for name, b in sorted(held.budgets.items()) if name in named},
        key_limits=_ops.execute(conn, _ops.key_limits(queue, limit=KEY_LIMITS_SHOWN)),
        key_limit_count=row.key_limits if row is not None else 0,
        suspended=health.suspended.get(queue),
        next_wake_at=health.suspended_next_wake_at.get(queue),
    )


def jobs(conn: psycopg.Connection[Any], chosen: JobFilter, *, count: bool = True
         ) -> _queries.Found:
    if chosen.id is not None:
        job = _ops.execute(conn, _ops.get_job(chosen.id))
        found = [job] if job is not None else []
        return _queries.Found(found, counts={j.status.value: 1 for j in found})
    found_jobs = _ops.execute(conn, _queries.find_jobs(chosen.search(), before=chosen.before,
                                                       limit=JOBS_PAGE, count=count))
    if chosen.tag is not None:  # read by list_jobs: their tags are filled in
        return found_jobs
    # The page's tags (and progress), in one more statement over its ids.
    return dataclasses.replace(found_jobs, jobs=_ops.execute(
        conn, _ops.with_progress(found_jobs.jobs)))


def names(conn: psycopg.Connection[Any], chosen: JobFilter) -> _queries.Names:
    return _ops.execute(conn, _queries.names(chosen.search()))


def job(conn: psycopg.Connection[Any], job_id: int) -> Job | None:
    return _ops.execute(conn, _ops.get_job(job_id))


@dataclass(frozen=True)
class Durable:
    """A job's durable side on its page (docs/design.md "Durable execution"): its first steps
    (results cut short), whether there are more, what it waits for while suspended, and its
    first children (id, step, task, status), whether there are more."""

    steps: list[_ops_dashboard.StepRow] = field(default_factory=list)
    more_steps: bool = False
    waiting: str | None = None
    children: list[tuple[int, str | None, str, JobStatus]] = field(default_factory=list)
    more_children: bool = False
    steps_shown: int = _ops_dashboard.STEPS_SHOWN
    children_shown: int = _ops_dashboard.CHILDREN_SHOWN


def waiting_text(job: Job, steps: list[_ops_dashboard.StepRow]) -> str | None:
    """What a suspended job waits for, in words ("sleeping at step 'cool-off' until
    2026-12-04 23:55:36 UTC"); None when it is not suspended."""
    if job.status != JobStatus.SUSPENDED:
        return None
    pending = [s for s in steps if s.pending]
    step = pending[-1] if pending else None
    at = f" at step {step.name!r}" if step is not None else ""
    until = _stamp_text(job.wake_at)
    if job.suspended_on == "sleep":
        return f"sleeping{at} until {until}"
    if job.suspended_on == "signal":
        signal = f" {step.signal!r}" if step is not None and step.signal else ""
        timeout = f" (times out {until})" if job.wake_at is not None else " (no timeout)"
        return f"waiting for signal{signal}{at}{timeout}"
    if job.suspended_on == "children":
        return f"waiting for its children{at}"
    return f"suspended on {job.suspended_on}{at}"


def _stamp_text(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def durable(conn: psycopg.Connection[Any], job: Job) -> Durable:
    """The job's steps and children, bounded (two index reads)."""
    steps = _ops.execute(conn, _ops_dashboard.job_step_rows(
        job.id, _ops_dashboard.STEPS_SHOWN + 1))
    children = _ops.execute(conn, _ops_dashboard.job_children_page(
        job.id, _ops_dashboard.CHILDREN_SHOWN + 1))
    shown = steps[:_ops_dashboard.STEPS_SHOWN]
    return Durable(steps=shown, more_steps=len(steps) > len(shown),
                   waiting=waiting_text(job, steps),
                   children=children[:_ops_dashboard.CHILDREN_SHOWN],
                   more_children=len(children) > _ops_dashboard.CHILDREN_SHOWN)


def attempts(conn: psycopg.Connection[Any], job_id: int) -> list[Attempt]:
    """The job's attempts, oldest first (JobHandle.attempts)."""
    return _ops.execute(conn, _ops.job_attempts(job_id)) or []


def workflow(conn: psycopg.Connection[Any], workflow_id: int) -> list[Job]:
    """A workflow's members in insertion order (empty: no such workflow)."""
    return _ops.execute(conn, _ops.workflow_jobs(workflow_id))


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


# ---- several databases (docs/design.md "Several databases") ------------------------------------

T = TypeVar("T")


@dataclass(frozen=True)
class Part(Generic[T]):
    """One database's part of a page: its name (None with one database: no column and no
    parameter), what was read there, or why it could not be read (`down`: it cannot be
    reached)."""

    database: str | None
    value: T | None = None
    down: str | None = None


@dataclass(frozen=True)
class Fleet:
    """The overview's cards and chart over the databases it shows: depths and live workers
    summed, and one chart of their counters added minute by minute."""

    depth: dict[str, int]
    workers_alive: int
    chart: Chart


def add_minutes(lists: list[list[ThroughputMinute]]) -> list[ThroughputMinute]:
    """Several databases' minutes as one fleet's: each minute's counters added."""
    by_minute: dict[datetime, ThroughputMinute] = {}
    for minutes in lists:
        for m in minutes:
            was = by_minute.get(m.minute)
            by_minute[m.minute] = m if was is None else ThroughputMinute(
                m.minute, was.claimed + m.claimed, was.succeeded + m.succeeded,
                was.failed + m.failed, was.retried + m.retried, was.held + m.held,
                was.canceled + m.canceled, seconds=max(was.seconds, m.seconds))
    return [by_minute[minute] for minute in sorted(by_minute)]


def fleet(parts: list[Part[Overview]], scope: str = "fleet-wide") -> Fleet:
    """The cards and chart of the overview: one database's own, else their sum."""
    views = [p.value for p in parts if p.value is not None]
    if len(parts) == 1 and len(views) == 1:
        view = views[0]
        return Fleet(depth=view.depth, workers_alive=view.workers_alive, chart=view.chart)
    depth: dict[str, int] = {}
    for view in views:
        for status, n in view.depth.items():
            depth[status] = depth.get(status, 0) + n
    return Fleet(depth=depth, workers_alive=sum(v.workers_alive for v in views),
                 chart=chart(add_minutes([v.minutes for v in views]), datetime.now(UTC),
                             scope=scope))


@dataclass(frozen=True)
class JobRows:
    """The Jobs page over the databases it lists: the shown jobs with their database (several
    databases' pages merged newest first, cut to one page), the counts by status summed, where
    each database's older page starts (`older`: its before=), each database's unsearched
    succeeded history (`unsearched`), and the filter's suggestions from them all."""

    found: _queries.Found
    rows: list[tuple[str | None, Job]]
    older: list[tuple[str, int]] = field(default_factory=list)
    unsearched: list[tuple[str, int]] = field(default_factory=list)
    names: _queries.Names | None = None
    totals: list[tuple[str, int, bool]] = field(default_factory=list)  # (database, n, capped)


def merge_jobs(parts: list[Part[tuple[_queries.Found, _queries.Names | None]]],
               limit: int = JOBS_PAGE) -> JobRows:
    """The pages of several databases as one (each database's order kept; merged by enqueue
    time, newest first; at most `limit`)."""
    read = [(p.database or "", p.value) for p in parts if p.value is not None]
    merged = list(heapq.merge(
        *[[(db, job) for job in found.jobs] for db, (found, _) in read],
        key=lambda row: (-row[1].enqueued_at.timestamp(), -row[1].id)))
    rows: list[tuple[str | None, Job]] = list(merged[:limit])
    counts: dict[str, int] = {}
    for _, (found, _) in read:
        for status, n in found.counts.items():
            counts[status] = counts.get(status, 0) + n
    older = []
    unsearched = []
    for db, (found, _) in read:
        shown = [job.id for name, job in rows if name == db]
        cut = len(shown) < len(found.jobs)
        if found.jobs and (cut or len(found.jobs) >= limit):
            older.append((db, min(shown) if shown else found.jobs[0].id + 1))
        if found.unsearched_below:
            unsearched.append((db, found.unsearched_below))
    suggestions = [names for _, (_, names) in read if names is not None]
    names = None
    if suggestions:
        matching = [n.matching for n in suggestions if n.matching is not None]
        names = _queries.Names(
            queues=sorted(set().union(*(n.queues for n in suggestions)))[:_queries.SUGGESTIONS],
            matching=sorted(set().union(*matching)) if matching else None,
            tasks=sorted(set().union(*(n.tasks for n in suggestions)))[:_queries.SUGGESTIONS])
    queues = [found.queues for _, (found, _) in read if found.queues is not None]
    total = _queries.Found(
        [job for _, job in rows], counts=counts,
        queues=sorted(set().union(*queues)) if queues else None,
        capped=any(found.capped for _, (found, _) in read))
    return JobRows(found=total, rows=rows, older=older, unsearched=unsearched, names=names,
                   totals=[(db, found.total, found.capped) for db, (found, _) in read])
