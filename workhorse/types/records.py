"""What reads return: jobs and their attempts and progress, stored policies, budgets and
schedules, queue controls, workers, sync reports."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._validate import check_progress
from .options import BudgetDefinition, KeyLimit, ScheduleDefinition


class JobStatus(enum.StrEnum):
    """A job's status (docs/design.md's status table). A `str`, so it compares to its value.

    >>> JobStatus("held") is JobStatus.HELD, JobStatus.READY == "ready"
    (True, True)
    """
    WAITING = "waiting"
    SCHEDULED = "scheduled"
    READY = "ready"
    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    HELD = "held"
    CANCELED = "canceled"
    EXPIRED = "expired"
    SUSPENDED = "suspended"

    @classmethod
    def of_row(cls, value: str) -> JobStatus:
        """The status a row holds, also one this version does not know (a newer release's
        worker may write it beside this one's): it reads as itself, never as an error.

        >>> JobStatus.of_row("ready") is JobStatus.READY
        True
        >>> str(JobStatus.of_row("paused-by-a-newer-release"))
        'paused-by-a-newer-release'
        """
        try:
            return cls(value)
        except ValueError:
            unknown = str.__new__(cls, value)
            unknown._name_ = value.upper()
            unknown._value_ = value
            return unknown


RESTING = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.HELD, JobStatus.CANCELED,
                     JobStatus.EXPIRED})


@dataclass(frozen=True, slots=True)
class ConcurrencyPolicy:
    """A policy as stored in PostgreSQL.

    >>> q.list_concurrency_policies("billing")  # doctest: +SKIP
    [ConcurrencyPolicy(namespace='billing', queue='mail', max_active=20, ...)]
    """

    namespace: str
    queue: str
    max_active: int | None
    max_active_per_key: int | None
    created_at: datetime
    updated_at: datetime
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    fairness: str = "fifo"
    on_key_full: str = "queue"
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None


@dataclass(frozen=True, slots=True)
class KeyLimitSet:
    """A queue's per-key limits as stored (docs/design.md "Per-key limits"): the namespace that
    owns the queue's policy, the default for keys not listed (None: the policy's per-key limits),
    and the listed keys' limits.

    >>> s = q.key_limits("api")                                    # doctest: +SKIP
    >>> s.default, s.limits["acme"]                                # doctest: +SKIP
    (KeyLimit(max_active=1, ...), KeyLimit(max_active=10, ...))
    """

    queue: str
    namespace: str
    default: KeyLimit | None
    limits: dict[str, KeyLimit]
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class BudgetOverride:
    """An operator's override of a budget: the fields it replaces (None: not replaced), since
    when, and until when (None: until cleared).

    >>> q.override_budget("openai", max_active=10, expires_in=3600)  # doctest: +SKIP
    BudgetOverride(max_active=10, rate_limit=None, rate_burst=None, set_at=..., expires_at=...)
    """

    max_active: int | None = None
    rate_limit: str | None = None
    rate_burst: int | None = None
    set_at: datetime | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Hold:
    """A budget hold outside tasks (docs/design.md "Holds"), as stored: `units` of `budget` held
    until `lease_until` (renewed while its holder lives), by `holder` (application_name) in OS
    process `pid`, with the holder's `key` label.

    >>> [(h.budget, h.units, h.holder) for h in q.list_holds("openai")]  # doctest: +SKIP
    [('openai', 1, 'workhorse-web')]
    """

    id: int
    budget: str
    units: int
    key: str | None
    lease_until: datetime
    acquired_at: datetime
    holder: str
    pid: int


@dataclass(frozen=True, slots=True)
class Budget:
    """A named budget as stored: its definition, the namespace that owns it, and its override.

    >>> [(b.name, b.max_active) for b in q.list_budgets()]  # doctest: +SKIP
    [('openai', 50)]
    """

    namespace: str
    name: str
    max_active: int | None
    rate_limit: str | None
    rate_burst: int | None
    created_at: datetime
    updated_at: datetime
    override: BudgetOverride | None = None
    adaptive: bool = False

    @property
    def definition(self) -> BudgetDefinition:
        """The stored budget as a `BudgetDefinition` (what a sync compares).

        >>> q.list_budgets()[0].definition  # doctest: +SKIP
        BudgetDefinition(name='openai', max_active=50, rate_limit='3000/m', rate_burst=100,
                         adaptive=False)
        """
        return BudgetDefinition(self.name, self.max_active, self.rate_limit, self.rate_burst,
                                self.adaptive)


@dataclass(frozen=True, slots=True)
class Progress:
    """The latest progress a running handler reported (`current_job().progress(...)`), as
    `JobHandle.progress()` and `Job.progress` read it: `at` is when the worker wrote it
    (database clock; under `eager()`, the local clock when the handler called).

    >>> p = Progress(40, 100, "pages", None)
    >>> p.fraction, p.text
    (0.4, '40/100 (40%) pages')
    """

    done: int | float
    total: int | float | None = None
    message: str | None = None
    at: datetime | None = None

    def __post_init__(self) -> None:
        check_progress(self.done, self.total, self.message)

    @property
    def fraction(self) -> float | None:
        """done / total, at most 1.0; None without a total (or with a total of 0).

        >>> Progress(1, 4).fraction, Progress(5, 4).fraction, Progress(3).fraction
        (0.25, 1.0, None)
        """
        if not self.total:
            return None
        return min(float(self.done) / float(self.total), 1.0)

    @property
    def text(self) -> str:
        """One line for people: `40/100 (40%) pages`, or `40 pages` without a total.

        >>> Progress(40, message="pages").text, Progress(1.5, 3.0).text
        ('40 pages', '1.5/3 (50%)')
        """
        shown = f"{self.done:g}" if isinstance(self.done, float) else str(self.done)
        if self.total is not None:
            total = f"{self.total:g}" if isinstance(self.total, float) else str(self.total)
            shown += f"/{total}"
            fraction = self.fraction
            if fraction is not None:
                shown += f" ({math.floor(fraction * 100)}%)"
        if self.message:
            shown += f" {self.message}"
        return shown

    @classmethod
    def from_stored(cls, document: Any, at: datetime | None) -> Progress | None:
        """The value the worker stored (a JSON object), or None.

        >>> Progress.from_stored({"done": 2, "total": 4, "message": None, "fence": 9}, None)
        Progress(done=2, total=4, message=None, at=None)
        """
        if not isinstance(document, dict) or "done" not in document:
            return None
        return cls(document["done"], document.get("total"), document.get("message"), at)


@dataclass(frozen=True, slots=True)
class Job:
    """One job row.

    >>> job = add.delay(2, 3).job()  # doctest: +SKIP
    >>> job.status, job.attempts, job.max_attempts  # doctest: +SKIP
    (<JobStatus.READY: 'ready'>, 0, 3)
    """

    id: int
    task: str
    queue: str
    concurrency_key: str | None
    priority: int
    payload: Any
    status: JobStatus
    attempts: int
    max_attempts: int
    result: Any
    error: dict[str, Any] | None
    run_at: datetime
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    on_failure: str = "fail"
    fence: int | None = None
    lease_until: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    cancel_requested: bool = False
    idempotency_key: str | None = None
    expires_at: datetime | None = None
    # The job key it holds (docs/design.md "Job keys"); None once a newer job took the key over.
    job_key: str | None = None
    # docs/design.md "Fair share and job cost".
    cost: int = 1
    rate_cost: int = 1
    weight: int = 1
    # The latest progress of its current (or last) attempt; None before the attempt reported any.
    progress: Progress | None = None
    # The workflow it is a member of (docs/design.md "Workflows"), and the ids it runs after.
    workflow_id: int | None = None
    depends_on: list[int] = field(default_factory=list)
    # The named budget it names (docs/design.md "Named budgets"), or None.
    budget: str | None = None
    # Its tags, in the order given at enqueue (docs/design.md "Tags").
    tags: list[str] = field(default_factory=list)
    # Its latest redrive and how many it had (docs/design.md "Dead letters").
    redriven_at: datetime | None = None
    redrive_count: int = 0
    # docs/design.md "Deadlines": no attempt starts after `deadline`; `start_by` is the moment
    # after which this job will not start (its expiry until it first starts, then its deadline).
    deadline: datetime | None = None
    start_by: datetime | None = None
    # docs/design.md "Durable execution": while `suspended`, what it waits for ("sleep",
    # "signal", "children") and when its timer (a sleep's end, a wait's timeout) wakes it; the
    # job whose child it is.
    suspended_on: str | None = None
    wake_at: datetime | None = None
    parent_id: int | None = None

    @property
    def resting(self) -> bool:
        """Whether the job reached a status it stays in: succeeded, failed, held or canceled.

        >>> add.delay(2, 3).wait(timeout=10).resting  # doctest: +SKIP
        True
        """
        return self.status in RESTING


STEP_KINDS = ("run", "sleep", "wait", "child", "children")


@dataclass(frozen=True, slots=True)
class Step:
    """One named step of a job (docs/design.md "Durable execution"), as `JobHandle.steps()`
    lists them, in the order the job first reached them. `recorded_at` is None while the step
    is pending: a sleep, wait or children step the job is suspended on. `result` is the step's
    JSON result (a wait's payload, the children's results); `error` the error document of a
    wait that timed out or a child that failed; `wake_at` a sleep's end or a wait's timeout;
    `signal` the signal a wait takes.

    >>> Step(name="charge", kind="run", recorded_at=None, result=None, error=None).pending
    True
    """

    name: str
    kind: str
    recorded_at: datetime | None
    result: Any
    error: dict[str, Any] | None
    created_at: datetime | None = None
    wake_at: datetime | None = None
    signal: str | None = None

    @property
    def pending(self) -> bool:
        """Whether the step is a suspension point not satisfied yet.

        >>> Step(name="nap", kind="sleep", recorded_at=None, result=None, error=None).pending
        True
        """
        return self.recorded_at is None


ATTEMPT_OUTCOMES = ("failed", "retried", "snoozed", "lost", "canceled", "succeeded", "redriven")
# How many attempts that did not succeed a job keeps (the oldest go first).
ATTEMPT_HISTORY_MAX = 20


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a job (docs/design.md "The dashboard in an incident"): its number (the job's
    `attempts` after the claim that started it), when it started and ended, how it ended
    (`outcome`: "failed", "retried", "snoozed", "lost", "canceled" or "succeeded") and its error
    (`{"type", "message", "traceback"}`, or None). Oldest first; attempts that did not succeed
    are kept (the last 20), and a success is the job row itself. A redrive of the dead job is an
    entry too (docs/design.md "Dead letters"): outcome "redriven", at its time, with `redrive`
    saying from which status, by whom (`by`, `application_name`), why (`reason`) and its audit
    row (`audit_id`); the attempts after it count from 1 again.

    >>> [(a.attempt, a.outcome) for a in h.attempts()]  # doctest: +SKIP
    [(1, 'retried'), (2, 'succeeded')]
    >>> Attempt(1, None, None, "succeeded", None).failed
    False
    """

    attempt: int
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str
    error: dict[str, Any] | None = None
    redrive: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        """Whether this attempt did not succeed (every outcome but "succeeded", "snoozed" and a
        redrive, which is no attempt).

        >>> Attempt(1, None, None, "lost", None).failed
        True
        """
        return self.outcome not in ("succeeded", "snoozed", "redriven")


@dataclass(frozen=True, slots=True)
class RedriveReport:
    """What a redrive did, or (`dry_run`) would do now (docs/design.md "Dead letters"): the jobs,
    in release order within each queue, each with its queue and its release time, and the audit
    row (None for a dry run, or when nothing matched).

    >>> report = q.redrive(queue="mail", rate="10/s", reason="SMTP back")  # doctest: +SKIP
    >>> report.count, report.last_release - report.first_release  # doctest: +SKIP
    (500, datetime.timedelta(seconds=49, microseconds=900000))
    """

    dry_run: bool
    jobs: list[int]
    queues: list[str]
    releases: list[datetime]
    audit_id: int | None = None

    @property
    def count(self) -> int:
        """How many jobs.

        >>> RedriveReport(True, [1, 2], ["q", "q"], []).count
        2
        """
        return len(self.jobs)

    @property
    def first_release(self) -> datetime | None:
        """When the first job is released (None: no job).

        >>> RedriveReport(True, [], [], []).first_release is None
        True
        """
        return min(self.releases) if self.releases else None

    @property
    def last_release(self) -> datetime | None:
        """When the last job is released (None: no job).

        >>> from datetime import datetime
        >>> at = datetime(2026, 1, 1)
        >>> RedriveReport(True, [1], ["q"], [at]).last_release == at
        True
        """
        return max(self.releases) if self.releases else None


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge deleted, or (`dry_run`) would delete now, and its audit row.

    >>> q.purge(queue="mail", error_type="BadAddress", reason="bounced").count  # doctest: +SKIP
    12
    """

    dry_run: bool
    jobs: list[int]
    audit_id: int | None = None

    @property
    def count(self) -> int:
        """How many jobs.

        >>> PurgeReport(True, [4]).count
        1
        """
        return len(self.jobs)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of the audit log (docs/design.md "Dead letters"): a redrive or a purge, when, by
    whom (the OS user the client ran as, its application_name, the database role), with which
    filters, on how many and which jobs, and why.

    >>> [(e.action, e.count) for e in q.audit_log()]  # doctest: +SKIP
    [('purge', 12), ('redrive', 500)]
    """

    id: int
    at: datetime
    action: str
    os_user: str | None
    application_name: str | None
    db_user: str
    filters: dict[str, Any]
    count: int
    job_ids: list[int]
    reason: str | None


@dataclass(frozen=True, slots=True)
class PolicyOverride:
    """An operator's override of a queue's policy: the fields it replaces (None: not replaced),
    since when, and until when (None: until cleared).

    >>> q.override_policy("openai-api", max_active=2).override  # doctest: +SKIP
    PolicyOverride(max_active=2, max_active_per_key=None, ..., expires_at=datetime.datetime(...))
    >>> PolicyOverride(max_active=2).rate_limit is None
    True
    """

    max_active: int | None = None
    max_active_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    set_at: datetime | None = None
    expires_at: datetime | None = None
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None


@dataclass(frozen=True, slots=True)
class QueueControl:
    """A queue's operator controls after a pause, resume, override or clear.

    >>> q.pause("mail")  # doctest: +SKIP
    QueueControl(queue='mail', paused=True, paused_at=datetime.datetime(...), override=None)
    >>> QueueControl("mail").paused
    False
    """

    queue: str
    paused: bool = False
    paused_at: datetime | None = None
    override: PolicyOverride | None = None


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job handed to a worker, with the fence that must accompany its outcome.

    >>> [job] = q.claim("mail", 1, 30.0)  # doctest: +SKIP
    >>> q.complete_many([(job.id, job.fence, {"sent": True})])  # doctest: +SKIP
    """

    id: int
    task: str
    queue: str
    concurrency_key: str | None
    priority: int
    payload: Any
    attempts: int
    max_attempts: int
    fence: int
    lease_until: datetime
    enqueued_at: datetime
    run_at: datetime
    meta: dict[str, Any]
    started_at: datetime | None = None
    # The schedule's occurrence, or the first run_at (None when a retry moved run_at and no
    # schedule fired the job); only the claim says.
    scheduled_for: datetime | None = None


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One row of `workhorse queues`: any queue with jobs, a policy, a control, a schedule or a
    named budget its jobs have named. `budgets` are those names (docs/design.md "Named budgets"),
    sorted: a queue with no policy and a budget is governed by the budget.

    >>> [(s.queue, s.depth.get("ready", 0), s.paused) for s in q.list_queues()]  # doctest: +SKIP
    [('mail', 3, False)]
    >>> [(s.queue, s.budgets) for s in q.list_queues()]  # doctest: +SKIP
    [('embeddings', ['openai']), ('mail', [])]
    """

    queue: str
    depth: dict[str, int]
    namespace: str | None = None
    max_active: int | None = None
    max_active_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    paused: bool = False
    override: PolicyOverride | None = None
    # The named budgets its jobs have named (budget_queues, recorded by the enqueue), by name.
    budgets: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What `App.sync()` changed, as lists of queue names.

    >>> report = SyncReport(created=["mail"], unchanged=["openai-api"])
    >>> report.created, report.pruned
    (['mail'], [])
    """

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    # The app's schedules, by name, when it declares any (App.sync only).
    schedules: SyncReport | None = None
    # The app's named budgets, by name, when it declares any or had some to prune (App.sync).
    budgets: SyncReport | None = None
    # The app's per-key limits, by queue, when it declares any or had some to prune (App.sync).
    key_limits: SyncReport | None = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker supervisor's row in `workhorse.workers`: alive while it touched `last_seen` in
    the last 30 seconds; `stats` holds its running counters.

    >>> [(w.host, w.pid, w.slots) for w in q.list_workers()]  # doctest: +SKIP
    [('web-1', 4121, 4)]
    """

    id: int
    app: str
    host: str
    pid: int
    slots: int
    queues: list[str]
    started_at: datetime
    last_seen: datetime
    stats: dict[str, Any]
    alive: bool


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as stored in PostgreSQL: its definition, the namespace that owns it, the
    next occurrence it will fire (`next_run_at`) and the latest it fired (`last_run_at`, None
    before the first).

    >>> [(s.name, s.next_run_at) for s in q.list_schedules("billing")]  # doctest: +SKIP
    [('digest', datetime.datetime(2026, 12, 2, 9, 0, tzinfo=...))]
    """

    namespace: str
    name: str
    task: str
    cron: str | None
    every: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    tz: str
    catch_up: str
    priority: int
    max_attempts: int
    concurrency_key: str | None
    on_failure: str
    next_run_at: datetime
    last_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    cost: int = 1
    rate_cost: int = 1
    weight: int = 1
    # The tags of every job it fires (docs/design.md "Tags").
    tags: tuple[str, ...] = ()

    @property
    def definition(self) -> ScheduleDefinition:
        """The stored schedule as a `ScheduleDefinition` (what a sync would compare).

        >>> q.list_schedules("billing")[0].definition.cron  # doctest: +SKIP
        '0 9 * * *'
        """
        return ScheduleDefinition(
            name=self.name, task=self.task, cron=self.cron, every=self.every, args=self.args,
            kwargs=self.kwargs, queue=self.queue, tz=self.tz, catch_up=self.catch_up,
            priority=self.priority, max_attempts=self.max_attempts,
            concurrency_key=self.concurrency_key, on_failure=self.on_failure,
            cost=self.cost, rate_cost=self.rate_cost, weight=self.weight, tags=self.tags,
        )


def asdict(value: Any) -> dict[str, Any]:
    return dataclasses.asdict(value)


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """A workflow's members counted by status, and whether every member finished.

    >>> WorkflowStatus(id=7, counts={"succeeded": 3}, finished=True).finished
    True
    """

    id: int
    counts: dict[str, int]
    finished: bool
