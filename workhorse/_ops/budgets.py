"""Named budgets (docs/design.md "Named budgets"): their definitions, controls and health."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import _sql
from .._driver import Operation
from ..errors import (
    InvalidOptionsError,
    InvalidPolicyError,
)
from ..types import (
    MAX_BUDGET_DEFINITIONS,
    MAX_DELAY_SECONDS,
    BackoffState,
    Budget,
    BudgetDefinition,
    BudgetHealth,
    BudgetOverride,
    Hold,
    RateLimit,
    SyncReport,
    check_name,
    check_optional_name,
    rate_text,
    shown,
)
from .jobs import HEALTH_SAMPLE


def _budget_override(row: Sequence[Any]) -> BudgetOverride:
    """From (max_active, rate n, rate period, burst, set, expires)."""
    return BudgetOverride(max_active=row[0], rate_limit=rate_text(row[1], row[2]),
                          rate_burst=row[3], set_at=row[4], expires_at=row[5])


def list_budgets(namespace: str | None = None) -> Operation[list[Budget]]:
    """The declared budgets, every namespace's or one's, each with its override."""
    check_optional_name("namespace", namespace)
    rows = yield _sql.statement("list_budgets"), (namespace, namespace)
    return [
        Budget(namespace=row[0], name=row[1], max_active=row[2],
               rate_limit=rate_text(row[3], row[4]), rate_burst=row[5], created_at=row[6],
               updated_at=row[7],
               override=_budget_override(row[9:15]) if row[8] else None, adaptive=row[15])
        for row in rows
    ]


def check_budget_definitions(namespace: str,
                             definitions: Iterable[BudgetDefinition]) -> list[BudgetDefinition]:
    """`definitions` as a list, checked before anything is sent (InvalidPolicyError): each a
    BudgetDefinition, no name twice, at most MAX_BUDGET_DEFINITIONS."""
    check_name("namespace", namespace, InvalidPolicyError)
    if isinstance(definitions, str | bytes | BudgetDefinition):
        raise InvalidPolicyError(f"expected a list of BudgetDefinition, got {shown(definitions)}")
    definitions = list(definitions)
    if len(definitions) > MAX_BUDGET_DEFINITIONS:
        raise InvalidPolicyError(
            f"{len(definitions)} budgets; at most {MAX_BUDGET_DEFINITIONS} in one sync")
    seen: set[str] = set()
    for definition in definitions:
        if not isinstance(definition, BudgetDefinition):
            raise InvalidPolicyError(f"expected BudgetDefinition, got {shown(definition)}")
        if definition.name in seen:
            raise InvalidPolicyError(f"budget {definition.name!r} is defined twice")
        seen.add(definition.name)
    return definitions


def sync_budgets(
    namespace: str, definitions: Iterable[BudgetDefinition], prune: bool,
) -> Operation[tuple[SyncReport, list[Budget]]]:
    """Desired state for `namespace`'s budgets (sync_budgets.sql): another namespace's budget is a
    PolicyConflictError, and nothing is written."""
    definitions = check_budget_definitions(namespace, definitions)
    rates = [d.rate for d in definitions]
    rows = yield _sql.statement("sync_budgets"), (
        namespace,
        [d.name for d in definitions],
        [d.max_active for d in definitions],
        [r.n if r else None for r in rates],
        [r.period if r else None for r in rates],
        [d.rate_burst for d in definitions],
        bool(prune),
        [d.adaptive for d in definitions],
    )
    report = SyncReport()
    for action, name in rows:
        getattr(report, action).append(name)
    budgets = yield from list_budgets(namespace)
    return report, budgets


def set_budget_control(
    name: str,
    action: str,
    *,
    max_active: int | None = None,
    rate_limit: str | None = None,
    rate_burst: int | None = None,
    expires_in: float | None = None,
) -> Operation[BudgetOverride | None]:
    """Override a budget's fields, or clear its override (set_budget_control.sql); returns the
    override in place afterwards (None after a clear)."""
    check_name("budget name", name)
    if max_active is not None and (type(max_active) is not int
                                   or not 1 <= max_active <= 1_000_000):
        raise InvalidPolicyError(f"max_active must be an int in [1, 1000000], got {max_active!r}")
    rate = RateLimit.optional(rate_limit, "rate_limit")
    if rate_burst is not None:
        if type(rate_burst) is not int or not 1 <= rate_burst <= 1_000_000:
            raise InvalidPolicyError(
                f"rate_burst must be an int in [1, 1000000], got {rate_burst!r}")
        if rate is not None and rate_burst > rate.n:
            raise InvalidPolicyError(
                f"budget {name!r}: rate_burst ({rate_burst}) must be at most the override's N "
                f"({rate})")
    if action == "override" and max_active is None and rate is None and rate_burst is None:
        raise InvalidPolicyError(
            "a budget override needs at least one of max_active, rate_limit, rate_burst")
    if expires_in is not None and (
        isinstance(expires_in, bool) or not isinstance(expires_in, int | float)
        or not 0 < expires_in <= MAX_DELAY_SECONDS
    ):
        raise InvalidOptionsError(f"expires_in must be positive seconds, got {expires_in!r}")
    rows = yield _sql.statement("set_budget_control"), (
        name, action, max_active, rate.n if rate else None, rate.period if rate else None,
        rate_burst, float(expires_in) if expires_in is not None else None)
    return _budget_override(rows[0][1:7]) if rows else None


def budget_health() -> Operation[list[BudgetHealth]]:
    """`QueueHealth.budgets`: one row per declared, overridden or named budget (budget_health.sql,
    bounded by HEALTH_SAMPLE)."""
    rows = yield _sql.statement("budget_health"), {"sample": HEALTH_SAMPLE}
    return [
        BudgetHealth(
            name=row[0], namespace=row[1], max_active=row[2], rate_limit=rate_text(row[3], row[4]),
            rate_burst=row[5], override=_budget_override(row[7:13]) if row[6] else None,
            active_units=int(row[13]), blocked_ready=int(row[17]), queues=list(row[16] or []),
            next_start_at=row[18], ready=min(int(row[14]), HEALTH_SAMPLE), capped=bool(row[15]),
            used_by=sorted({*(row[16] or []), *(row[19] or [])}),
            backed_off_until=row[20], backed_off_by=row[21], held_units=int(row[22]),
            effective_max_active=row[23],
        )
        for row in rows
    ]


def budgets_present(names: Sequence[str]) -> Operation[set[str]]:
    """Which of these budget names some namespace has declared (app.sync's warning)."""
    if not names:
        return set()
    rows = yield _sql.statement("budgets_present"), (list(names),)
    return {row[0] for row in rows}



def _backoff_states(rows: Sequence[Sequence[Any]]) -> list[BackoffState]:
    return [BackoffState(scope=row[0], name=row[1], key=row[2], until=row[3], by_job=row[4])
            for row in rows]


def list_backoffs() -> Operation[list[BackoffState]]:
    """The backoffs in force (docs/design.md "Back-pressure"), soonest end first."""
    rows = yield _sql.statement("list_backoffs"), ()
    return _backoff_states(rows)


def clear_backoff(
    scope: str, name: str, key: str | None = None
) -> Operation[list[BackoffState]]:
    """An operator's end of backoffs: scope "queue" clears the queue's own and its keys' (or key
    `key`'s only), scope "budget" the budget's; their queues' claimers are woken. Returns what
    was cleared (nothing, when none was in force)."""
    if scope not in ("queue", "budget"):
        raise InvalidOptionsError(
            f'clear_backoff: scope must be "queue" or "budget", got {scope!r}')
    check_name("queue" if scope == "queue" else "budget", name)
    if key is not None:
        if scope != "queue":
            raise InvalidOptionsError(
                "clear_backoff: a key names a key of a queue, not of a budget")
        check_name("key", key)
    rows = yield _sql.statement("clear_backoff"), (scope, name, key)
    return _backoff_states(rows)


# ---- holds (docs/design.md "Holds") ---------------------------------------------------------

MAX_HOLD_UNITS = 1_000_000
MAX_HOLD_LEASE = 86400.0


@dataclass(frozen=True, slots=True)
class HoldReply:
    """What one try to take a hold said: the hold's id and lease end when granted; else
    `retry_in`, the seconds until a clock allows it (None: only a release of units can)."""

    hold_id: int | None
    lease_until: datetime | None
    retry_in: float | None


def check_hold(budget: object, units: object, lease: object, key: object) -> None:
    """A hold's arguments, checked before anything is sent (InvalidOptionsError)."""
    check_name("budget", budget)
    if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= MAX_HOLD_UNITS:
        raise InvalidOptionsError(
            f"a hold takes 1 to {MAX_HOLD_UNITS} units (an int), got {shown(units)}")
    if (isinstance(lease, bool) or not isinstance(lease, int | float)
            or not 0 < lease <= MAX_HOLD_LEASE):
        raise InvalidOptionsError(
            f"a hold's lease must be more than 0 and at most a day, got {shown(lease)}")
    check_optional_name("key", key)


def hold_budget(
    budget: str, units: int, lease: float, key: str | None, holder: str, pid: int
) -> Operation[HoldReply]:
    """One try to take `units` of `budget` now (sql/budgets/hold_budget)."""
    check_hold(budget, units, lease, key)
    rows = yield _sql.statement("hold_budget"), (budget, units, float(lease), key, holder, pid)
    hold_id, lease_until, retry_in = rows[0]
    return HoldReply(hold_id, lease_until, retry_in)


def renew_holds(ids: Sequence[int], leases: Sequence[float]) -> Operation[dict[int, datetime]]:
    """Renew holds' leases; returns the renewed ones' new lease ends (a missing id is lost)."""
    rows = yield _sql.statement("renew_holds"), (list(ids), [float(x) for x in leases])
    return {row[0]: row[1] for row in rows}


def release_hold(hold_id: int) -> Operation[bool]:
    """End a hold; whether it was still held (its lease running)."""
    rows = yield _sql.statement("release_hold"), (hold_id,)
    return bool(rows[0][0])


def list_holds(budget: str | None = None) -> Operation[list[Hold]]:
    """The holds whose lease runs, every budget's or one's, oldest first."""
    check_optional_name("budget", budget)
    rows = yield _sql.statement("list_holds"), (budget, budget)
    return [Hold(id=row[0], budget=row[1], units=row[2], key=row[3], lease_until=row[4],
                 acquired_at=row[5], holder=row[6], pid=row[7]) for row in rows]
