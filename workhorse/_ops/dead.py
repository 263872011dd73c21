"""Dead letters (docs/design.md "Dead letters"): the jobs that ended failed or held, listed,
redriven at a pace and purged, each redrive and purge written to the audit log."""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from .. import _sql
from .._driver import Operation
from ..errors import InvalidOptionsError, InvalidPolicyError
from ..types import (
    AuditEntry,
    Job,
    PurgeReport,
    RateLimit,
    RedriveReport,
    check_count,
    check_optional_name,
    shown,
)
from .history import history_moment
from .jobs import check_tag, job_from_row, job_id_list, with_progress

# A reason is free text for the audit log: a sentence, not an essay.
REASON_MAX = 1000


def os_user() -> str | None:
    """The operating-system user this process runs as (for the audit log), or None."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a bare container)
        return os.environ.get("USER") or None


def dead_filters(queue: str | None = None, task: str | None = None, tag: str | None = None,
                 error_type: str | None = None, since: object = None,
                 ids: Iterable[int] | None = None) -> dict[str, Any]:
    """The filters, checked (InvalidOptionsError), as the statements take them. `since` is an
    aware datetime, or a duration (seconds, "2h", a timedelta): finished that long ago or less
    (or a date or ISO 8601 text, as `history_moment` reads them).

    >>> dead_filters(queue="mail", since=60)["queue"]
    'mail'
    """
    check_optional_name("queue", queue)
    check_optional_name("task", task)
    check_optional_name("error_type", error_type)
    # The export's bounds (docs/design.md "History") take the same forms, and dates too.
    moment = None if since is None else history_moment("since", since)
    return {"queue": queue, "task": task, "tag": None if tag is None else check_tag(tag),
            "error_type": error_type, "since": moment,
            "ids": None if ids is None else job_id_list(ids)}


def _audit_filters(filters: dict[str, Any], **more: Any) -> str:
    """The filters a redrive or purge was given, as its audit row keeps them (JSON)."""
    shown_filters = {key: value.isoformat() if isinstance(value, datetime) else value
                     for key, value in {**filters, **more}.items() if value is not None}
    return json.dumps(shown_filters, ensure_ascii=False)


def _reason(reason: object, required: bool) -> str | None:
    if reason is None:
        if required:
            raise InvalidOptionsError("a purge needs a reason (it is written to the audit log)")
        return None
    if not isinstance(reason, str) or not 1 <= len(reason) <= REASON_MAX or "\x00" in reason:
        raise InvalidOptionsError(
            f"reason must be a string of 1-{REASON_MAX} characters, got {shown(reason)}")
    return reason


def list_dead(*, limit: int = 50, **filters: Any) -> Operation[list[Job]]:
    """The dead letters, newest first, at most `limit` (1-10,000)."""
    chosen = dead_filters(**filters)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidOptionsError(f"limit must be an int in [1, 10000], got {limit!r}")
    chosen.pop("ids")
    rows = yield _sql.statement("list_dead"), {**chosen, "limit": limit}
    return (yield from with_progress([job_from_row(row) for row in rows]))


def redrive(*, dry_run: bool = False, rate: str | RateLimit | None = None,
            reason: str | None = None, **filters: Any) -> Operation[RedriveReport]:
    """Redrive the dead letters the filters select (or say which, when, with `dry_run`)."""
    chosen = dead_filters(**filters)
    if not isinstance(dry_run, bool):
        raise InvalidOptionsError(f"dry_run must be a bool, got {shown(dry_run)}")
    pace: RateLimit | None
    try:
        pace = None if rate is None else (
            rate if isinstance(rate, RateLimit) else RateLimit.parse(rate, "rate"))
    except InvalidPolicyError as exc:
        raise InvalidOptionsError(str(exc)) from None
    why = _reason(reason, required=False)
    rows = yield _sql.statement("redrive"), {
        **chosen, "rate_n": None if pace is None else pace.n,
        "rate_period": None if pace is None else pace.period, "dry_run": dry_run,
        "os_user": os_user(), "reason": why,
        "filters": _audit_filters(chosen, rate=None if pace is None else str(pace)),
    }
    return RedriveReport(dry_run=dry_run, jobs=[row[0] for row in rows],
                         queues=[row[1] for row in rows], releases=[row[2] for row in rows],
                         audit_id=rows[0][3] if rows else None)


def purge(*, dry_run: bool = False, reason: str | None = None,
          **filters: Any) -> Operation[PurgeReport]:
    """Delete the dead letters the filters select (or say which, with `dry_run`); a real purge
    needs a reason."""
    chosen = dead_filters(**filters)
    if not isinstance(dry_run, bool):
        raise InvalidOptionsError(f"dry_run must be a bool, got {shown(dry_run)}")
    why = _reason(reason, required=not dry_run)
    rows = yield _sql.statement("purge_dead"), {
        **chosen, "dry_run": dry_run, "os_user": os_user(), "reason": why,
        "filters": _audit_filters(chosen),
    }
    return PurgeReport(dry_run=dry_run, jobs=[row[0] for row in rows],
                       audit_id=rows[0][1] if rows else None)


AUDIT_ACTIONS = ("redrive", "purge")


def audit_log(limit: int = 50, action: str | None = None) -> Operation[list[AuditEntry]]:
    """The audit log, newest first."""
    check_count(limit, "limit")
    if action is not None and action not in AUDIT_ACTIONS:
        raise InvalidOptionsError(
            f"action must be one of {', '.join(AUDIT_ACTIONS)}, got {shown(action)}")
    rows = yield _sql.statement("audit_log"), {"limit": limit, "action": action}
    return [AuditEntry(id=row[0], at=row[1], action=row[2], os_user=row[3],
                       application_name=row[4], db_user=row[5], filters=row[6] or {},
                       count=row[7], job_ids=list(row[8] or []), reason=row[9])
            for row in rows]
