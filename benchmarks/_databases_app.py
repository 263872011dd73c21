"""The app of bench_databases.py: `python -m workhorse worker _databases_app:app --queues ...`
with WORKHORSE_DATABASES naming `default` (the first server) and `two` (the second).

Each kind of backlog has a queue on each database: the `...-1` queues live in `default`, the
`...-2` ones are placed in `two`, so one worker command serving both forks one database
supervisor a database. The tasks declare no policy: the benchmark syncs each queue's own
(`Queue.sync_concurrency_policies`), and enqueues with an explicit queue. The timed handler
returns `[start, end]` (`time.time()`) so that the handlers' real overlap can be rebuilt from the
job rows.
"""

from __future__ import annotations

import asyncio
import time

from workhorse import App

SECOND = "two"
NOOP = "databases.noop"
SLEEP = "databases.sleep"
# kind -> (the queue in `default`, the queue in `two`)
QUEUES = {"noop": ("databases-noop-1", "databases-noop-2"),
          "sleep": ("databases-sleep-1", "databases-sleep-2")}

app = App("bench-databases")
for first, second in QUEUES.values():
    app.queue(first)
    app.queue(second, database=SECOND)


@app.task(name=NOOP, queue=QUEUES["noop"][0])
async def noop() -> None:
    return None


@app.task(name=SLEEP, queue=QUEUES["sleep"][0])
async def sleep(seconds: float) -> list[float]:
    start = time.time()
    await asyncio.sleep(seconds)
    return [start, time.time()]
