"""The app a real worker runs in test_durable_fleet.py (docs/design.md "Durable execution",
invariant 12): one queue, `du-fleet`, governed by `max_active=2`, and two tasks on it.

- `du.sleeper(n)` sleeps a minute durably (`step.sleep`): it suspends at once, and stays
  suspended all the test long.
- `du.work(n)` really works (an async sleep of 150 ms) and returns when it ran: its process id
  and time.time() as it starts and as it ends (the job's `result`).

Environment: WORKHORSE_DATABASE_URL.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from workhorse import App, current_job

QUEUE = "du-fleet"
MAX_ACTIVE = 2
SLEEP = 60  # seconds: longer than any test
WORK = 0.15  # seconds a working job works


def fleet_app(database_url: str | None = None) -> App:
    """The app; the test builds its own copy on the test's database to sync and enqueue."""
    app = App("du-fleet", database_url=database_url)
    queue = app.queue(QUEUE, max_active=MAX_ACTIVE)

    @app.task(name="du.sleeper", queue=queue)
    def sleeper(n: int) -> int:
        current_job().step.sleep("nap", SLEEP)
        return n

    @app.task(name="du.work", queue=queue)
    async def work(n: int) -> dict[str, Any]:
        start = time.time()
        await asyncio.sleep(WORK)
        return {"pid": os.getpid(), "start": start, "end": time.time()}

    return app


# What the worker runs (`_durable_app:app`), on the database WORKHORSE_DATABASE_URL names.
app = fleet_app()
