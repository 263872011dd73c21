"""What `Queue.health()` reports: per queue (PolicyHealth), per named budget
(BudgetHealth), and both with the depth by status (QueueHealth)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .options import KeyLimit
from .records import BudgetOverride, PolicyOverride

# docs/design.md "Reason codes": the stable set, in the order health lists them.
REASON_CODES = (
    "no_worker", "unknown_task", "feature_level", "paused", "at_limit", "key_saturated",
    "rate_limited", "budget_full", "backed_off", "suspended", "expired", "stalled",
)


@dataclass(frozen=True, slots=True)
class Reason:
    """Why some of a queue's (or a budget's) work is not moving now: a code of the stable set
    (`REASON_CODES`), the number behind it (jobs held back, or keys for `key_saturated` and a
    per-key `rate_limited`; docs/design.md "Reason codes" says which), a sentence for people,
    and the queue it is about (None on a `BudgetHealth`'s own reasons).

    >>> [(r.queue, r.code, r.count) for r in q.health().reasons]  # doctest: +SKIP
    [('mail', 'at_limit', 120)]
    """

    code: str
    count: int
    detail: str
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class BackoffState:
    """A backoff in force (docs/design.md "Back-pressure"): no claim starts a job of its scope
    before `until`. `scope` is "budget" (`name` the budget), "queue" or "key" (`name` the
    queue, `key` the key); `by_job` the job whose handler raised it (None when unknown).

    >>> [(b.scope, b.name, b.by_job) for b in q.backoffs()]  # doctest: +SKIP
    [('budget', 'openai', 4812)]
    """

    scope: str
    name: str
    key: str | None
    until: datetime
    by_job: int | None


@dataclass(frozen=True, slots=True)
class BudgetHealth:
    """One budget in `QueueHealth.budgets`: declared (`namespace` set), overridden, or only named by
    ready or active jobs (`namespace` None and no limits: it limits nothing). The limits are those
    in force (a live override's fields over the declared ones); `active_units` is the cost of its
    unexpired active jobs and the units of its unexpired holds; `queues` the queues with ready or
    active jobs naming it; `ready` its ready jobs, counted up to the health sample (`capped`
    beyond); `blocked_ready` those the budget holds back now (all of its ready jobs while it is full
    or out of starts, else 0); `next_start_at`, for a budget with a rate, when its rate (and burst)
    lets the next unit start (now, or later while it is out of starts; None without a rate);
    `used_by` every queue whose jobs have named it, live or not (the queues its enqueues recorded,
    with `queues`): the queues it governs, also while none of their jobs is ready or active.
    `backed_off_until` and `backed_off_by`: its backoff in force (docs/design.md "Back-pressure"),
    when it ends and the job that raised it (None when none is in force); while it lasts,
    `blocked_ready` is all of its ready jobs.

    >>> [(b.name, b.active_units, b.queues) for b in q.health().budgets]  # doctest: +SKIP
    [('openai', 12, ['embeddings', 'summaries'])]
    >>> [(b.name, b.queues, b.used_by) for b in q.health().budgets]  # doctest: +SKIP
    [('openai', [], ['embeddings', 'summaries'])]
    >>> [(b.name, b.backed_off_by) for b in q.health().budgets if b.backed_off_by]  # doctest: +SKIP
    [('openai', 4812)]
    """

    name: str
    namespace: str | None
    max_active: int | None
    rate_limit: str | None
    rate_burst: int | None
    override: BudgetOverride | None
    active_units: int
    blocked_ready: int
    queues: list[str]
    next_start_at: datetime | None = None
    ready: int = 0
    capped: bool = False
    # docs/design.md "Reason codes": `budget_full`, `rate_limited` while it holds work back.
    reasons: list[Reason] = field(default_factory=list)
    # Every queue whose jobs have named it (at most the health sample), sorted.
    used_by: list[str] = field(default_factory=list)
    # docs/design.md "Back-pressure": its backoff in force (None: none), and the job that raised it.
    backed_off_until: datetime | None = None
    backed_off_by: int | None = None
    # docs/design.md "Holds": the units of its unexpired holds (counted in `active_units` too).
    held_units: int = 0
    # The max_active the claim admits within now: an adaptive budget's, halved by its last
    # backoff and growing back (docs/design.md "Back-pressure"); else `max_active`.
    effective_max_active: int | None = None


@dataclass(frozen=True, slots=True)
class PolicyHealth:
    """One governed, paused or overridden queue: the limits in force (an override's where it
    has one), what is active, and what the limits hold back. `namespace` is None for a queue
    that no policy governs: only an operator control, or only the named budgets its jobs have
    named (`budgets`; each one's limits and units are its `BudgetHealth`). `blocked_ready`
    counts what the queue's own limits, controls and backoffs hold back; a budget's reasons say
    what it holds back.

    Back-pressure (docs/design.md "Back-pressure"): `backed_off_until` and `backed_off_by` are
    the queue's own backoff in force (its end and the job that raised it; None when none is),
    `backed_off_keys` its keys' backoffs in force (`BackoffState`s, soonest end first, at most
    the health sample), and `backed_off_ready` the ready jobs (within the sample) those hold
    back, which `blocked_ready` counts too.

    >>> [(p.queue, p.active, p.available) for p in q.health().policies]  # doctest: +SKIP
    [('mail', 3, 17)]
    >>> [(p.queue, p.backed_off_by) for p in q.health().policies  # doctest: +SKIP
    ...  if p.backed_off_by]
    [('partner-api', 4812)]
    >>> [(k.key, k.by_job) for k in q.health().policies[0].backed_off_keys]  # doctest: +SKIP
    [('acme', 4813)]
    """

    namespace: str | None
    queue: str
    max_active: int | None
    max_active_per_key: int | None
    active: int
    available: int | None
    blocked_ready: int
    saturated_keys: int
    capped: bool
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    rate_limited_keys: int = 0
    paused: bool = False
    override: PolicyOverride | None = None
    # docs/design.md "Fair share and job cost": the policy's fairness, and the sum of the active
    # jobs' cost (`active` and `available` count these units too).
    fairness: str = "fifo"
    active_units: int = 0
    # docs/design.md "Job keys": what an enqueue does when its job's key is full.
    on_key_full: str = "queue"
    # docs/design.md "rate bursts": the bursts in force (an override's where it sets them).
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None
    # The number of active jobs (beside `active_units`, their cost): they differ where costs
    # differ from 1, and `workhorse top` then shows units.
    active_jobs: int = 0
    # docs/design.md "rate bursts": when the queue's rate and burst let its next start happen (now,
    # or later while it is out of starts; None without a rate), and the soonest next start
    # among its keys out of starts (None when none is).
    next_start_at: datetime | None = None
    next_key_start_at: datetime | None = None
    # docs/design.md "Named budgets": the budgets its jobs have named, sorted (a queue with none
    # of its own limits and a budget is governed by the budget).
    budgets: list[str] = field(default_factory=list)
    # docs/design.md "Back-pressure": the queue's own backoff in force (None: none) and the job
    # that raised it; its keys' backoffs in force; the ready jobs these hold back.
    backed_off_until: datetime | None = None
    backed_off_by: int | None = None
    backed_off_keys: list[BackoffState] = field(default_factory=list)
    backed_off_ready: int = 0
    # docs/design.md "Per-key limits": the keys with limits of their own (key_limits rows),
    # counted up to the health sample and one more (1,001 means more than 1,000), and the
    # set's default for the other keys (None: none, the policy's per-key limits apply). A key
    # is saturated when its active units reach its own max_active, else the default's, else
    # max_active_per_key.
    key_limits: int = 0
    key_limit_default: KeyLimit | None = None


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """What `Queue.health()` reports: one `PolicyHealth` per governed (by a policy or by a
    named budget its jobs name), paused or overridden queue, the number of jobs by status,
    `stalled`: queue -> why its ready or due work cannot move (no live supervisor serves it or
    declares its task, paused, a limit of 0; docs/design.md "The dashboard in an incident"),
    `unknown_task_ready`: queue -> ready jobs whose task no live supervisor serving the queue
    declares (within the bounded sample), `reasons`: every queue's reason codes, for
    alerting rules (docs/design.md "Reason codes"), and `suspended`: queue -> its suspended
    jobs by what they wait for (docs/design.md "Durable execution"), with
    `suspended_next_wake_at` the soonest timer among them.

    >>> health = q.health()  # doctest: +SKIP
    >>> health.depth["ready"], [p.queue for p in health.policies]  # doctest: +SKIP
    (3, ['mail'])
    >>> health.stalled  # doctest: +SKIP
    {'mail': 'no live supervisor: none is registered'}
    >>> health.suspended  # doctest: +SKIP
    {'orders': {'sleep': 10, 'signal': 2, 'children': 0}}
    """
    policies: list[PolicyHealth]
    depth: dict[str, int]
    stalled: dict[str, str] = field(default_factory=dict)
    # queue -> ready jobs (within the bounded sample) whose task no live supervisor serving
    # the queue declares; only queues some live supervisor serves, and only those with any.
    unknown_task_ready: dict[str, int] = field(default_factory=dict)
    # docs/design.md "Named budgets": one row per declared, overridden or named budget.
    budgets: list[BudgetHealth] = field(default_factory=list)
    # docs/design.md "Reason codes": per queue, by queue and then in REASON_CODES' order.
    reasons: list[Reason] = field(default_factory=list)
    # docs/design.md "Durable execution": queue -> its suspended jobs by what they wait for,
    # {"sleep": n, "signal": n, "children": n} (each key always there); only queues with any.
    suspended: dict[str, dict[str, int]] = field(default_factory=dict)
    # queue -> the soonest timer of its suspended jobs (a sleep's end or a wait's timeout);
    # only queues with a suspended job that has one.
    suspended_next_wake_at: dict[str, datetime] = field(default_factory=dict)
