"""The reason codes' rules (workhorse/_reasons.py), without a database: the order, one code per
queue, the limit of 0, a budget's reasons on each of its queues. The causes on a real database
are in tests/integration/test_reason_codes.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workhorse._incident import Backlog
from workhorse._reasons import budget_reasons, queue_reasons
from workhorse.types import BackoffState, BudgetHealth, PolicyHealth, WorkerInfo

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


def test_backed_off_while_in_force_and_holding_ready_work_back() -> None:
    later = NOW + timedelta(seconds=30)
    own = _policy("q", blocked_ready=4, backed_off_ready=4, backed_off_until=later,
                  backed_off_by=7)
    (reason,) = queue_reasons(policies=[own], now=NOW)
    assert (reason.code, reason.count) == ("backed_off", 4)
    assert reason.detail == "backed off until 12:00:30 UTC by job 7 (scope queue; 30.0 s left)"
    # Ended (the read's clock is past it), or nothing ready behind it: no code.
    assert queue_reasons(policies=[own], now=later) == []
    idle = _policy("q", backed_off_until=later, backed_off_by=7)
    assert queue_reasons(policies=[idle], now=NOW) == []


def test_a_queue_backoff_hides_the_limits_a_key_backoff_does_not() -> None:
    later = NOW + timedelta(seconds=30)
    full = dict(max_active=2, active=2, available=0, blocked_ready=5)
    own = _policy("q", **full, backed_off_ready=5, backed_off_until=later)
    assert [r.code for r in queue_reasons(policies=[own], now=NOW)] == ["backed_off"]
    keys = [BackoffState("key", "q", "a", later, 3),
            BackoffState("key", "q", "b", later + timedelta(seconds=5), 4)]
    keyed = _policy("q", **full, backed_off_ready=2, backed_off_keys=keys)
    reasons = queue_reasons(policies=[keyed], now=NOW)
    assert [(r.code, r.count) for r in reasons] == [("at_limit", 5), ("backed_off", 2)]
    assert reasons[1].detail.startswith(
        "backed off until 12:00:30 UTC by job 3 (scope key a, and 1 more keys;")
    paused = _policy("q", **full, paused=True, backed_off_ready=5, backed_off_until=later)
    assert [r.code for r in queue_reasons(policies=[paused], now=NOW)] == [
        "paused", "backed_off"]


def test_a_budget_backed_off_says_so_instead_of_full() -> None:
    later = NOW + timedelta(seconds=30)
    budget = BudgetHealth("api", "ns", 2, None, None, None, 2, 9, ["x", "y"],
                          backed_off_until=later, backed_off_by=11)
    (reason,) = budget_reasons(budget, NOW)
    assert (reason.code, reason.count, reason.queue) == ("backed_off", 9, None)
    assert "by job 11 (scope budget api;" in reason.detail
    assert [(r.queue, r.code, r.count) for r in queue_reasons(budgets=[budget], now=NOW)] == [
        ("x", "backed_off", 9), ("y", "backed_off", 9)]
    # Once it ends, the budget is what it is: full.
    assert [r.code for r in budget_reasons(budget, later)] == ["budget_full"]
