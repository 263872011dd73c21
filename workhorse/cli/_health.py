"""What `workhorse health` prints beyond the tables it shares with `top` and `budgets`
(_render.py): the backoffs in force (docs/design.md "Back-pressure"), each a queue's own, a key
of a queue's or a budget's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..types import QueueHealth
from ._render import DataTable


def backoff_text(until: datetime, by_job: int | None) -> str:
    """"backed off until 2026-12-04T15:02:09+00:00 by job 4812" (the job left out when unknown).

    >>> backoff_text(datetime.fromisoformat("2026-12-04T15:02:09+00:00"), 4812)
    'backed off until 2026-12-04T15:02:09+00:00 by job 4812'
    """
    by = "" if by_job is None else f" by job {by_job}"
    return f"backed off until {until.isoformat(timespec='seconds')}{by}"


def backoffs_table(health: QueueHealth) -> DataTable | None:
    """The backoffs in force `health` read, queues' (their own, then their keys') before
    budgets'; None when there is none (nothing is printed).

    >>> console.print(backoffs_table(Queue(conn).health()))  # doctest: +SKIP
    queue partner-api   -      backed off until 2026-12-04T15:02:09+00:00 by job 4812
    """
    return backoffs_table_of([(None, health)])


def backoffs_table_of(parts: Sequence[tuple[str | None, QueueHealth]]) -> DataTable | None:
    """`backoffs_table` of several databases' health in one table, each row led by its
    database (docs/design.md "Several databases"); None when none has a backoff in force."""
    several = any(name is not None for name, _ in parts)
    rows: list[tuple[str, ...]] = []
    for name, health in parts:
        lead = (name or "-",) if several else ()
        for p in health.policies:
            if p.backed_off_until is not None:
                rows.append((*lead, f"queue {p.queue}", "-",
                             backoff_text(p.backed_off_until, p.backed_off_by)))
            for k in p.backed_off_keys:
                rows.append((*lead, f"queue {p.queue}", k.key or "-",
                             backoff_text(k.until, k.by_job)))
        for b in health.budgets:
            if b.backed_off_until is not None:
                rows.append((*lead, f"budget {b.name}", "-",
                             backoff_text(b.backed_off_until, b.backed_off_by)))
    if not rows:
        return None
    table = DataTable(title="backoffs")
    for column in (*(("database",) if several else ()), "queue / budget", "key", "backoff"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table
