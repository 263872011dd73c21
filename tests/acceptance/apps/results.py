"""The results app: plain tasks whose results a separate process reads back with get(), and a
governed queue (one at a time) whose running sync job gets canceled."""

from __future__ import annotations

import time

import workhorse

from . import probe

app = workhorse.App("results", retention={"succeeded": "1h"})


@app.task(queue="math")
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="math", max_attempts=1)
def explode(message: str) -> None:
    raise ValueError(message)


@app.task(queue="one", max_active=1, lease="3s")
def hold_the_slot(token: str, seconds: float) -> str:
    """Holds the queue's one place for `seconds`, recording the overlap as it runs."""
    conn = probe.conn()
    conn.execute(probe.ENTER, ("queue",))
    try:
        probe.ran_sync(token)
        time.sleep(seconds)
    finally:
        conn.execute(probe.LEAVE, ("queue",))
        probe.ran_sync(f"{token}:returned")
    return token


# One run per document at a time; a new enqueue for a busy document supersedes the running one.
@app.task(queue="reindex", max_active_per_key=1, on_key_full="cancel_in_progress",
          concurrency_key=lambda doc, token, seconds: doc, lease="3s")
def reindex(doc: str, token: str, seconds: float) -> str:
    conn = probe.conn()
    conn.execute(probe.ENTER, ("key",))
    try:
        probe.ran_sync(token)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not workhorse.current_job().cancel_requested:
            time.sleep(0.02)
    finally:
        conn.execute(probe.LEAVE, ("key",))
        probe.ran_sync(f"{token}:returned")
    return token
