"""Fires the app's due schedule occurrences: every supervisor runs one, none is a leader.

Run by the supervisor's listener thread on its connection (`Listener(on_timer=...)`), at its own
cadence: it wakes at the namespace's next due time by PostgreSQL's clock, so an `every="1s"`
schedule fires within milliseconds of each whole second, and otherwise looks again every
second or so (a schedule synced meanwhile is seen that soon).

One pass is one short transaction (`_ops.fire_due_schedules`): it locks the due schedule rows
that no other pass holds (SKIP LOCKED: N supervisors waking at the same instant do not queue up
behind each other), enqueues their occurrences by the catch-up rule, and moves each pointer past
now(). The unique (schedule, occurrence) key of `schedule_runs`, not this lock, is what makes
exactly one job per occurrence: a pass that fires an occurrence already fired inserts nothing.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from .. import _ops
from .._text import markup_safe
from ..app import App
from ..errors import first_line
from ..types import FiringPass, Schedule

log = logging.getLogger("workhorse.worker")

# With nothing due soon, look again this often (a newly synced schedule is seen this late at most).
RECHECK = 1.0
# An app that declares no schedules may still have stored ones (an older deploy): look less often.
RECHECK_UNDECLARED = 5.0
# A due schedule that another supervisor's pass holds: it commits within milliseconds.
HELD_RETRY = 0.05
# Wake this much after the due instant, so that PostgreSQL's now() has surely passed it.
LATE_BY = 0.002
ERROR_RETRY = 1.0


class Scheduler:
    def __init__(self, namespace: str, *, declares_schedules: bool = True) -> None:
        self.namespace = namespace
        self.recheck = RECHECK if declares_schedules else RECHECK_UNDECLARED
        self._reported: set[str] = set()

    def fire(self, conn: psycopg.Connection[Any]) -> FiringPass:
        """One firing pass on `conn` (autocommit), committed when it returns."""
        with conn.transaction():
            return _ops.execute(conn, _ops.fire_due_schedules(self.namespace))

    def run(self, conn: psycopg.Connection[Any]) -> float:
        """One firing pass; returns the seconds until the next one should run."""
        try:
            firing = self.fire(conn)
        except psycopg.Error as exc:
            # A broken connection also surfaces in the listener, which reconnects.
            log.warning("could not fire due schedules: %s", first_line(exc))
            return ERROR_RETRY
        except Exception:  # a bug here must not take the listener's wake-ups down with it
            log.exception("could not fire due schedules")
            return ERROR_RETRY
        for name, reason in firing.broken:
            if name not in self._reported:  # once per schedule, not once a minute
                self._reported.add(name)
                log.warning("schedule %s cannot be evaluated on this host: %s", name, reason)
        if firing.fired:
            log.debug("fired %d schedule occurrence(s)", len(firing.fired))
        if firing.full:
            return 0.0
        if firing.next_due_in is None:
            return self.recheck
        if firing.next_due_in <= 0:
            return HELD_RETRY
        return min(firing.next_due_in + LATE_BY, self.recheck)


def schedules_banner(app: App, stored: list[Schedule]) -> list[str]:
    """What the worker's banner says about schedules: how many it fires, and how the app's
    declared ones differ from the stored ones (only synced schedules fire)."""
    if not app.schedules and not stored:
        return []
    lines = [f"[dim]schedules[/]  {len(stored)} stored in namespace {markup_safe(app.name)}, "
             "fired by every "
             "running supervisor of the app"]
    by_name = {s.name: s for s in stored}
    drift = []
    for name, definition in sorted(app.schedules.items()):
        schedule = by_name.get(name)
        if schedule is None:
            drift.append(f"{name}: declared, not stored (it fires once synced)")
        elif schedule.definition != definition:
            drift.append(f"{name}: the declared definition differs from the stored one")
    drift += [f"{name}: stored, no longer declared (it still fires until a sync prunes it)"
              for name in sorted(set(by_name) - set(app.schedules))]
    if drift:
        lines.append("[yellow]warning:[/] the app's declared schedules differ from the stored "
                     "ones (run `workhorse sync`, or start the worker with --sync):")
        lines += [f"  [yellow]•[/] {markup_safe(line)}" for line in drift]
    return lines


__all__ = ["Scheduler", "schedules_banner"]
