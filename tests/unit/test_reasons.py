"""The reason codes' rules (workhorse/_reasons.py), without a database: the order, one code per
queue, the limit of 0, a budget's reasons on each of its queues. The causes on a real database
are in tests/integration/test_reason_codes.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workhorse._incident import Backlog
from workhorse._reasons import budget_reasons, queue_reasons
from workhorse.types import BudgetHealth, PolicyHealth, WorkerInfo

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _worker(queues: list[str], alive: bool = True) -> WorkerInfo:
    return WorkerInfo(id=1, app="app", host="host", pid=1, slots=1, queues=queues,
                      started_at=NOW, last_seen=NOW, stats={}, alive=alive)


def _policy(queue: str, **fields: object) -> PolicyHealth:
    values: dict[str, object] = dict(namespace="app", queue=queue, max_active=None,
                                     max_active_per_key=None, active=0, available=None,
                                     blocked_ready=0, saturated_keys=0, capped=False)
    values.update(fields)
    return PolicyHealth(**values)  # type: ignore[arg-type]


def test_codes_come_by_queue_then_in_the_sets_order_once_each() -> None:
    reasons = queue_reasons(
        backlog=[Backlog("b", True, 0, None, None, None, 3, 7),
                 Backlog("a", False, None, None, None, None, 1, 2)],
        policies=[_policy("b", max_active=0, blocked_ready=7, paused=True)],
        workers=[_worker(["x"], alive=False)], expired={"a": 1}, now=NOW)
    assert [(r.queue, r.code, r.count) for r in reasons] == [
        ("a", "no_worker", 2), ("a", "stalled", 1),
        ("b", "no_worker", 7), ("b", "feature_level", 7), ("b", "paused", 7),
        ("b", "at_limit", 7)]
    assert reasons[0].detail.startswith("no live supervisor: the last one was seen")


def test_a_limit_reached_holds_nothing_back_without_ready_work() -> None:
    full = _policy("q", max_active=2, active=2, available=0)
    assert queue_reasons(policies=[full], now=NOW) == []
    waiting = _policy("q", max_active=2, active=2, available=0, blocked_ready=4)
    assert [(r.code, r.count) for r in queue_reasons(policies=[waiting], now=NOW)] == [
        ("at_limit", 4)]


def test_rate_limited_is_the_queues_starts_first_then_its_keys() -> None:
    later = NOW + timedelta(seconds=30)
    both = _policy("q", blocked_ready=5, rate_limit="2/h", next_start_at=later,
                   rate_limited_keys=3, rate_limit_per_key="1/m")
    assert [(r.code, r.count) for r in queue_reasons(policies=[both], now=NOW)] == [
        ("rate_limited", 5)]
    keys = _policy("q", blocked_ready=5, next_start_at=NOW, rate_limited_keys=3,
                   rate_limit_per_key="1/m")
    assert [(r.code, r.count) for r in queue_reasons(policies=[keys], now=NOW)] == [
        ("rate_limited", 3)]


def test_a_budget_names_its_reason_on_itself_and_on_each_queue() -> None:
    budget = BudgetHealth("api", "ns", 2, None, None, None, 2, 9, ["x", "y"])
    assert [(r.code, r.count, r.queue) for r in budget_reasons(budget, NOW)] == [
        ("budget_full", 9, None)]
    reasons = queue_reasons(budgets=[budget], now=NOW)
    assert [(r.queue, r.code) for r in reasons] == [("x", "budget_full"), ("y", "budget_full")]
    idle = BudgetHealth("api", "ns", 2, None, None, None, 2, 0, ["x"])
    assert budget_reasons(idle, NOW) == []
