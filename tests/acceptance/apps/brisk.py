"""The prefetch app: short jobs, on an ungoverned queue and on a governed one."""

from __future__ import annotations

import asyncio

import workhorse

app = workhorse.App("brisk")


@app.task(queue="brisk")
async def tick(n: int) -> int:
    await asyncio.sleep(0.002)
    return n


@app.task(queue="brisk-governed", max_active=50)
async def governed_tick(n: int) -> int:
    await asyncio.sleep(0.002)
    return n
