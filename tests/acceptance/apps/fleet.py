"""The fleet-budget app: one governed queue, max_active=5 and max_active_per_key=2."""

from __future__ import annotations

import asyncio

import workhorse

from . import probe

app = workhorse.App("fleet")

MAX_ACTIVE = 5
PER_KEY = 2
KEYS = 3


@app.task(queue="fleet", max_active=MAX_ACTIVE, max_active_per_key=PER_KEY,
          concurrency_key=lambda token, key: key)
async def governed(token: str, key: str) -> str:
    await probe.enter("queue", f"key:{key}")
    try:
        await probe.ran(token)
        await asyncio.sleep(0.02)
    finally:
        await probe.leave("queue", f"key:{key}")
    return token


# A FIFO queue with only a queue-wide limit: the claim's row walk, with no key heads.
@app.task(queue="fleet-fifo", max_active=MAX_ACTIVE)
async def fifo(token: str) -> str:
    await probe.enter("queue")
    try:
        await probe.ran(token)
        await asyncio.sleep(0.02)
    finally:
        await probe.leave("queue")
    return token
