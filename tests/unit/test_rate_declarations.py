"""Rate limits as declared: spellings, normalisation, bounds, and conflicts between declarations
(all pure logic: nothing here touches a database)."""

from __future__ import annotations

from typing import Any

import pytest

from workhorse import App, ConcurrencyPolicyDefinition, InvalidPolicyError, QueueSpec
from workhorse.types import RateLimit


@pytest.mark.parametrize("spec, text", [
    ("100/m", "100/m"), ("100/60s", "100/m"), ("5/10s", "5/10s"), ("1/1h", "1/h"),
    ("3/86400", "3/d"), ("7/500ms", "7/0.5s"), ("2/ 1.5h", "2/5400s"),
])
def test_rate_limits_normalise_to_one_spelling(spec: str, text: str) -> None:
    assert str(RateLimit.parse(spec)) == text
    assert ConcurrencyPolicyDefinition("q", rate_limit=spec).rate_limit == text
    assert QueueSpec("q", rate_limit=spec).rate_limit == text


@pytest.mark.parametrize("spec", [
    "0/s", "10/0s", "ten/m", "5/-1s", "2000000/s", "1/367d", "5", "/m", "", [], 3.5,
])
def test_bad_rate_limits(spec: Any) -> None:
    with pytest.raises(InvalidPolicyError):
        RateLimit.parse(spec)
    with pytest.raises(InvalidPolicyError):
        ConcurrencyPolicyDefinition("q", rate_limit_per_key=spec)
    app = App("billing")
    with pytest.raises(InvalidPolicyError):
        app.task(name="t", rate_limit=spec)(lambda: None)
    with pytest.raises(InvalidPolicyError):
        app.queue("q", rate_limit=spec)
    assert app.tasks == {} and app.queues == {}


def test_a_policy_may_have_rate_limits_and_no_concurrency_limit() -> None:
    definition = ConcurrencyPolicyDefinition("api", rate_limit="500/m")
    assert (definition.max_active, definition.max_active_per_key) == (None, None)
    assert definition.rate == RateLimit(500, 60.0) and definition.rate_per_key is None
    with pytest.raises(InvalidPolicyError, match="needs"):
        ConcurrencyPolicyDefinition("api")


@pytest.mark.parametrize(("first", "second"), [
    ({"rate_limit": "10/s"}, {"rate_limit": "11/s"}),
    ({"rate_limit": "10/s"}, {"rate_limit": "10/s", "rate_limit_per_key": "1/s"}),
    ({"max_active": 4, "rate_limit": "10/s"}, {"max_active": 4}),
])
def test_two_declarations_that_disagree_on_a_rate_limit_conflict(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    app = App("billing")
    app.task(name="a", queue="mail", **first)(lambda: None)
    with pytest.raises(InvalidPolicyError, match="mail"):
        app.task(name="b", queue="mail", **second)(lambda: None)
    with pytest.raises(InvalidPolicyError):
        app.queue("mail", **second)
    assert list(app.tasks) == ["a"]


def test_equal_rate_limits_spelled_differently_agree() -> None:
    app = App("billing")
    app.task(name="a", queue="mail", rate_limit="60/m")(lambda: None)
    app.task(name="b", queue="mail", rate_limit="60/60s")(lambda: None)
    [definition] = app.policy_definitions()
    assert definition == ConcurrencyPolicyDefinition("mail", rate_limit="60/m")


def test_rate_limits_reach_the_policy_definitions() -> None:
    app = App("billing")
    api = app.queue("openai-api", max_active=5, rate_limit="500/m")
    app.task(name="summarize", queue=api)(lambda: None)
    app.task(name="send", queue="mail", max_active=20, rate_limit="100/m",
             rate_limit_per_key="10/m", concurrency_key=lambda m: m["tenant"])(lambda m: None)
    assert {d.queue: (d.max_active, d.rate_limit, d.rate_limit_per_key)
            for d in app.policy_definitions()} == {
        "openai-api": (5, "500/m", None), "mail": (20, "100/m", "10/m"),
    }
