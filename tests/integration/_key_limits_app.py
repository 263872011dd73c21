"""The apps real workers run in test_key_limits_fleet.py, each one queue governed by per-key limits
as data (docs/design.md "Per-key limits"):

- `fleet` (queue kl-fleet): 50 premium keys of their own limit 3, every other key the set's default
  1, under a policy whose `max_active_per_key` (5) neither of them is, so that a claim that
  ignored the rows or the default would show.
- `tiers` (queue kl-tiers): 20 premium keys of their own limit 10, every other key the set's
  default 1, under a policy whose `max_active_per_key` is 3; the test promotes one free key to 4
  while the fleet runs.

The handlers only sleep, and return when they really ran: their process id and time.time() as
they start and as they end (the jobs' `result`). The jobs' rows also hold `started_at` (stamped
by the claim under the queue's lock) and `finished_at` (by the outcome), by the database's clock.

Environment: WORKHORSE_DATABASE_URL.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

from workhorse import App, KeyLimit

QUEUE = "kl-fleet"
PREMIUM = [f"p{i:03}" for i in range(50)]
PREMIUM_LIMIT = 3
DEFAULT_LIMIT = 1

TIERS_QUEUE = "kl-tiers"
TIERS_PREMIUM = [f"p{i:02}" for i in range(20)]
TIERS_PREMIUM_LIMIT = 10
TIERS_DEFAULT_LIMIT = 1
TIERS_POLICY_PER_KEY = 3
PROMOTED = "f000"  # a free key the test raises to PROMOTED_LIMIT while the fleet runs
PROMOTED_LIMIT = 4


async def _run(low: float, high: float) -> dict[str, Any]:
    start = time.time()
    await asyncio.sleep(random.uniform(low, high))
    return {"pid": os.getpid(), "start": start, "end": time.time()}


def fleet_app(database_url: str | None = None) -> App:
    """The 1,000-key app; its task `kl.work(n, key)` works 5-30 ms. The test builds its own
    copy on the test's database (the same namespace and declarations) to sync and enqueue."""
    app = App("kl-fleet", database_url=database_url)
    queue = app.queue(QUEUE, max_active=1000, max_active_per_key=5)
    app.key_limits(queue, {key: KeyLimit(max_active=PREMIUM_LIMIT) for key in PREMIUM},
                   default=KeyLimit(max_active=DEFAULT_LIMIT))

    @app.task(name="kl.work", queue=queue, concurrency_key=lambda n, key: key)
    async def work(n: int, key: str) -> dict[str, Any]:
        return await _run(0.005, 0.03)

    return app


def tiers_app(database_url: str | None = None) -> App:
    """The premium and free app; its task `kl.tier(n, key)` works 10-30 ms."""
    app = App("kl-tiers", database_url=database_url)
    queue = app.queue(TIERS_QUEUE, max_active=10_000, max_active_per_key=TIERS_POLICY_PER_KEY)
    app.key_limits(queue,
                   {key: KeyLimit(max_active=TIERS_PREMIUM_LIMIT) for key in TIERS_PREMIUM},
                   default=KeyLimit(max_active=TIERS_DEFAULT_LIMIT))

    @app.task(name="kl.tier", queue=queue, concurrency_key=lambda n, key: key)
    async def tier(n: int, key: str) -> dict[str, Any]:
        return await _run(0.01, 0.03)

    return app


# What the supervisors run (`_key_limits_app:fleet` and `_key_limits_app:tiers`), on the
# database WORKHORSE_DATABASE_URL names.
fleet = fleet_app()
tiers = tiers_app()
