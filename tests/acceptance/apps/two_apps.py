"""Two apps on one database, serving one queue: A declares `a.report`, B only `b.cleanup`
(issue #24 item 6: a worker of B must not be taken for a worker of A's jobs)."""

from __future__ import annotations

import workhorse

app_a = workhorse.App("two_a")
app_b = workhorse.App("two_b")


@app_a.task(name="a.report", queue="shared")
def report() -> str:
    return "report"


@app_b.task(name="b.cleanup", queue="shared")
def cleanup() -> str:
    return "cleanup"
