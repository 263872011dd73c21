"""The app of bench_databases.py: one no-op task on each of two databases (`default` and
`two`, from WORKHORSE_DATABASES), so that one worker command serves both."""

from __future__ import annotations

from workhorse import App

app = App("bench-databases")


@app.task(name="bench.noop1", queue="bench-db-1")
def noop1() -> None:
    return None


@app.task(name="bench.noop2", queue="bench-db-2", database="two")
def noop2() -> None:
    return None
