"""The fair-share app: one queue of max_active=8 shared by key (fairness="key"), jobs of a
given cost; each handler records its key, cost and the database-clock times it ran."""

from __future__ import annotations

import asyncio

import workhorse

from . import probe

app = workhorse.App("fair-share")

MAX_ACTIVE = 8
SECONDS = 0.2  # one job's duration: long beside a claim on a busy 2-core machine

SCHEMA = """
CREATE TABLE fair_runs (
    token text PRIMARY KEY, key text NOT NULL, cost integer NOT NULL,
    started timestamptz NOT NULL, ended timestamptz);
"""


@app.task(queue="fair", max_active=MAX_ACTIVE, fairness="key",
          concurrency_key=lambda token, key, cost=1: key,
          cost=lambda token, key, cost=1: cost)
async def work(token: str, key: str, cost: int = 1) -> None:
    c = await probe.aconn()
    await c.execute("INSERT INTO fair_runs (token, key, cost, started) "
                    "VALUES (%s, %s, %s, clock_timestamp())", (token, key, cost))
    try:
        await asyncio.sleep(SECONDS)
    finally:
        await c.execute("UPDATE fair_runs SET ended = clock_timestamp() WHERE token = %s",
                        (token,))
