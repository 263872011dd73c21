"""The named-budget fleet, queue A: the app that declares (and syncs) the shared budgets.

Its task, on queue `nb-a`, names the budget `cap3` (max_active=3) through its spec; the call
site names another for the rate tests. The handler records its own (queue, start, end) with
`time.time()` in `budget_spans` (see `record`)."""

from __future__ import annotations

import asyncio
import os
import time

import workhorse

from . import probe

app = workhorse.App("nb-owner")

MAX_ACTIVE = 3
RATE, PERIOD, BURST = 20, 2.0, 5
cap3 = app.budget("cap3", max_active=MAX_ACTIVE)
paced = app.budget("paced", rate_limit=f"{RATE}/2s")
bursty = app.budget("bursty", rate_limit=f"{RATE}/2s", rate_burst=BURST)

SCHEMA = """
CREATE TABLE budget_spans (
    queue text NOT NULL, token text NOT NULL, pid integer NOT NULL,
    started float8 NOT NULL, ended float8 NOT NULL);
"""


async def record(queue: str, token: str, seconds: float) -> str:
    """The handler's body: sleep `seconds`, then store when it started and ended."""
    started = time.time()
    await asyncio.sleep(seconds)
    ended = time.time()
    c = await probe.aconn()
    await c.execute(
        "INSERT INTO budget_spans (queue, token, pid, started, ended) VALUES (%s, %s, %s, %s, %s)",
        (queue, token, os.getpid(), started, ended))
    return token


@app.task(queue="nb-a", budget=cap3)
async def work_a(token: str, seconds: float) -> str:
    return await record("nb-a", token, seconds)
