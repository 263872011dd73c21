"""Per-key limits as data (docs/design.md "Per-key limits"): a queue's limits per key and the
default for the keys not listed, stored beside its policy (sql/policies/, the set and clear
functions) and read by the claim one key at a time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import _sql
from .._driver import Operation, Rows
from ..errors import InvalidPolicyError
from ..types import (
    KeyLimit,
    KeyLimitSet,
    SyncReport,
    check_key_limits,
    check_name,
    rate_text,
)


def _report(rows: Rows) -> SyncReport:
    report = SyncReport()
    for action, key in rows:
        getattr(report, action).append(key)
    return report


def _owner(namespace: str | None) -> str | None:
    return None if namespace is None else check_name("namespace", namespace, InvalidPolicyError)


def set_key_limits(
    namespace: str | None,
    queue: str,
    limits: Mapping[Any, KeyLimit],
    default: KeyLimit | None = None,
    prune: bool = True,
) -> Operation[SyncReport]:
    """Store `queue`'s key limits: the listed keys' rows, with `prune` the other keys' deleted
    and `default` written (None: no default); without `prune`, `default` is written only when
    given. Returns the keys created, updated, unchanged and pruned ('' stands for the set and its
    default: created with the set, updated when the default changed). `namespace` None: the
    namespace that owns the queue's policy (an operator's change)."""
    checked = check_key_limits(queue, limits, default)
    owner = _owner(namespace)
    rates = [limit.rate for limit in checked.values()]
    default_rate = None if default is None else default.rate
    rows = yield _sql.statement("set_key_limits"), {
        "namespace": owner, "queue": queue, "keys": list(checked),
        "max_active": [limit.max_active for limit in checked.values()],
        "weights": [limit.weight for limit in checked.values()],
        "rate_limits": [r.n if r else None for r in rates],
        "rate_periods": [r.period if r else None for r in rates],
        "prune": bool(prune), "set_default": bool(prune) or default is not None,
        "default_max_active": None if default is None else default.max_active,
        "default_weight": None if default is None else default.weight,
        "default_rate_limit": None if default_rate is None else default_rate.n,
        "default_rate_period": None if default_rate is None else default_rate.period,
    }
    return _report(rows)


def clear_key_limits(
    namespace: str | None, queue: str, keys: Iterable[Any] | None = None
) -> Operation[SyncReport]:
    """Delete the rows of `keys` (None: the queue's whole set, its default with it); returns
    them as pruned ('' for the set itself)."""
    check_name("queue", queue, InvalidPolicyError)
    owner = _owner(namespace)
    wanted = None
    if keys is not None:
        if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
            raise InvalidPolicyError(f"keys must be a list of keys, got {keys!r}")
        wanted = list(check_key_limits(queue, {key: KeyLimit(weight=1) for key in keys}, None))
    rows = yield _sql.statement("clear_key_limits"), {
        "namespace": owner, "queue": queue, "keys": wanted}
    return _report(rows)


def _limit(max_active: int | None, weight: int | None, n: int | None,
           period: float | None) -> KeyLimit | None:
    if max_active is None and weight is None and n is None:
        return None
    return KeyLimit(max_active=max_active, weight=weight, rate_limit=rate_text(n, period))


def key_limits(
    queue: str, *, key: str | None = None, after: str = "", limit: int | None = None
) -> Operation[KeyLimitSet | None]:
    """`queue`'s key limit set (None when it has none): its default and its keys' limits in key
    order (only `key`'s when given; keys after `after`, at most `limit` of them)."""
    check_name("queue", queue, InvalidPolicyError)
    if key is not None:
        check_key_limits(queue, {key: KeyLimit(weight=1)}, None)
        key = str(key)
    if limit is not None and (type(limit) is not int or limit < 1):
        raise InvalidPolicyError(f"limit must be a positive int, got {limit!r}")
    rows = yield _sql.statement("list_key_limits"), {
        "queue": queue, "key": key, "after": str(after), "limit": limit}
    head = [row for row in rows if row[1] is None]
    if not head:
        return None
    namespace, _, max_active, weight, n, period, updated_at = head[0]
    return KeyLimitSet(
        queue=queue, namespace=namespace, default=_limit(max_active, weight, n, period),
        limits={row[1]: _limit(*row[2:6]) or KeyLimit(weight=1)
                for row in rows if row[1] is not None},
        updated_at=updated_at)


def sync_key_limits(
    namespace: str,
    declared: Mapping[str, tuple[Mapping[Any, KeyLimit], KeyLimit | None]],
    prune: bool,
) -> Operation[SyncReport]:
    """An app's declared key limits, queue by queue (App.key_limits): each queue's set made equal
    to its declaration; with `prune`, the sets of the namespace's other queues deleted. Reports
    queues: updated (a key or the default changed), unchanged or pruned."""
    check_name("namespace", namespace, InvalidPolicyError)
    report = SyncReport()
    for queue in sorted(declared):  # the queues' locks in one order (as every sync takes them)
        limits, default = declared[queue]
        keys = yield from set_key_limits(namespace, queue, limits, default, True)
        changed = keys.created or keys.updated or keys.pruned
        (report.updated if changed else report.unchanged).append(queue)
    if prune:
        rows = yield _sql.statement("key_limit_queues"), {"namespace": namespace}
        for (queue,) in rows:
            if queue not in declared:
                yield from clear_key_limits(namespace, queue)
                report.pruned.append(queue)
    return report

