"""The rate-limit app: a queue limited to 20 starts a second, and 6 a second per key."""

from __future__ import annotations

import workhorse

app = workhorse.App("rated")

RATE, PER_KEY, KEYS = 20, 6, 4


@app.task(queue="rated", rate_limit=f"{RATE}/s", rate_limit_per_key=f"{PER_KEY}/s",
          concurrency_key=lambda token, key: key)
async def call_api(token: str, key: str) -> str:
    return token
