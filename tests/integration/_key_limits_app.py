"""The app real workers run in test_key_limits_fleet.py: one queue governed by per-key limits as
data (docs/design.md "Per-key limits"): 50 premium keys of their own limit 3, every other key the
set's default 1, under a policy whose `max_active_per_key` (5) neither of them is, so that a claim
that ignored the rows or the default would show. The handler only sleeps (and returns its
process id): the jobs' rows
(`started_at` stamped by the claim under the queue's lock, `finished_at` by the outcome) are the
record the checker reads.

Environment: WORKHORSE_DATABASE_URL.
"""

from __future__ import annotations

import asyncio
import os
import random

import workhorse
from workhorse import KeyLimit

QUEUE = "kl-fleet"
PREMIUM = [f"p{i:03}" for i in range(50)]
PREMIUM_LIMIT = 3
DEFAULT_LIMIT = 1

app = workhorse.App("kl-fleet")
tiers = app.queue(QUEUE, max_active=1000, max_active_per_key=5)
app.key_limits(tiers, {key: KeyLimit(max_active=PREMIUM_LIMIT) for key in PREMIUM},
               default=KeyLimit(max_active=DEFAULT_LIMIT))


@app.task(queue=tiers, concurrency_key=lambda n, key: key)
async def work(n: int, key: str) -> int:
    """Works 5-30 ms; returns its process (the test sees every supervisor's slot ran jobs)."""
    await asyncio.sleep(random.uniform(0.005, 0.03))
    return os.getpid()
