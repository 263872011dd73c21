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
