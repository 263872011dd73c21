"""Holds outside tasks (docs/design.md "Holds"): `app.budget(name).hold(...)` takes units of a
named budget through the claim's own admission (sql/budgets/hold_budget, under the budget's
lock) and keeps them while a keeper thread renews its lease; the units go back on exit, or when
the lease runs out because the process died.

    with app.budget("openai").hold(units=1, timeout="5s"):      # or `async with`
        call_openai()

A try that finds no room waits: until the moment a clock allows it (a backoff's end, a rate's
next start) when the database says one, else by short polls (2 ms doubling to 50 ms), until
`timeout` (HoldTimeoutError). One keeper thread per App renews every live hold of the process
in one statement, a third of the shortest lease apart; a hold it cannot renew in time is lost
(its units may have gone to a claim): it is marked `lost` and logged, and its exit releases
nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from . import _ops, database
from ._durations import parse_duration
from .errors import HoldTimeoutError, InvalidOptionsError
from .types import BudgetSpec

log = logging.getLogger("workhorse.holds")

DEFAULT_LEASE = 30.0
# Polls of a budget with no room: the first after 2 ms, doubling up to 50 ms.
FIRST_POLL = 0.002
LAST_POLL = 0.05


@dataclass(frozen=True, slots=True)
class AppBudget(BudgetSpec):
    """What `app.budget(...)` returns: a `BudgetSpec` bound to its App, so that it can hold.
    `app.budget(name)` with no limits is a reference to a budget declared elsewhere (or by this
    app): it declares nothing and limits nothing itself.

    >>> app = workhorse.App("docs")                                   # doctest: +SKIP
    >>> with app.budget("openai").hold(units=1, timeout="5s"):       # doctest: +SKIP
    ...     call_openai()
    """

    app: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.max_active is None and self.rate_limit is None and self.rate_burst is None
                and not self.adaptive):
            return  # a reference: validated as a name where it is used
        BudgetSpec.__post_init__(self)

    def hold(
        self, units: int = 1, key: str | None = None,
        timeout: str | float | timedelta | None = None,
        lease: str | float | timedelta = DEFAULT_LEASE,
    ) -> Holding:
        """A context manager (`with` or `async with`) that holds `units` of this budget while
        its block runs: taken through the claim's admission (counted as active units, and as
        one start against a rate), its lease renewed every third of `lease`, given back on exit
        (or when the lease runs out, if the process dies). HoldTimeoutError when not granted
        within `timeout` (None: wait as long as it takes). Arguments are checked here
        (InvalidOptionsError).

        >>> async with app.budget("openai").hold(timeout="5s") as held:  # doctest: +SKIP
        ...     await call_openai()
        """
        return Holding(self.app, self.name, units, key, timeout, lease)


class Holding:
    """One hold, as `AppBudget.hold()` makes it: `id` and `lease_until` once granted, `lost` when
    its lease ran out before its block ended."""

    def __init__(self, app: Any, budget: str, units: int, key: str | None,
                 timeout: str | float | timedelta | None,
                 lease: str | float | timedelta) -> None:
        if app is None:
            raise InvalidOptionsError(
                "this budget is not bound to an App: take holds with app.budget(name).hold()")
        self.lease = _seconds("lease", lease)
        _ops.check_hold(budget, units, self.lease, key)
        self.timeout = None if timeout is None else _seconds("timeout", timeout, zero=True)
        self.app, self.budget, self.units, self.key = app, budget, units, key
        # The app's database the budget lives in (docs/design.md "Several databases").
        self.database: str = app.database_of_budget(budget) or database.DEFAULT_DATABASE
        self.id: int | None = None
        self.lease_until: datetime | None = None
        self.lost = False
        self.renewed = 0.0  # monotonic time of the last grant or renewal

    def __repr__(self) -> str:
        return (f"Holding(budget={self.budget!r}, units={self.units}, id={self.id}, "
                f"lost={self.lost})")

    def _operation(self) -> _ops.Operation[_ops.HoldReply]:
        return _ops.hold_budget(self.budget, self.units, self.lease, self.key,
                                database.application_name(f"hold:{self.app.name}"), os.getpid())

    def _granted(self, reply: _ops.HoldReply) -> bool:
        if reply.hold_id is None:
            return False
        self.id, self.lease_until, self.renewed = reply.hold_id, reply.lease_until, time.monotonic()
        _keeper(self.app).add(self)
        return True

    def timed_out(self) -> HoldTimeoutError:
        """The error for a hold not granted within its timeout."""
        return HoldTimeoutError(f"budget {self.budget!r}: {self.units} unit(s) not granted "
                                f"within {self.timeout or 0:g}s")

    def __enter__(self) -> Holding:
        tries = _Tries(self)
        while True:
            with self.app.connection(self.database) as conn:
                reply = _ops.execute(conn, self._operation())
            if self._granted(reply):
                return self
            time.sleep(tries.wait(reply))

    async def __aenter__(self) -> Holding:
        tries = _Tries(self)
        while True:
            async with self.app.async_connection(self.database) as conn:
                reply = await _ops.execute_async(conn, self._operation())
            if self._granted(reply):
                return self
            await asyncio.sleep(tries.wait(reply))

    def __exit__(self, *exc_info: object) -> None:
        hold_id = self._ending()
        if hold_id is not None:
            with self.app.connection(self.database) as conn:
                _ops.execute(conn, _ops.release_hold(hold_id))

    async def __aexit__(self, *exc_info: object) -> None:
        hold_id = self._ending()
        if hold_id is not None:
            async with self.app.async_connection(self.database) as conn:
                await _ops.execute_async(conn, _ops.release_hold(hold_id))

    def _ending(self) -> int | None:
        _keeper(self.app).remove(self)
        hold_id, self.id = self.id, None
        return None if self.lost else hold_id


class _Tries:
    """The waits between one hold's tries: until the moment the database named, else a poll
    that doubles from FIRST_POLL to LAST_POLL; never past the timeout (HoldTimeoutError)."""

    def __init__(self, holding: Holding) -> None:
        self.holding = holding
        self.deadline = (None if holding.timeout is None
                         else time.monotonic() + holding.timeout)
        self.poll = FIRST_POLL

    def wait(self, reply: _ops.HoldReply) -> float:
        if reply.retry_in is not None:
            wait = reply.retry_in
        else:
            wait, self.poll = self.poll, min(self.poll * 2, LAST_POLL)
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self.holding.timed_out()
            wait = min(wait, left)
        return wait


def _seconds(what: str, value: object, zero: bool = False) -> float:
    try:
        seconds = parse_duration(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise InvalidOptionsError(f"hold: bad {what} {value!r}: {exc}") from None
    if seconds < 0 or (seconds == 0 and not zero):
        raise InvalidOptionsError(f"hold: {what} must be more than 0, got {value!r}")
    return seconds


class _Keeper:
    """Renews every live hold of one App in this process, on a thread of its own, in one
    statement per beat (a third of the shortest lease)."""

    def __init__(self, app: Any) -> None:
        self._app = weakref.ref(app)
        # By (database, id): each of an app's databases numbers its holds from 1.
        self._holds: dict[tuple[str, int], Holding] = {}
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, holding: Holding) -> None:
        assert holding.id is not None
        with self._lock:
            self._holds[(holding.database, holding.id)] = holding
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="workhorse-holds",
                                                daemon=True)
                self._thread.start()
        self._changed.set()

    def remove(self, holding: Holding) -> None:
        with self._lock:
            if holding.id is not None:
                self._holds.pop((holding.database, holding.id), None)

    def _run(self) -> None:
        beat = DEFAULT_LEASE / 3
        while True:
            with self._lock:
                holds = list(self._holds.values())
            if not holds:
                # Linger a beat for the next hold (its `add` wakes us), and end only after a
                # beat with none: a process that holds again and again, each hold over before
                # this thread runs, would otherwise start a thread per hold.
                if self._changed.wait(beat):
                    self._changed.clear()
                    continue
                with self._lock:
                    if not self._holds:
                        self._thread = None
                        return
                continue
            beat = min(h.lease for h in holds) / 3
            self._changed.wait(beat)
            self._changed.clear()
            now = time.monotonic()
            due = [h for h in holds if h.id is not None and now - h.renewed >= h.lease / 3]
            app = self._app()
            if not due or app is None:
                continue
            renewed: dict[tuple[str, int], datetime] = {}
            for where in sorted({h.database for h in due}):
                here = [h for h in due if h.database == where]
                try:
                    with app.connection(where) as conn:
                        found = _ops.execute(conn, _ops.renew_holds(
                            [h.id or 0 for h in here], [h.lease for h in here]))
                    renewed.update(((where, hold_id), until) for hold_id, until in found.items())
                except Exception as exc:  # the next beat tries again, while the leases last
                    log.warning("renewing %d budget hold(s) failed: %s", len(here), exc)
                    due = [h for h in due if h.database != where]
            for holding in due:
                if (holding.database, holding.id) in renewed:
                    holding.lease_until = renewed[(holding.database, holding.id or 0)]
                    holding.renewed = now
                elif holding.id is not None:
                    holding.lost = True
                    log.warning("budget %r: hold %d lost its lease (its units may be in use "
                                "elsewhere now)", holding.budget, holding.id)
                    self.remove(holding)


_keepers: weakref.WeakKeyDictionary[Any, _Keeper] = weakref.WeakKeyDictionary()
_keepers_lock = threading.Lock()


def _keeper(app: Any) -> _Keeper:
    with _keepers_lock:
        keeper = _keepers.get(app)
        if keeper is None:
            keeper = _keepers[app] = _Keeper(app)
        return keeper
