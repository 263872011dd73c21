"""Fixtures shared by the database-layer tests: they all run against a real PostgreSQL."""

from __future__ import annotations

import pytest

from workhorse import ConcurrencyPolicyDefinition, Queue

# The three admission paths a claim can take; tests of ordering and leases run on each.
POLICIES: dict[str, ConcurrencyPolicyDefinition | None] = {
    "ungoverned": None,
    "max_active": ConcurrencyPolicyDefinition("q", max_active=1000),
    "per_key": ConcurrencyPolicyDefinition("q", max_active=None, max_active_per_key=1000),
}


@pytest.fixture(params=list(POLICIES))
def path_queue(request: pytest.FixtureRequest, queue: Queue) -> Queue:
    """`queue`, with queue "q" set up for one admission path (no policy, max_active, per-key)."""
    policy = POLICIES[request.param]
    if policy is not None:
        queue.sync_concurrency_policies("paths", [policy])
    return queue
