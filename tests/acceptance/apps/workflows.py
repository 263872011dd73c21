"""The workflows fleet app (issue #28): a governed queue (max_active=5) whose members record
their overlap in the probe, and a chord callback on the same queue."""

from __future__ import annotations

import asyncio

import workhorse

from . import probe

app = workhorse.App("workflows")

MAX_ACTIVE = 5


@app.task(queue="wf-fleet", max_active=MAX_ACTIVE)
async def member(token: str) -> str:
    await probe.enter("queue")
    try:
        await probe.ran(token)
        await asyncio.sleep(0.01)
    finally:
        await probe.leave("queue")
    return token


@app.task(queue="wf-fleet", max_active=MAX_ACTIVE)
async def join(tokens: list[str]) -> int:
    await probe.enter("queue")
    try:
        await probe.ran("join")
    finally:
        await probe.leave("queue")
    return len(tokens)


# ---- budgets on released members: fair share and a rate limit ---------------------------------

FAIR_MAX = 4
SECONDS = 0.2  # one fair member's duration: long beside a claim on a busy 2-core machine
RATE, PERIOD = 5, 2.0

FAIR_SCHEMA = """
CREATE TABLE wf_fair_runs (
    token text PRIMARY KEY, key text NOT NULL, cost integer NOT NULL,
    started timestamptz NOT NULL, ended timestamptz);
"""


async def _record(token: str, key: str) -> None:
    c = await probe.aconn()
    await c.execute("INSERT INTO wf_fair_runs (token, key, cost, started) "
                    "VALUES (%s, %s, 1, clock_timestamp())", (token, key))
    try:
        await asyncio.sleep(SECONDS)
    finally:
        await c.execute("UPDATE wf_fair_runs SET ended = clock_timestamp() WHERE token = %s",
                        (token,))


@app.task(queue="wf-fair", max_active=FAIR_MAX, fairness="key",
          concurrency_key=lambda token, key: key)
async def fair_member(token: str, key: str) -> None:
    await _record(token, key)


# The broken variant's queue: the same budget without fairness (FIFO across keys).
@app.task(queue="wf-fifo", max_active=FAIR_MAX, concurrency_key=lambda token, key: key)
async def fifo_member(token: str, key: str) -> None:
    await _record(token, key)


@app.task(queue="wf-rated", rate_limit=f"{RATE}/{PERIOD:g}s")
async def rated_member(token: str) -> str:
    return token


# The broken variant's queue: no rate limit.
@app.task(queue="wf-free")
async def free_member(token: str) -> str:
    return token


@app.task(queue="wf-head")
async def head(token: str) -> str:
    return token


@app.task(queue="wf-head")
async def collect(results: list[object]) -> int:
    return len(results)
