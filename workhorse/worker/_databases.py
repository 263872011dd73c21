"""A worker for an app whose queues live on several databases (docs/design.md "Several
databases"): this process forks one database supervisor a database, each exactly the
one-database supervisor of supervisor.py (its slots, LISTEN connection, registry row and
schedules), and stands above them.

  - It relays SIGTERM and SIGINT to every database supervisor as SIGTERM, which drains it (they
    ignore SIGINT, and a SIGTERM after the first, so that Ctrl-C, which reaches the whole
    process group, or a service manager's SIGTERM to every process, is heard once); a second
    signal is relayed as SIGUSR2, which stops them at once.
  - A database supervisor that cannot reach its database at start exits with UNREACHABLE; this
    process says so and starts it again after a backoff, while the other databases' supervisors
    run on. A database lost later is the database supervisor's own business: its slots and
    listener reconnect.
  - A database supervisor that exits otherwise (a crash loop of its slots: 1) stops the worker:
    the others are stopped and the worst exit code is returned.
  - Each database supervisor is told (PR_SET_PDEATHSIG) to stop when this process dies, as a
    slot drains when its supervisor dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from .. import database
from .._text import literal, markup_safe
from ..app import App
from ..errors import DatabaseError, WorkhorseError, first_line

# A database supervisor's exit code when its database could not be reached at start.
UNREACHABLE = 3
RETRY_BASE = 1.0
RETRY_CAP = 30.0
# Connections a slot opens (its claims, its outcomes, its leases), and at most this many more
# for durable steps; one more a database supervisor, for LISTEN.
CONNECTIONS_PER_SLOT = 3
STEP_CONNECTIONS_PER_SLOT = 4
_PR_SET_PDEATHSIG = 1


@dataclasses.dataclass(eq=False)
class _Part:
    """One database's supervisor, as this process sees it."""

    name: str
    queues: list[str]
    pid: int = 0
    failures: int = 0
    start_at: float = 0.0  # monotonic time of the next start, while it waits
    code: int | None = None  # its exit code, once it ended for good


class DatabaseFleet:
    """The worker's top process with several databases: forks, relays, restarts."""

    def __init__(self, app: App, settings: Any, groups: dict[str, list[str]], *,
                 run_database: Callable[..., int], sync: bool, app_reference: str,
                 console: Console) -> None:
        # settings: supervisor.WorkerSettings; run_database: supervisor.run_database (passed
        # in: supervisor.py imports this module).
        self.app = app
        self.run_database = run_database
        self.settings = settings
        self.sync = sync
        self.app_reference = app_reference
        self.console = console
        self.parts = [_Part(name, queues) for name, queues in groups.items()]
        self._signals: list[int] = []
        self._stopping = False

    # ---- lifecycle -------------------------------------------------------------------------

    def run(self) -> int:
        self._banner()
        wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_r, False)
        os.set_blocking(wakeup_w, False)
        previous = {signum: signal.signal(signum, self._on_signal)
                    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)}
        previous_fd = signal.set_wakeup_fd(wakeup_w, warn_on_full_buffer=False)
        try:
            for part in self.parts:
                self._start(part)
            while any(part.code is None for part in self.parts):
                self._relay()
                self._reap()
                self._restart_due()
                waits = [p.start_at - time.monotonic() for p in self.parts
                         if p.pid == 0 and p.code is None]
                timeout = max(0.0, min(waits, default=1.0))
                select.select([wakeup_r], [], [], min(timeout, 1.0))
                try:
                    while os.read(wakeup_r, 512):
                        pass
                except BlockingIOError:
                    pass
        finally:
            signal.set_wakeup_fd(previous_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            os.close(wakeup_r)
            os.close(wakeup_w)
        return max(part.code or 0 for part in self.parts)

    def _banner(self) -> None:
        table = Table(box=None, padding=(0, 2), show_edge=False,
                      title=f"workhorse worker  {markup_safe(self.app_reference or self.app.name)}"
                            f": {len(self.parts)} databases", title_justify="left")
        for column in ("database", "url", "queues", "slots", "connections"):
            table.add_column(column)
        slots = self.settings.slots
        for part in self.parts:
            connections = slots * CONNECTIONS_PER_SLOT + 1
            table.add_row(
                literal(part.name), literal(database.mask(self.app.database_url_of(part.name))),
                literal(", ".join(part.queues)), f"{slots} x {self.settings.concurrency}",
                f"{connections} (+ up to {slots * STEP_CONNECTIONS_PER_SLOT} for durable steps)")
        self.console.print(table)
        total = len(self.parts) * (slots * CONNECTIONS_PER_SLOT + 1)
        self.console.print(f"connections: {total} in all, one database supervisor a database",
                           highlight=False)

    def _start(self, part: _Part) -> None:
        settings = dataclasses.replace(self.settings, queues=tuple(part.queues))
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the database supervisor
            code = 1
            try:
                # Until its supervisor's own handlers are in (after the connect, the sync, the
                # banner), a stop from the parent ends it cleanly, and Ctrl-C is the parent's.
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                for signum in (signal.SIGTERM, signal.SIGUSR2):
                    signal.signal(signum, _stop_before_start)
                signal.set_wakeup_fd(-1)
                _die_with_parent()
                code = self.run_database(self.app, settings, part.name, sync=self.sync,
                                         app_reference=self.app_reference,
                                         console=self.console, interrupts=False)
            except _StoppedBeforeStart:
                code = 0
            except DatabaseError as exc:
                self.console.print(
                    f"[yellow]database {markup_safe(part.name)} is unreachable:[/] "
                    f"{markup_safe(first_line(exc))}", highlight=False)
                code = UNREACHABLE
            except WorkhorseError as exc:  # a one-database worker says it in one line too
                self.console.print(
                    f"[red]database {markup_safe(part.name)}:[/] "
                    f"{markup_safe(first_line(exc))}", highlight=False)
            except BaseException:  # the child must exit, whatever happened
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        part.pid = pid

    # ---- signals and children --------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum != signal.SIGCHLD:
            self._signals.append(signum)

    def _relay(self) -> None:
        while self._signals:
            self._signals.pop(0)
            # The first signal drains, a second stops at once (the one-database supervisor's
            # SIGTERM and SIGTERM again, said with SIGUSR2: a service manager may have sent
            # SIGTERM to the database supervisors too).
            relayed = signal.SIGUSR2 if self._stopping else signal.SIGTERM
            self._stopping = True
            for part in self.parts:
                if part.pid:
                    _kill(part.pid, relayed)
                elif part.code is None:
                    part.code = 0  # waiting for its database: nothing to stop

    def _reap(self) -> None:
        for part in self.parts:
            if not part.pid:
                continue
            try:
                pid, status = os.waitpid(part.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = part.pid, 0
            if pid == 0:
                continue
            part.pid = 0
            code = os.waitstatus_to_exitcode(status)
            if code == UNREACHABLE and not self._stopping:
                part.failures += 1
                delay = min(RETRY_BASE * 2 ** (part.failures - 1), RETRY_CAP)
                part.start_at = time.monotonic() + delay
                self.console.print(
                    f"[yellow]database {markup_safe(part.name)}:[/] its queues "
                    f"({markup_safe(', '.join(part.queues))}) wait; the other databases' run "
                    f"on; trying again in {delay:g}s", highlight=False)
                continue
            if self._stopping:
                part.code = 0 if code == UNREACHABLE else (code if code >= 0 else 1)
                continue
            if code == 0:  # stopped by itself (an operator's SIGTERM to it): the others run on
                part.code = 0
                self.console.print(f"database {markup_safe(part.name)}'s supervisor stopped",
                                   highlight=False)
                continue
            # A database supervisor ended by itself (its slots kept crashing): the worker
            # stops, as a one-database worker does.
            part.code = code if code > 0 else 1
            self.console.print(
                f"[red]database {markup_safe(part.name)}'s supervisor exited with {code}:[/] "
                "stopping the others", highlight=False)
            self._signals.append(signal.SIGTERM)

    def _restart_due(self) -> None:
        if self._stopping:
            for part in self.parts:
                if part.pid == 0 and part.code is None:
                    part.code = 0
            return
        now = time.monotonic()
        for part in self.parts:
            if part.pid == 0 and part.code is None and part.start_at <= now:
                self._start(part)


class _StoppedBeforeStart(Exception):
    """A stop signal reached a database supervisor before its supervisor's handlers were in."""


def _stop_before_start(signum: int, frame: Any) -> None:
    raise _StoppedBeforeStart


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _die_with_parent() -> None:
    """SIGTERM when the worker's top process dies (Linux; elsewhere nothing): this database
    supervisor then drains and stops, as its slots do when it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call
        os.kill(os.getpid(), signal.SIGTERM)
