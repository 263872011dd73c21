"""Durable execution (docs/design.md "Durable execution"): a running job's steps, recorded under
its fence; its suspension at a sleep, a wait or its children; the signals sent to it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import _sql
from .._driver import Operation, encode_json
from ..errors import InvalidOptionsError, StaleLeaseError
from ..types import STEP_KINDS, JobStatus, Step, check_id, check_name, shown

# A step's or a signal's name, and a signal's idempotency key (docs/design.md "Signals").
STEP_NAME_MAX = 200
SIGNAL_KEY_MAX = 255
SUSPEND_REASONS = ("sleep", "signal", "children")


def check_step_name(name: object, what: str = "a step's name") -> str:
    """`name` when it is a str of 1 to 200 characters, else InvalidOptionsError.

    >>> check_step_name("charge")
    'charge'
    """
    if not isinstance(name, str) or not 1 <= len(name) <= STEP_NAME_MAX:
        raise InvalidOptionsError(
            f"{what} must be a str of 1 to {STEP_NAME_MAX} characters, got {shown(name)}")
    return check_name(what, name)  # no NUL, no lone surrogate: what PostgreSQL can store


def check_signal_key(key: object) -> str | None:
    if key is None:
        return None
    return check_name("a signal's key", key)  # 1-255 characters PostgreSQL can store


def job_steps(job_id: int) -> Operation[tuple[list[Step], datetime | None]]:
    """The job's steps, in the order it first reached them, and the database's clock."""
    rows = yield _sql.statement("job_steps"), (check_id(job_id),)
    steps = [Step(name=name, kind=kind, created_at=created, recorded_at=recorded,
                  wake_at=wake_at, signal=signal, result=result, error=error)
             for name, kind, created, recorded, wake_at, signal, result, error, _ in rows
             if name is not None]
    return steps, rows[0][-1] if rows else None


def job_children(job_id: int) -> Operation[dict[str, list[tuple[int, JobStatus, Any, Any]]]]:
    """A parent's children by step name: (id, status, result, error), in enqueue order."""
    rows = yield _sql.statement("job_children"), (check_id(job_id),)
    found: dict[str, list[tuple[int, JobStatus, Any, Any]]] = {}
    for step, child, status, result, error in rows:
        found.setdefault(step, []).append((child, JobStatus.of_row(status), result, error))
    return found


def record_step(
    job_id: int, fence: int, name: str, kind: str, result: Any = None,
    error: dict[str, Any] | None = None, *, encoded: str | None = None,
) -> Operation[None]:
    """Record a step's result (JSON; `encoded`: already JSON text) or its error under the job's
    fence. StaleLeaseError, and nothing written, when the fence is stale."""
    assert kind in STEP_KINDS
    text = encoded if encoded is not None else (
        None if error is not None else encode_json(result, f"step {name!r}'s result"))
    rows = yield _sql.statement("record_step"), (
        job_id, fence, name, kind, text,
        encode_json(error, "a step's error") if error is not None else None)
    if not rows or not rows[0][0]:
        raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; step {name!r} was not "
                              "recorded (another claim may own the job)")


def suspend(job_id: int, fence: int, name: str, kind: str, reason: str,
            wake_at: datetime | None, signal: str | None, retention: str) -> Operation[JobStatus]:
    """Suspend the running job at step `name` (see sql/durable/): its new status (`suspended`,
    `ready` when its cause had come already, `canceled`). StaleLeaseError when the fence is
    stale."""
    assert reason in SUSPEND_REASONS and kind in STEP_KINDS
    rows = yield _sql.statement("suspend"), (
        job_id, fence, name, kind, reason, wake_at, signal, retention)
    status = rows[0][0] if rows else None
    if status is None:
        raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the suspension at "
                              f"{name!r} was not recorded")
    return JobStatus.of_row(status)


def wait_signal(job_id: int, fence: int, name: str, signal: str) -> Operation[tuple[bool, Any]]:
    """Consume the oldest pending signal `signal` of the running job and record step `name` with
    its payload: (True, payload), or (False, None) when none is there. StaleLeaseError."""
    rows = yield _sql.statement("wait_signal"), (job_id, fence, name, signal)
    found, payload = rows[0] if rows else (None, None)
    if found is None:
        raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; the wait {name!r} took "
                              "no signal")
    return bool(found), payload


def adopt_children(job_id: int, fence: int, name: str, children: list[int]) -> Operation[None]:
    """The jobs just enqueued become the children of step `name` (StaleLeaseError: roll back)."""
    rows = yield _sql.statement("adopt_children"), (job_id, fence, name, children)
    if not rows or not rows[0][0]:
        raise StaleLeaseError(f"job {job_id}: fence {fence} is stale; its children were not "
                              "enqueued")


def signal(
    job_id: object, name: object, payload: Any = None, key: object = None
) -> Operation[bool]:
    """Send signal `name` to a job (docs/design.md "Signals"): True when stored, False when its
    `key` was already delivered to that job and name. InvalidOptionsError for bad input, an
    unknown job or a finished one; nothing is written then."""
    job = check_id(job_id)
    signal_name = check_step_name(name, "a signal's name")
    signal_key = check_signal_key(key)
    text = encode_json(payload, "a signal's payload")
    rows = yield _sql.statement("signal"), (job, signal_name, text, signal_key)
    return bool(rows) and rows[0][0] == "delivered"
