"""The deadlines app: 20 ms jobs on a queue of 16 places, more work than fits before the
deadlines the test gives its jobs."""

from __future__ import annotations

import asyncio

import workhorse

app = workhorse.App("deadlines")


@app.task(queue="deadlines", max_active=16, max_attempts=1)
async def work(n: int) -> int:
    await asyncio.sleep(0.02)
    return n
