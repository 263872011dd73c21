"""The rich tables and one-line texts the verbs print: stored values as literals, never cut."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from .._ops import HEALTH_SAMPLE
from .._text import literal
from ..types import (
    BackoffState,
    BudgetHealth,
    BudgetOverride,
    Job,
    JobStatus,
    PolicyHealth,
    PolicyOverride,
    QueueControl,
    QueueHealth,
    Step,
)


class DataTable(Table):
    """A table of stored values: a str cell is a `literal`, and no column ever cuts a value
    (long ones fold onto more lines instead of ending in an ellipsis)."""

    def __init__(self, *headers: Any, title: str | Text | None = None, **kwargs: Any) -> None:
        if isinstance(title, str):
            title = literal(title)
        super().__init__(*headers, title=title, **kwargs)

    def add_column(self, header: Any = "", *args: Any, **kwargs: Any) -> None:
        kwargs["overflow"] = "fold"
        kwargs["no_wrap"] = False
        super().add_column(header, *args, **kwargs)

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(
            *(literal(cell) if isinstance(cell, str) else cell for cell in renderables),
            **kwargs,
        )


def limit_text(value: int | None) -> str:
    return "-" if value is None else str(value)


def limits_text(max_active: int | None, per_key: int | None, rate: str | None,
                 rate_per_key: str | None) -> str:
    parts = [f"{name} {value}" for name, value in (
        ("max", max_active), ("per key", per_key), ("rate", rate), ("rate/key", rate_per_key))
        if value is not None]
    return ", ".join(parts) or "-"


def queue_limits_text(max_active: int | None, per_key: int | None, rate: str | None,
                      rate_per_key: str | None, budgets: list[str]) -> str:
    """A queue's own limits in force; "budget only" for one that has none and whose jobs name
    a budget (the budget governs it; not "-", which reads as ungoverned)."""
    text = limits_text(max_active, per_key, rate, rate_per_key)
    return "budget only" if text == "-" and budgets else text


def budget_text(name: str, budget: BudgetHealth | None) -> str:
    """A budget a queue's jobs name, with its units in use against its limits in force
    ("openai 2 / 3 units, 100/m"); `budget` is its `BudgetHealth` (None: health has no row for
    it, so nobody declared or overrode it)."""
    if budget is None or (budget.max_active is None and budget.rate_limit is None):
        return f"{name} (not declared: no limit)"
    parts = [f"{budget.active_units} / {budget.max_active} units"
             if budget.max_active is not None else f"{budget.active_units} units"]
    if budget.rate_limit is not None:
        parts.append(budget.rate_limit)
    return f"{name} " + ", ".join(parts) + (" (override)" if budget.override else "")


def budgets_text(names: list[str], budgets: list[BudgetHealth]) -> str:
    """The budgets a queue's jobs name, each with `budget_text` ("-" for none)."""
    by_name = {b.name: b for b in budgets}
    return "; ".join(budget_text(name, by_name.get(name)) for name in names) or "-"


def _in_units(p: PolicyHealth) -> bool:
    """Whether a queue's active jobs cost other than 1 each (docs/design.md "Fair share and job
    cost"): its `active` and `available` are units, not jobs, and `top` says so."""
    return p.active_units != p.active_jobs


def _active_text(p: PolicyHealth, units: bool) -> str:
    if not (units and _in_units(p)):
        return str(p.active)
    limit = "" if p.max_active is None else f" / {p.max_active}"
    return f"{p.active_units} units{limit} ({p.active_jobs} jobs)"


def _available_text(p: PolicyHealth, units: bool) -> str:
    if not (units and _in_units(p)) or p.available is None:
        return limit_text(p.available)
    return f"{p.available} units"


def key_limits_text(p: PolicyHealth) -> str | None:
    """A queue's per-key limits in a few words ("key limits: 20 key(s), default max 1"; None:
    it has none). The keys are counted up to the health sample and one more."""
    if not p.key_limits and p.key_limit_default is None:
        return None
    count = f"{p.key_limits - 1}+" if p.key_limits > HEALTH_SAMPLE else str(p.key_limits)
    text = f"key limits: {count} key(s)"
    default = p.key_limit_default
    if default is not None:
        text += ", default " + " ".join(f"{name} {value}" for name, value in (
            ("max", default.max_active), ("weight", default.weight),
            ("rate", default.rate_limit)) if value is not None)
    return text


def health_table(health: QueueHealth, *, units: bool = False) -> Table:
    """The policies of `health`; with `units` (`workhorse top`), a queue whose active jobs cost
    other than 1 shows its active and available capacity as units ("12 units / 32 (5 jobs)")."""
    return health_table_of([(None, health)], units=units)


def _database_column(table: Table, names: Iterable[str | None]) -> bool:
    """Give `table` a first column `database` when some row is of a named database (a verb that
    reads several, docs/design.md "Several databases"); whether it did."""
    several = any(name is not None for name in names)
    if several:
        table.add_column("database")
    return several


def _database_cell(name: str | None, several: bool) -> tuple[str, ...]:
    return (name or "-",) if several else ()


def health_table_of(parts: Sequence[tuple[str | None, QueueHealth]], *,
                    units: bool = False) -> Table:
    """`health_table` of several databases' health in one table, each row led by its database
    (a name of None: one database, no such column)."""
    table = DataTable(title="policies")
    several = _database_column(table, (name for name, _ in parts))
    # A queue governed by a named budget shows it, with its units and limits (a column only
    # when some queue has one).
    budgeted = any(p.budgets for _, health in parts for p in health.policies)
    for column in ("namespace", "queue", "limits", *(("budgets",) if budgeted else ()),
                   "active", "available", "blocked_ready", "saturated_keys",
                   "rate_limited_keys"):
        text_column = column in ("namespace", "queue", "limits", "budgets")
        table.add_column(column, justify="left" if text_column else "right")
    for database, health in parts:
        for p in health.policies:
            blocked = f"{p.blocked_ready}{'+' if p.capped else ''}"
            name = (p.queue + (" (paused)" if p.paused else "")
                    + (" (override)" if p.override else ""))
            table.add_row(
                *_database_cell(database, several), p.namespace or "-", name,
                "; ".join(filter(None, (
                    queue_limits_text(p.max_active, p.max_active_per_key, p.rate_limit,
                                      p.rate_limit_per_key, p.budgets), key_limits_text(p)))),
                *((budgets_text(p.budgets, health.budgets),) if budgeted else ()),
                _active_text(p, units), _available_text(p, units), blocked,
                str(p.saturated_keys), str(p.rate_limited_keys),
                style="bold yellow" if p.blocked_ready else None,
            )
    return table


def depth_table(health: QueueHealth) -> Table:
    return depth_table_of([(None, health)])


def depth_table_of(parts: Sequence[tuple[str | None, QueueHealth]]) -> Table:
    """The jobs by status, a row a database (one row, no database column, for one)."""
    table = DataTable(title="jobs by status")
    several = _database_column(table, (name for name, _ in parts))
    for status in JobStatus:
        table.add_column(status.value, justify="right")
    for database, health in parts:
        table.add_row(*_database_cell(database, several),
                      *(str(health.depth.get(status.value, 0)) for status in JobStatus))
    return table


def control_line(control: QueueControl) -> str:
    parts = ["paused" if control.paused else "not paused"]
    if control.override is not None:
        parts.append(f"override {override_text(control.override)}")
    return f"{control.queue}: " + "; ".join(parts)


def override_text(override: PolicyOverride) -> str:
    fields = [f"{name}={value}" for name, value in (
        ("max_active", override.max_active), ("max_active_per_key", override.max_active_per_key),
        ("rate_limit", override.rate_limit), ("rate_limit_per_key", override.rate_limit_per_key),
        ("rate_burst", override.rate_burst), ("rate_burst_per_key", override.rate_burst_per_key),
    ) if value is not None]
    until = (f" until {override.expires_at.isoformat(timespec='seconds')}"
             if override.expires_at else " until cleared")
    return ", ".join(fields) + until


def job_row(job: Job) -> list[str]:
    return [
        str(job.id), job.task, job.queue, job.concurrency_key or "-", str(job.priority),
        job.status.value, f"{job.attempts}/{job.max_attempts}",
        job.enqueued_at.isoformat(timespec="seconds"),
    ]


def budgets_table(rows: list[BudgetHealth],
                  backoffs: Mapping[str, BackoffState] | None = None) -> Table:
    """The budgets; with `backoffs` (budget name -> its backoff in force; `workhorse budgets`),
    a `backoff` column when some budget of `rows` has one."""
    return budgets_table_of([(None, rows, backoffs)])


def budgets_table_of(parts: Sequence[tuple[str | None, list[BudgetHealth],
                                           Mapping[str, BackoffState] | None]]) -> Table:
    """`budgets_table` of several databases in one table, each row led by its database."""
    table = DataTable(title="budgets")
    several = _database_column(table, (name for name, _, _ in parts))
    backed_off = any(backoffs is not None and any(b.name in backoffs for b in rows)
                     for _, rows, backoffs in parts)
    for column in ("budget", "namespace", "max_active", "rate_limit", "rate_burst",
                   "active_units", "ready", "queues", *(("backoff",) if backed_off else ())):
        table.add_column(column, justify="right" if column in (
            "max_active", "rate_burst", "active_units", "ready") else "left")
    for database, rows, backoffs in parts:
        for b in rows:
            name = b.name + (" (override)" if b.override else "")
            backoff = (backoffs or {}).get(b.name)
            table.add_row(*_database_cell(database, several), name,
                          b.namespace or "- (not declared)", limit_text(b.max_active),
                          b.rate_limit or "-", limit_text(b.rate_burst), str(b.active_units),
                          f"{b.ready}{'+' if b.capped else ''}",
                          ", ".join(sorted({*b.queues, *b.used_by})) or "-",
                          *((backoff_until_text(backoff) if backoff else "-",)
                            if backed_off else ()),
                          style="bold yellow" if backoff else None)
    return table


# ---- back-pressure (docs/design.md "Back-pressure") -----------------------------------------


def clock_text(moment: datetime, now: datetime | None = None) -> str:
    """`moment` on this machine's clock: HH:MM:SS on today's date, with the date on another
    (a backoff lasts up to a day, so its end may be tomorrow)."""
    local = moment.astimezone()
    today = (now if now is not None else datetime.now(local.tzinfo)).astimezone().date()
    return local.strftime("%H:%M:%S" if local.date() == today else "%Y-%m-%d %H:%M:%S")


def backoff_until_text(backoff: BackoffState) -> str:
    """"backed off until 15:02:03 by job 4812" (no job when the backoff names none)."""
    by = f" by job {backoff.by_job}" if backoff.by_job is not None else ""
    return f"backed off until {clock_text(backoff.until)}{by}"


def backoff_target(backoff: BackoffState) -> str:
    """What a backoff holds, named as the operator's verbs name it: "budget 'openai'",
    "queue 'partner-api'", "key 'acme' of queue 'partner-api'"."""
    if backoff.scope == "budget":
        return f"budget {backoff.name!r}"
    if backoff.scope == "key":
        return f"key {backoff.key!r} of queue {backoff.name!r}"
    return f"queue {backoff.name!r}"


def top_backoff_line(backoff: BackoffState) -> str:
    """One line of `workhorse top`: "backed off: budget openai until 15:02:03 by job 4812"."""
    target = (f"queue {backoff.name} key {backoff.key}" if backoff.scope == "key"
              else f"{backoff.scope} {backoff.name}")
    by = f" by job {backoff.by_job}" if backoff.by_job is not None else ""
    return f"backed off: {target} until {clock_text(backoff.until)}{by}"


def queue_backoff_texts(queue: str, budgets: list[str],
                        backoffs: list[BackoffState]) -> list[str]:
    """What back-pressure holds `queue` now, for `workhorse queues`' controls column: its own
    backoff, how many of its keys are backed off (and until when, at the latest), and the
    backoffs of the budgets its jobs name."""
    own = [b for b in backoffs if b.scope == "queue" and b.name == queue]
    keys = [b for b in backoffs if b.scope == "key" and b.name == queue]
    texts = [backoff_until_text(b) for b in own]
    if len(keys) == 1:
        texts.append(f"key {keys[0].key!r} {backoff_until_text(keys[0])}")
    elif keys:
        latest = clock_text(max(b.until for b in keys))
        texts.append(f"{len(keys)} keys backed off (until {latest} at the latest)")
    texts += [f"budget {b.name} {backoff_until_text(b)}" for b in backoffs
              if b.scope == "budget" and b.name in budgets]
    return texts


def reasons_table(health: QueueHealth) -> Table:
    """The reason codes: each queue's, then each budget's (docs/design.md "Reason codes")."""
    return reasons_table_of([(None, health)])


def reasons_table_of(parts: Sequence[tuple[str | None, QueueHealth]]) -> Table:
    """`reasons_table` of several databases in one table, each row led by its database."""
    table = DataTable(title="reasons")
    several = _database_column(table, (name for name, _ in parts))
    for column in ("queue / budget", "code", "count", "detail"):
        table.add_column(column, justify="right" if column == "count" else "left")
    for database, health in parts:
        lead = _database_cell(database, several)
        for r in health.reasons:
            table.add_row(*lead, r.queue or "-", r.code, str(r.count), r.detail)
        for b in health.budgets:
            for r in b.reasons:
                table.add_row(*lead, f"budget {b.name}", r.code, str(r.count), r.detail)
    return table


def budget_line(name: str, override: BudgetOverride | None) -> str:
    if override is None:
        return f"budget {name}: no override"
    fields = [f"{field}={value}" for field, value in (
        ("max_active", override.max_active), ("rate_limit", override.rate_limit),
        ("rate_burst", override.rate_burst)) if value is not None]
    until = (f" until {override.expires_at.isoformat(timespec='seconds')}"
             if override.expires_at else " until cleared")
    return f"budget {name}: override " + ", ".join(fields) + until


# ---- durable execution (docs/design.md "Durable execution") -----------------------------------

# A step's result or error is cut to this many characters in `jobs show` (--json has it whole).
STEP_VALUE_SHOWN = 120


def short_json(value: Any, width: int = STEP_VALUE_SHOWN) -> str:
    """`value` as compact JSON, cut to `width` characters with how long it was.

    >>> short_json({"a": "x" * 200}, 20)
    '{"a": "xxxxxxxxxxxx… (209 chars)'
    """
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else f"{text[:width - 1]}… ({len(text)} chars)"


def _stamp(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(timespec="seconds")


def step_detail(step: Step) -> str:
    """What a step waits for or waited for: "signal approval, times out 2026-…", "wakes
    2026-…", or "" (a run step, a children step)."""
    parts = []
    if step.signal is not None:
        parts.append(f"signal {step.signal}")
    if step.wake_at is not None:
        parts.append(f"{'times out' if step.kind == 'wait' else 'wakes'} {_stamp(step.wake_at)}")
    return ", ".join(parts)


def step_outcome(step: Step, width: int = STEP_VALUE_SHOWN) -> str:
    """A recorded step's result (as short JSON) or its error ("error Type: message"), "" for a
    pending one."""
    if step.error is not None:
        text = f"{step.error.get('type')}: {step.error.get('message')}"
        return "error " + (text if len(text) <= width else f"{text[:width - 1]}…")
    if step.recorded_at is None:
        return ""
    return "-> " + short_json(step.result, width)


def waiting_text(job: Job, steps: list[Step]) -> str | None:
    """What a suspended job waits for, in words ("sleeping at step 'cool-off' until …"); None
    for a job that is not suspended."""
    if job.status != JobStatus.SUSPENDED:
        return None
    reason = job.suspended_on
    pending = [s for s in steps if s.pending]
    step = pending[-1] if pending else None
    at = f" at step {step.name!r}" if step is not None else ""
    if reason == "sleep":
        return f"sleeping{at} until {_stamp(job.wake_at)}"
    if reason == "signal":
        signal = f" {step.signal!r}" if step is not None and step.signal else ""
        timeout = (f" (times out {_stamp(job.wake_at)})" if job.wake_at is not None
                   else " (no timeout)")
        return f"waiting for signal{signal}{at}{timeout}"
    if reason == "children":
        return f"waiting for its children{at}"
    return f"suspended on {reason}{at}"


def suspended_table(health: QueueHealth) -> Table:
    """Per queue, its suspended jobs by what they wait for, and the soonest timer among them
    (`QueueHealth.suspended`, `suspended_next_wake_at`)."""
    return suspended_table_of([(None, health)])


def suspended_table_of(parts: Sequence[tuple[str | None, QueueHealth]]) -> Table:
    """`suspended_table` of several databases in one table, each row led by its database."""
    table = DataTable(title="suspended")
    several = _database_column(table, (name for name, _ in parts))
    for column in ("queue", "sleep", "signal", "children", "next timer"):
        table.add_column(column, justify="left" if column in ("queue", "next timer")
                         else "right")
    for database, health in parts:
        for queue, counts in sorted(health.suspended.items()):
            table.add_row(*_database_cell(database, several), queue,
                          *(str(counts.get(k, 0)) for k in ("sleep", "signal", "children")),
                          _stamp(health.suspended_next_wake_at.get(queue)))
    return table
