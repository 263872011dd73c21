"""The browser tests' app: a budgeted API queue whose jobs hold their slots (so keys stay
saturated), a task that always fails with markup in its message, and a rate-limited mailer."""

from __future__ import annotations

import asyncio

import workhorse

app = workhorse.App("dashapp")

EVIL_KEY = "<script>window.pwned = 1</script>"


@app.task(queue="api", max_active=3, max_active_per_key=1,
          concurrency_key=lambda tenant, n: tenant)
async def call_api(tenant: str, n: int) -> None:
    await asyncio.sleep(60)  # holds its budget for the whole test


@app.task(queue="flaky", max_attempts=1)
def explode(n: int) -> None:
    raise ValueError(f"<script>window.pwned = {n}</script> upstream said no")


@app.task(queue="mail", rate_limit="600/m", rate_limit_per_key="1/m",
          concurrency_key=lambda to: to)
def send_mail(to: str) -> dict[str, str]:
    return {"sent": to}


@app.periodic(cron="30 3 * * *", tz="Europe/Oslo", queue="nightly")
def nightly_report() -> None:
    """A real schedule for the Schedules page: synced by the worker's --sync, due at 03:30 Oslo
    time, so it never fires during the test."""


@app.task(queue="lucky", max_attempts=2,
          retry_backoff=workhorse.ExponentialBackoff(base=0.1, factor=1, cap=0.1, jitter=False))
def second_time_lucky(n: int) -> str:
    """Fails its first attempt, succeeds on the second (the job page's attempt history)."""
    if workhorse.current_job().attempt == 1:
        raise ValueError(f"first attempt of {n} fails")
    return "lucky"
