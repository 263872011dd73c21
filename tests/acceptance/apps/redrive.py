"""The dead-letter app: a rate-limited queue whose dead jobs are redriven at its pace, and an
unlimited one (the broken variant: a redrive with no pace there is a stampede)."""

from __future__ import annotations

import workhorse

app = workhorse.App("redrive")

RATE = 1000  # starts a second on the limited queue


@app.task(queue="redrive-limited", rate_limit=f"{RATE}/s", max_attempts=1)
async def limited(n: int) -> int:
    return n


@app.task(queue="redrive-free", max_attempts=1)
async def free(n: int) -> int:
    return n
