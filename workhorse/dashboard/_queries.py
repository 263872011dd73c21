"""The dashboard's own operations (generators of `(statement, params)`, driven by
`_ops.execute` like those of `_ops.py`): the job search with substring filters, counts and pages
both ways (one tag's jobs through the tag's own index), the ids a bulk action on everything
matching acts on, known names for suggestions, rate windows, and one queue's throughput. Every
read is bounded whatever the history (see each statement's file, sql/statements/dashboard_*.sql),
except a bulk action by tag, which reads as much as Queue.cancel_jobs(tag=) does."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import _ops, _sql
from ..errors import InvalidOptionsError
from ..types import Job, JobStatus, ThroughputMinute, check_id, check_optional_name, check_tags

if TYPE_CHECKING:
    from .._ops import Operation

# Counts stop here ("10,000+"): past it an operator needs a narrower filter, not a number.
COUNT_CAP = 10_000
# How many of the newest jobs give task names for the suggestions.
TASK_SAMPLE = 2_000
SUGGESTIONS = 200
# One queue's chart reads its jobs among this many newest ids (finished history has no index by
# queue; the fleet-wide chart reads the per-minute counters instead).
QUEUE_CHART_WINDOW = 20_000
# A task substring is turned into the succeeded task names it matches while there are at most
# this many distinct names (one index probe each); past it the search reads each window row by
# row, as it did before jobs_succeeded_task_idx (migrations/0002_0.3.0.sql).
TASK_NAMES_CAP = 1_000
RATE_SAMPLE = 1000
# A tag's jobs (docs/design.md "Tags") are read through the tag's own index, newest first
# (list_jobs_by_tag): at most this many of them (of the status and key asked for) for one page,
# which takes its page and its counts from them. That statement cannot start below an id yet, so
# a tag's list is its newest page, with no older pages. A bulk action by tag reads the ids of
# every job of the tag that it applies to (tagged_job_ids), and with queue, task or key filters
# their rows this many at a time, newest first, until it has its limit.
TAG_SCAN = 1_000
# What each action applies to (docs/design.md's status table).
RETRYABLE = _ops.RETRYABLE
# A suspended job is canceled as a ready one is (docs/design.md "Durable execution"; its
# children with it), so the job page offers Cancel on it too, as `jobs cancel --tag` takes it.
CANCELABLE = _ops.CANCELABLE


@dataclass(frozen=True)
class Search:
    """What the Jobs page filters by: queue and task are substrings (trimmed; matched
    case-insensitively), status, key and tag exactly."""

    queue: str | None = None
    status: str | None = None
    task: str | None = None
    key: str | None = None
    tag: str | None = None

    def params(self) -> dict[str, Any]:
        return {"queue": self.queue, "status": self.status, "key": self.key, "task": self.task}


@dataclass(frozen=True)
class Found:
    """A page of the job search: its jobs (newest first), `unsearched_below` as in JobPage,
    `newer` the `before` of the page of newer matches (0: the first page; None: this is the
    first page), the matches by status (each counted up to COUNT_CAP; succeeded ones within
    the searched window) and the queue names the queue substring matched."""

    jobs: list[Job]
    unsearched_below: int | None = None
    newer: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    queues: list[str] | None = None
    capped: bool = False      # some count stopped at COUNT_CAP: "10,000+"

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def applicable(self, statuses: tuple[str, ...]) -> int:
        return sum(n for status, n in self.counts.items() if status in statuses)


@dataclass(frozen=True)
class Names:
    queues: list[str]
    matching: list[str] | None   # the queues the substring matches (None: no queue filter)
    tasks: list[str]


def _check(search: Search) -> None:
    for what, value in (("queue", search.queue), ("task", search.task), ("key", search.key)):
        check_optional_name(what, value)
    if search.status is not None and search.status not in {s.value for s in JobStatus}:
        raise InvalidOptionsError(f"unknown job status {search.status!r}")
    if search.tag is not None:
        check_tags([search.tag])  # one a job can have, as list_jobs checks it


def _matches(search: Search, job: Job) -> bool:
    """Whether `job` matches the queue and task substrings (case-insensitively, as the search
    statements' strpos(lower(..)) does) and the key of `search`."""
    return ((search.queue is None or search.queue.lower() in job.queue.lower())
            and (search.task is None or search.task.lower() in job.task.lower())
            and (search.key is None or job.concurrency_key == search.key))


def known_queues(substring: str | None) -> Operation[tuple[list[str], list[str] | None]]:
    """Every known queue name, and those that contain `substring` (None when it is None)."""
    rows = yield _sql.statement("dashboard_known_queues"), {"queue": substring}
    names = [row[0] for row in rows]
    return names, ([row[0] for row in rows if row[1]] if substring is not None else None)


def names(search: Search) -> Operation[Names]:
    """The suggestions of the Jobs page's filter form."""
    queues, matching = yield from known_queues(search.queue)
    rows = yield _sql.statement("dashboard_known_tasks"), {"sample": TASK_SAMPLE,
                                                            "limit": SUGGESTIONS}
    return Names(queues=queues[:SUGGESTIONS], matching=matching, tasks=[r[0] for r in rows])


def succeeded_task_names(substring: str) -> Operation[list[str] | None]:
    """The succeeded jobs' task names that contain `substring` (case-insensitively), from a skip
    scan of jobs_succeeded_task_idx; None when there are more than TASK_NAMES_CAP names, or
    when the substring matches every name (the names then select nothing, and reading the
    window row by row stops at the page's first matches)."""
    rows = yield _sql.statement("dashboard_succeeded_tasks"), {"task": substring,
                                                                "cap": TASK_NAMES_CAP}
    if len(rows) > TASK_NAMES_CAP or (rows and all(row[1] for row in rows)):
        return None
    return [str(row[0]) for row in rows if row[1]]


def find_jobs(search: Search, *, before: int | None = None, limit: int = 100,
              window: int | None = None, count: bool = True) -> Operation[Found]:
    """The newest matches below `before` (None: the newest), at most `limit`, read as
    `_ops.browse_jobs` reads (a window of ids, then the indexed statuses), with the queue
    substring resolved first against the known queue names, so that the indexes that lead
    with the queue serve the older part; the counts by status (with `count`: the first page
    counts in the same walk as it reads its page), and where the page of newer matches
    starts. With a tag: see `find_tagged`."""
    _check(search)
    if search.tag is not None:
        if before is not None:
            raise InvalidOptionsError(
                "a tag's jobs are listed newest first on one page: before= does not apply "
                "with a tag")
        return (yield from find_tagged(search, limit=limit, count=count))
    if before is not None:
        check_id(before, "before (a job id)")
    window = _ops.BROWSE_WINDOW if window is None else window
    bounds = yield _sql.statement("job_id_bounds"), ()
    oldest, newest = bounds[0]
    if newest is None:
        return Found([], newer=None if before is None else 0)
    matching = None
    if search.queue is not None:
        _, matching = yield from known_queues(search.queue)
    params = {**search.params(), "queues": matching}
    # With a task substring, each window's succeeded matches are read by (task, id) for the
    # names it matches, and the other statuses through their own indexes, instead of the window
    # row by row (docs/design.md "The dashboard in an incident"; migrations/0002_0.3.0.sql).
    window_statement, above_statement = "dashboard_jobs_window", "dashboard_jobs_above"
    if search.task is not None:
        tasks = yield from succeeded_task_names(search.task)
        if tasks is not None:
            params["tasks"] = tasks
            window_statement = "dashboard_jobs_window_task"
            above_statement = "dashboard_jobs_above_task"
    top = newest + 1
    hi = top if before is None else min(before, top)
    lo = max(hi - window, oldest)
    first = hi == top
    cap = COUNT_CAP + 1 if count and first else limit
    rows = yield _sql.statement(window_statement), {**params, "lo": lo, "hi": hi, "cap": cap}
    jobs = yield from _by_id([int(r[0]) for r in rows[:limit]])
    unsearched = None
    if len(jobs) < limit and lo > oldest:
        if search.status != JobStatus.SUCCEEDED:
            older = yield _sql.statement("dashboard_jobs_older"), {
                **params, "lo": lo, "limit": limit - len(jobs)}
            jobs += [_ops.job_from_row(row) for row in older]
        if search.status in (None, JobStatus.SUCCEEDED):
            unsearched = lo
    newer = None
    if not first and before is not None:
        above = yield _sql.statement(above_statement), {
            **params, "lo": before, "hi": min(before + window, top), "limit": limit}
        if len(above) == limit:
            newer = int(above[-1][0]) + 1
        elif before + window >= top:
            newer = 0
        else:
            newer = before + window
    counts: dict[str, int] = {}
    capped = False
    if count:
        if first:
            in_window = [str(r[1]) for r in rows]
        else:
            top_lo = max(top - window, oldest)
            top_rows = yield _sql.statement(window_statement), {
                **params, "lo": top_lo, "hi": top, "cap": COUNT_CAP + 1}
            in_window = [str(r[1]) for r in top_rows]
            lo = top_lo
        capped = len(in_window) > COUNT_CAP
        for status in in_window:
            counts[status] = counts.get(status, 0) + 1
        if lo > oldest:
            older_counts = yield _sql.statement("dashboard_jobs_counts"), {
                **params, "lo": lo, "cap": COUNT_CAP + 1}
            for status, n in older_counts:
                if n:
                    counts[status] = counts.get(status, 0) + int(n)
                    capped = capped or n > COUNT_CAP
    return Found(jobs, unsearched_below=unsearched, newer=newer, counts=counts,
                 queues=matching, capped=capped)


def find_tagged(search: Search, *, limit: int = 100, count: bool = True) -> Operation[Found]:
    """The newest jobs of `search.tag` that match the other filters, at most `limit`, with
    their tags: the tag's newest TAG_SCAN jobs of the status and key asked for, read through
    the tag's own index (`_ops.list_jobs`), then the queue and task substrings; the counts by
    status are those of the matches among them, `capped` when the read was full (older jobs of
    the tag were not searched). One page only: no `newer`, and no older page (the statement
    cannot start below an id)."""
    _check(search)
    if search.tag is None:
        raise InvalidOptionsError("find_tagged needs a tag")
    scan = min(max(TAG_SCAN, limit), 10_000)
    read = yield from _ops.list_jobs(tag=search.tag, status=search.status, key=search.key,
                                     limit=scan)
    found = [job for job in read if _matches(search, job)]
    counts: dict[str, int] = {}
    if count:
        for job in found:
            counts[job.status.value] = counts.get(job.status.value, 0) + 1
    return Found(found[:limit], counts=counts, capped=count and len(read) >= scan)


def _by_id(ids: list[int]) -> Operation[list[Job]]:
    if not ids:
        return []
    rows = yield _sql.statement("dashboard_jobs_by_id"), {"ids": ids}
    return [_ops.job_from_row(row) for row in rows]


def matching_ids(search: Search, statuses: tuple[str, ...], limit: int) -> Operation[list[int]]:
    """The ids of the jobs matching `search` in `statuses` (those an action applies to),
    newest first, at most `limit`: what a bulk action on everything matching acts on."""
    _check(search)
    chosen = [s for s in statuses if search.status is None or s == search.status]
    if not chosen:
        return []
    if search.tag is not None:
        return (yield from _tagged_ids(search, chosen, limit))
    matching = None
    if search.queue is not None:
        _, matching = yield from known_queues(search.queue)
    rows = yield _sql.statement("dashboard_job_ids"), {
        **search.params(), "queues": matching, "statuses": chosen, "limit": limit}
    return [int(row[0]) for row in rows]


def _tagged_ids(search: Search, statuses: list[str], limit: int) -> Operation[list[int]]:
    """`matching_ids` for a tag: every job of the tag in `statuses` (as Queue.cancel_jobs and
    retry_jobs by tag find them), newest first; with queue, task or key filters, those whose
    rows match them, read TAG_SCAN at a time until `limit` match."""
    assert search.tag is not None
    ids = yield from _ops.tagged_job_ids(search.tag, statuses)
    ids.reverse()  # oldest first as read: the newest are kept, as for the other filters
    if search.queue is None and search.task is None and search.key is None:
        return ids[:limit]
    found: list[int] = []
    for start in range(0, len(ids), TAG_SCAN):
        jobs = yield from _by_id(ids[start:start + TAG_SCAN])
        found += [job.id for job in jobs if _matches(search, job)]
        if len(found) >= limit:
            break
    return found[:limit]


def job_statuses(ids: list[int]) -> Operation[dict[int, tuple[str, bool]]]:
    """id -> (status, cancel requested) for those of `ids` that exist."""
    rows = yield _sql.statement("dashboard_job_statuses"), {"ids": [check_id(i) for i in ids]}
    return {int(row[0]): (str(row[1]), bool(row[2])) for row in rows}


@dataclass(frozen=True)
class RateWindow:
    queue: str
    limit: int | None
    period: float | None
    used: int | None           # starts within the queue-wide window
    next_start: float | None   # seconds until the queue-wide rate allows one more (0: now)
    key_next_start: float | None  # the soonest a key out of its rate may start again


def rate_windows(queues: list[str]) -> Operation[dict[str, RateWindow]]:
    for queue in queues:
        check_optional_name("queue", queue)
    if not queues:
        return {}
    rows = yield _sql.statement("dashboard_rate_windows"), {"queues": queues,
                                                             "sample": RATE_SAMPLE}
    return {row[0]: RateWindow(row[0], row[1], row[2],
                               None if row[3] is None else int(row[3]),
                               row[4], row[5]) for row in rows}


def queue_minutes(queue: str, minutes: int = 60) -> Operation[tuple[list[ThroughputMinute],
                                                                      datetime | None]]:
    """One queue's starts, completions and failures per minute among its newest jobs, and the
    database clock (None when there is no job)."""
    check_optional_name("queue", queue)
    rows = yield _sql.statement("dashboard_queue_minutes"), {
        "queue": queue, "window": QUEUE_CHART_WINDOW, "minutes": minutes}
    if not rows:
        return [], None
    now = rows[0][4]
    found = []
    for minute, started, succeeded, failed, _ in rows:
        seconds = min(max((now - minute).total_seconds(), 1.0), 60.0)
        found.append(ThroughputMinute(minute, int(started), int(succeeded), int(failed),
                                      0, 0, 0, seconds=seconds))
    return found, now


# ---- named budgets (docs/design.md "Named budgets") ----------------------------------------------

# At most this many (queue, budget) pairs of budget_queues are read for one page, and each
# pair's ready jobs are counted up to this many ("100+"): the pages need to know which budgets a
# queue's ready jobs name, and roughly how many, not a census (health() counts each budget's).
BUDGET_PAIRS = 10_000
PAIR_SAMPLE = 100


@dataclass(frozen=True)
class BudgetWindow:
    """A budget's rate windows now: the starts in its rate window and the seconds until it
    allows one more (0: now); the same for its burst window (None without a burst)."""

    name: str
    used: int
    next_start: float
    burst_used: int | None
    burst_next_start: float | None


def budget_windows(rates: list[tuple[str, int, float, int | None]]
                   ) -> Operation[dict[str, BudgetWindow]]:
    """For each (budget, N, period, burst) in force: its windows, read from budget_starts."""
    for name, *_ in rates:
        check_optional_name("budget", name)
    if not rates:
        return {}
    rows = yield _sql.statement("dashboard_budget_windows"), {
        "names": [r[0] for r in rates], "n": [r[1] for r in rates],
        "period": [float(r[2]) for r in rates], "burst": [r[3] for r in rates]}
    return {row[0]: BudgetWindow(row[0], int(row[1]), float(row[2]),
                                 None if row[3] is None else int(row[3]),
                                 None if row[4] is None else float(row[4])) for row in rows}


@dataclass(frozen=True)
class BudgetUse:
    """One (queue, budget) pair of budget_queues: the budget's ready jobs in the queue (up to
    the sample, `capped` beyond), whether health() lists the queue already (it has a policy or
    a control), and the queue a claim of this one leaves the budget's places to now (turns
    between queues: it has waited longer)."""

    queue: str
    budget: str
    ready: int
    capped: bool
    listed: bool
    defers_to: str | None = None   # the queue whose turn the budget's next places are


def budget_uses(sample: int) -> Operation[list[BudgetUse]]:
    """Every queue that has used a budget, with each budget (at most BUDGET_PAIRS pairs)."""
    rows = yield _sql.statement("dashboard_budget_queues"), {"sample": sample,
                                                              "pairs": BUDGET_PAIRS}
    return [BudgetUse(str(r[0]), str(r[1]), min(int(r[2]), sample), int(r[2]) > sample,
                      bool(r[3]), None if r[4] is None else str(r[4])) for r in rows]


@dataclass(frozen=True)
class BudgetedQueue:
    """A queue that uses a budget: its active units and jobs, its ready jobs within the sample
    (`sampled`, up to sample + 1) and how many of them name a budget that holds them back."""

    queue: str
    units: int
    jobs: int
    sampled: int
    blocked: int


def budgeted_queues(queues: list[str], blocked: list[str], sample: int
                    ) -> Operation[dict[str, BudgetedQueue]]:
    for queue in queues:
        check_optional_name("queue", queue)
    if not queues:
        return {}
    rows = yield _sql.statement("dashboard_budgeted_queues"), {
        "queues": queues, "blocked": blocked, "sample": sample}
    return {str(r[0]): BudgetedQueue(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]))
            for r in rows}
