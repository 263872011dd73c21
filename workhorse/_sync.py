"""App.sync's plans: one database's declarations pushed under the app's namespace in one
transaction (policies, key limits, schedules, budgets), and the sum of several databases'
reports (docs/design.md "Several databases")."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from . import _ops, database
from ._enqueue import Plan
from .types import (
    BudgetDefinition,
    ConcurrencyPolicyDefinition,
    KeyLimit,
    ScheduleDefinition,
    SyncReport,
)


def sync_plan(
    namespace: str, definitions: list[ConcurrencyPolicyDefinition],
    schedules: list[ScheduleDefinition], prune: bool,
    budgets: list[BudgetDefinition] | None = None, named: list[str] | None = None,
    key_limits: dict[str, tuple[dict[str, KeyLimit], KeyLimit | None]] | None = None,
) -> Plan[SyncReport]:
    # Queues' locks (policies, then their key limits, which need the policies) before budgets'
    # locks: the order every claim takes them in.
    report, _ = yield _ops.sync_policies(namespace, definitions, prune)
    keyed = yield _ops.sync_key_limits(namespace, key_limits or {}, prune)
    scheduled, _ = yield _ops.sync_schedules(namespace, schedules, prune)
    budgeted, _ = yield _ops.sync_budgets(namespace, budgets or [], prune)
    if named:
        declared = yield _ops.budgets_present(named)
        missing = [name for name in named if name not in declared]
        if missing:
            warnings.warn(
                f"app {namespace!r} names budget(s) {', '.join(map(repr, missing))} that no "
                "namespace declares: their jobs are limited by their queues alone until one "
                "syncs them (app.budget(...) in the owning app)",
                UndeclaredBudgetWarning, stacklevel=2)
    report = _with_nested(_with_nested(report, "schedules", scheduled), "budgets", budgeted)
    return _with_nested(report, "key_limits", keyed)


class UndeclaredBudgetWarning(UserWarning):
    """`app.sync()` found budgets that the app's tasks name and no namespace declares
    (docs/design.md "Named budgets": such jobs are limited by their queue alone).

    >>> with warnings.catch_warnings(record=True) as caught:  # doctest: +SKIP
    ...     app.sync()
    >>> caught[0].category.__name__                            # doctest: +SKIP
    'UndeclaredBudgetWarning'
    """


def summed_reports(reports: list[SyncReport]) -> SyncReport:
    """One report of several databases' syncs: each list joined, nested ones likewise."""
    if len(reports) == 1:
        return reports[0]
    total = reports[0]
    for report in reports[1:]:
        changes: dict[str, Any] = {
            change: [*getattr(total, change), *getattr(report, change)]
            for change in ("created", "updated", "pruned", "unchanged")}
        for field in ("schedules", "budgets", "key_limits"):
            mine, theirs = getattr(total, field), getattr(report, field)
            if mine is None or theirs is None:
                changes[field] = mine if theirs is None else theirs
            else:
                changes[field] = summed_reports([mine, theirs])
        total = dataclasses.replace(total, **changes)
    return total


def _with_nested(report: SyncReport, field: str, nested: SyncReport) -> SyncReport:
    """The policies' report, with a nested one (schedules', budgets') set in `field`; left None
    when it touched nothing at all."""
    if not (nested.created or nested.updated or nested.pruned or nested.unchanged):
        return report
    nested_reports: dict[str, Any] = {field: nested}
    return dataclasses.replace(report, **nested_reports)


def _with_schedules(report: SyncReport, scheduled: SyncReport) -> SyncReport:
    """The policies' report, with the schedules' nested (None when there were none at all)."""
    return _with_nested(report, "schedules", scheduled)


def reachable(urls: list[str]) -> None:
    """DatabaseError unless every one of these databases answers: a sync of several commits
    database by database, and a queue moved between two must not be pruned from the old one
    when the new one cannot take its policy."""
    for url in urls:
        database.connect(url, role="sync", connect_timeout=10).close()

