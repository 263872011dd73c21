"""The supervisor: forks the slots, restarts them, relays signals, keeps the workers row.

    run_worker(app, slots=4, concurrency=8, queues=["mail"], lease=30, grace=30)

Order of events:
  1. Before any fork: `--sync` (then the app's pool is closed), the banner's reads on one
     short-lived connection that is closed again, and the shared budget and counters. No slot
     ever inherits a live connection: the first slots are forked before the supervisor opens its
     own, and a slot forked later (a restart) closes the inherited descriptors at once, without
     speaking on them.
  2. Fork N slots (`os.fork`: the app is already imported, so a slot imports nothing new).
  3. One thread, one connection (`wakeups.Listener`): LISTEN, the due-time timer, and this
     supervisor's row in `workhorse.workers` (last_seen every few seconds, counters in `stats`).
  4. The main thread waits for signals and dead children. A slot that dies is replaced after
     an exponential backoff; one that keeps dying young trips the crash-loop guard (exit 1).
  5. SIGTERM or SIGINT: SIGTERM to every slot (a slot drains: it claims nothing more and lets
     its jobs finish), wait up to `--grace`, then SIGKILL whatever is left; exit 0. A second
     signal kills at once. Killed jobs are never marked done: their leases run out and they are
     claimed again.

Slots ignore SIGINT (Ctrl-C in a terminal reaches the whole process group; the supervisor
coordinates). A slot whose supervisor died notices it by its parent pid changing (it polls once a
second), drains its jobs and exits 0. Not by PR_SET_PDEATHSIG: the kernel sends that signal each
time the slot is handed from one dying supervisor thread to the next, so after a kill -9 an idle
slot, drained by the first SIGTERM and its handler already gone, was killed by the second (-15).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import database
from .._durations import parse_duration, parse_lease
from .._text import literal, markup_safe
from ..app import App
from ..errors import InvalidOptionsError
from ..queue import Queue
from ..types import (
    BudgetHealth,
    ConcurrencyPolicy,
    ConcurrencyPolicyDefinition,
    PolicyHealth,
    SyncReport,
    check_database_name,
    check_name,
)
from . import _logs, _registry, hooks
from ._shared import IN_FLIGHT, Budget, Stats
from .scheduler import Scheduler, schedules_banner
from .slot import Slot, SlotConfig
from .wakeups import BACKEND, HINT, PASS, ChannelSet, ConnectionFds, Listener, decode, encode

# A slot that lived this long before dying starts its backoff afresh.
HEALTHY_AFTER = 30.0
RESTART_BASE = 0.25
RESTART_CAP = 30.0
# This many deaths in a row, each before HEALTHY_AFTER: the supervisor gives up (exit 1).
CRASH_LOOP_LIMIT = 8
REGISTRY_INTERVAL = 5.0


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    slots: int
    concurrency: int
    queues: tuple[str, ...]
    max_concurrent_tasks: int | None
    lease: float
    dequeue_timeout: float
    grace: float
    prefetch: int = 0


# Jobs of ungoverned queues a slot may claim ahead of a free place, by default: 16 a place, at
# least DEFAULT_PREFETCH. The real bound is slot.py's PREFETCH_WINDOW (no more than 50 ms of work
# at the handlers' measured pace), so this cap only matters for jobs well under a millisecond,
# where a small cap keeps claims small and their round trips, not the jobs, bound the drain. At
# the default flags (`--concurrency 1`) a floor of 32 made claims of about 16 no-op jobs, and
# the server spent 61-62 us a job; 128 makes them about 64: 33-34 us, and the sync no-op drain
# 11.4-13.1k -> 15.7-19.1k jobs/s (issue #40).
DEFAULT_PREFETCH = 128
PREFETCH_PER_PLACE = 16
MAX_PREFETCH = 10_000


def default_prefetch(concurrency: int) -> int:
    return min(max(DEFAULT_PREFETCH, PREFETCH_PER_PLACE * concurrency), MAX_PREFETCH)



def _seconds(name: str, value: float | str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise InvalidOptionsError(f"--{name}: {exc}") from None
    return seconds


def settings_for(
    app: App,
    *,
    slots: int | None,
    concurrency: int,
    queues: Sequence[str] | None,
    max_concurrent_tasks: int | None,
    lease: float | str,
    dequeue_timeout: float | str,
    grace: float | str,
    prefetch: int | None = None,
) -> WorkerSettings:
    """Validated settings; InvalidOptionsError names the flag at fault."""
    slot_count = slots if slots is not None else (os.cpu_count() or 1)
    if slot_count < 1:
        raise InvalidOptionsError(f"--slots must be at least 1, got {slot_count}")
    if concurrency < 1:
        raise InvalidOptionsError(f"--concurrency must be at least 1, got {concurrency}")
    if prefetch is None:
        prefetch = default_prefetch(concurrency)
    if (isinstance(prefetch, bool) or not isinstance(prefetch, int)
            or not 0 <= prefetch <= MAX_PREFETCH):
        raise InvalidOptionsError(
            f"--prefetch must be an int in [0, {MAX_PREFETCH}], got {prefetch!r}")
    if max_concurrent_tasks is not None and max_concurrent_tasks < 1:
        raise InvalidOptionsError(
            f"--max-concurrent-tasks must be at least 1, got {max_concurrent_tasks}"
        )
    try:
        lease_s = parse_lease(lease)
    except ValueError as exc:
        raise InvalidOptionsError(f"--lease: {exc}") from None
    dequeue_s = _seconds("dequeue-timeout", dequeue_timeout)
    if dequeue_s <= 0:
        raise InvalidOptionsError("--dequeue-timeout must be positive")
    grace_s = _seconds("grace", grace)
    if queues is not None and not any(q.strip() for q in queues):
        raise InvalidOptionsError(f"--queues names no queue: {list(queues)!r}")
    served = list(dict.fromkeys(
        q.strip() for q in (queues if queues is not None else app.declared_queues()) if q.strip()))
    if not served:
        raise InvalidOptionsError(
            f"app {app.name!r} declares no queues and none were given with --queues"
        )
    for queue in served:
        check_name("queue", queue)
    return WorkerSettings(
        slots=slot_count, concurrency=concurrency, queues=tuple(served),
        max_concurrent_tasks=max_concurrent_tasks, lease=lease_s, dequeue_timeout=dequeue_s,
        grace=grace_s, prefetch=prefetch,
    )


def run_worker(
    app: App,
    *,
    slots: int | None = None,
    concurrency: int = 1,
    queues: list[str] | None = None,
    max_concurrent_tasks: int | None = None,
    lease: float = 30.0,
    dequeue_timeout: float = 30.0,
    grace: float = 30.0,
    prefetch: int | None = None,
    sync: bool = False,
    app_reference: str = "",
    console: Console | None = None,
    log_level: str = "info",
    log_format: str = "text",
    databases: list[str] | None = None,
) -> int:
    """Start the supervisor and its slots; returns the exit code when it stops.

    0 after SIGTERM/SIGINT (drained, or stopped hard on a second signal or when `grace` ran
    out), 1 when a slot kept crashing. Bad settings raise InvalidOptionsError before anything
    starts; an unreachable database raises DatabaseError. With queues on several of the app's
    databases (docs/design.md "Several databases"), one database supervisor a database
    (`_databases.DatabaseFleet`); `databases` chooses which.
    """
    console = console if console is not None else Console(highlight=False)
    try:
        _logs.configure(log_level, log_format)
    except ValueError as exc:
        raise InvalidOptionsError(str(exc)) from None
    settings = settings_for(
        app, slots=slots, concurrency=concurrency, queues=queues,
        max_concurrent_tasks=max_concurrent_tasks, lease=lease,
        dequeue_timeout=dequeue_timeout, grace=grace, prefetch=prefetch,
    )
    groups = served_databases(app, settings.queues, databases)
    if len(groups) > 1:
        from ._databases import DatabaseFleet

        app.close()  # no pool may cross the fork
        return DatabaseFleet(app, settings, groups, run_database=run_database, sync=sync,
                             app_reference=app_reference, console=console).run()
    [(name, served)] = groups.items()
    return run_database(app, dataclasses.replace(settings, queues=tuple(served)), name,
                        sync=sync, app_reference=app_reference, console=console)


def served_databases(app: App, queues: Sequence[str],
                     databases: Sequence[str] | None) -> dict[str, list[str]]:
    """The served queues grouped by the database they live in, limited to `databases` when
    given (`--databases`); InvalidOptionsError when that leaves nothing to serve."""
    app.check_placement()
    groups = app.queues_by_database(queues)
    if databases is None:
        return groups
    for name in databases:
        check_database_name(name)
        app.database_url_of(name)  # InvalidOptionsError for a name the app does not have
    chosen = {name: served for name, served in groups.items() if name in databases}
    if not chosen:
        raise InvalidOptionsError(
            f"--databases {','.join(databases)}: no served queue lives there (the queues live "
            f"in {', '.join(groups)})")
    return chosen


def run_database(app: App, settings: WorkerSettings, name: str, *, sync: bool,
                 app_reference: str, console: Console, interrupts: bool = True) -> int:
    """One database's supervisor: its queues (`settings.queues`), its banner, its slots.
    `interrupts=False`: SIGINT is ignored (a fleet of database supervisors hears of Ctrl-C
    from their parent, as SIGTERM)."""
    url = app.database_url_of(name)
    report: SyncReport | None = None
    # An unreachable database fails here, at once, with DatabaseError (a pool would wait).
    with database.connect(url, role="supervisor-start", autocommit=True, connect_timeout=10):
        pass
    if sync:
        database.ensure_schema(url)
        try:
            report = app.sync_database(name)
        finally:
            app.close()  # no pool may cross the fork
    else:
        database.ensure_schema(url)
    with database.connect(url, role="supervisor-start", autocommit=True,
                          connect_timeout=10) as conn:
        stored = Queue(conn).list_concurrency_policies()
        health = Queue(conn).health()
        in_force = {p.queue: p for p in health.policies}
        stored_schedules = Queue(conn).list_schedules(app.name)
    _print_banner(console, app, settings, name, stored, report, app_reference, in_force,
                  health.budgets)
    for line in schedules_banner(app, stored_schedules):
        console.print(line, highlight=False)
    supervisor = Supervisor(app, settings, url, console=console, app_reference=app_reference,
                            # Queues whose jobs name a budget are governed too (the wake-up
                            # timer keeps this up to date; this is its first reading).
                            governed={p.queue for p in stored}
                            | {q for b in health.budgets for q in b.queues},
                            interrupts=interrupts, database_name=name)
    return supervisor.run()


# ---- banner ------------------------------------------------------------------------------------


def _limits(
    max_active: int | None,
    per_key: int | None,
    rate_limit: str | None = None,
    rate_limit_per_key: str | None = None,
) -> str:
    parts = []
    if max_active is not None:
        parts.append(f"max_active={max_active}")
    if per_key is not None:
        parts.append(f"per_key={per_key}")
    if rate_limit is not None:
        parts.append(f"rate={rate_limit}")
    if rate_limit_per_key is not None:
        parts.append(f"rate_per_key={rate_limit_per_key}")
    return ", ".join(parts) if parts else "ungoverned"


def _stored_limits(p: ConcurrencyPolicy | ConcurrencyPolicyDefinition) -> str:
    return _limits(p.max_active, p.max_active_per_key, p.rate_limit, p.rate_limit_per_key)


def _in_force(health: PolicyHealth) -> str:
    """What an operator control adds to the stored limits, for the banner."""
    notes = []
    if health.paused:
        notes.append("[bold yellow]paused[/]")
    if health.override is not None:
        o = health.override
        until = f" until {o.expires_at:%Y-%m-%d %H:%M:%S%z}" if o.expires_at else ""
        limits = _limits(o.max_active, o.max_active_per_key, o.rate_limit, o.rate_limit_per_key)
        notes.append(f"[yellow]override {limits}{until}[/]")
    return "; ".join(notes)


def policy_drift(app: App, stored: list[ConcurrencyPolicy],
                 database_name: str = database.DEFAULT_DATABASE) -> list[str]:
    """How the app's declared limits differ from the stored ones (of its database
    `database_name`: the queues that live there), one line per queue."""
    by_queue = {p.queue: p for p in stored}
    declared = {d.queue: d for d in app.policy_definitions()
                if app.database_of(d.queue) == database_name}
    lines = []
    for queue, definition in sorted(declared.items()):
        want = _stored_limits(definition)
        policy = by_queue.get(queue)
        if policy is None:
            lines.append(f"{queue}: declared {want}, not stored (ungoverned until synced)")
        elif policy.namespace != app.name:
            lines.append(f"{queue}: declared {want}, stored under namespace {policy.namespace!r}")
        elif _stored_limits(policy) != want:
            lines.append(f"{queue}: declared {want}, stored {_stored_limits(policy)}")
    for policy in stored:
        if policy.namespace == app.name and policy.queue not in declared:
            lines.append(f"{policy.queue}: stored {_stored_limits(policy)}, no longer declared")
    return lines


def _print_banner(
    console: Console,
    app: App,
    settings: WorkerSettings,
    database_name: str,
    stored: list[ConcurrencyPolicy],
    report: SyncReport | None,
    app_reference: str,
    in_force: dict[str, PolicyHealth] | None = None,
    budgets: list[BudgetHealth] | None = None,
) -> None:
    by_queue = {p.queue: p for p in stored}
    # A queue governed only by the named budgets its jobs name is not "ungoverned".
    budgeted: dict[str, list[str]] = {}
    for b in budgets or []:
        limits = _limits(b.max_active, None, b.rate_limit)
        for queue in sorted(set(b.used_by) | set(b.queues)):
            budgeted.setdefault(queue, []).append(
                f"budget {b.name}" + (f" ({limits})" if b.namespace is not None else ""))
    in_force = in_force or {}
    title = Text.assemble(("workhorse worker", "bold"), "  ", (app_reference or app.name, "cyan"))
    console.print(title)
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    facts.add_row("app", literal(f"{app_reference or app.name} ({len(app.tasks)} tasks)"))
    facts.add_row("namespace", literal(app.name))
    url = database.mask(app.database_url_of(database_name))
    facts.add_row("database", url if len(app.database_names) == 1 else f"{database_name}: {url}")
    facts.add_row("supervisor", f"pid {os.getpid()} on {socket.gethostname()}")
    budget = (f", at most {settings.max_concurrent_tasks} in flight in all"
              if settings.max_concurrent_tasks else "")
    facts.add_row("slots", f"{settings.slots} x concurrency {settings.concurrency}{budget}")
    facts.add_row("prefetch", f"up to {settings.prefetch} a slot, ungoverned queues only"
                  if settings.prefetch else "off")
    facts.add_row("lease", f"{settings.lease:g}s; dequeue timeout {settings.dequeue_timeout:g}s; "
                  f"grace {settings.grace:g}s")
    console.print(facts)
    queues = Table(box=None, padding=(0, 2), show_edge=False)
    queues.add_column("queue")
    queues.add_column("stored limits")
    queues.add_column("namespace", style="dim")
    queues.add_column("operator controls")
    for name in settings.queues:
        policy = by_queue.get(name)
        health = in_force.get(name)
        controls = _in_force(health) if health is not None else ""
        if policy is None:
            governing = "; ".join(budgeted.get(name, []))
            queues.add_row(literal(name), literal(governing) if governing else "ungoverned", "",
                           controls)
        else:
            queues.add_row(literal(name), _stored_limits(policy), literal(policy.namespace),
                           controls)
    console.print(queues)
    if report is not None:
        changes = [f"{what} {', '.join(names)}" for what, names in (
            ("created", report.created), ("updated", report.updated),
            ("pruned", report.pruned), ("unchanged", report.unchanged)) if names]
        console.print(f"[green]synced[/] namespace {markup_safe(app.name)}: "
                      + (markup_safe("; ".join(changes)) if changes else "no policies"),
                      highlight=False)
    else:
        drift = policy_drift(app, stored, database_name)
        if drift:
            console.print("[yellow]warning:[/] the app's declared limits differ from the stored "
                          "ones (run `workhorse sync`, or start the worker with --sync):")
            for line in drift:
                console.print(f"  [yellow]•[/] {markup_safe(line)}", highlight=False)


# ---- the supervisor -----------------------------------------------------------------------------


@dataclass(eq=False)
class _SlotProcess:
    index: int
    pid: int = 0
    started: float = 0.0
    quick_deaths: int = 0
    restart_at: float | None = None
    restarts: int = 0


def _preload() -> None:
    """Import, in the supervisor, everything a slot imports lazily, so that slots import nothing
    (and share those pages copy-on-write)."""
    import anyio._backends._asyncio
    import anyio._core._signals
    import anyio.abc
    import anyio.from_thread
    import anyio.to_thread  # noqa: F401
    import psycopg.rows  # noqa: F401


def _restart_delay(quick_deaths: int) -> float:
    """How long a slot that died young for the n-th time in a row waits before its restart."""
    return min(RESTART_BASE * 2 ** (quick_deaths - 1), RESTART_CAP)


def _describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"was killed by {signal.Signals(number).name}"
        except ValueError:
            return f"was killed by signal {number}"
    return f"exited with status {os.WEXITSTATUS(status)}"


class Supervisor:
    def __init__(
        self,
        app: App,
        settings: WorkerSettings,
        url: str,
        *,
        console: Console,
        app_reference: str = "",
        governed: set[str] | None = None,
        interrupts: bool = True,
        database_name: str = database.DEFAULT_DATABASE,
    ) -> None:
        self.app = app
        self.interrupts = interrupts
        self.database_name = database_name
        self.settings = settings
        self.url = url
        self.console = console
        self.app_reference = app_reference
        self.pid = os.getpid()
        self.stats = Stats(settings.slots)
        self.budget = (Budget(settings.max_concurrent_tasks, settings.slots)
                       if settings.max_concurrent_tasks else None)
        self.channels = ChannelSet(self._has_room)
        self.fds = ConnectionFds()
        leases = [settings.lease] + [t.lease for t in app.tasks.values() if t.lease]
        self.heartbeat_interval = max(min(leases) / 3.0, 0.05)
        self.slots = [_SlotProcess(i) for i in range(settings.slots)]
        self._by_pid: dict[int, _SlotProcess] = {}
        self._backends: dict[int, int] = {}
        self._signals: list[int] = []
        self._stopping = False
        self._hard = False
        self._deadline = 0.0
        self._killed = False
        self._exit_code = 0
        self._wakeup_r = -1
        self._wakeup_w = -1
        self.registry = _registry.Registry(
            app=app.name, host=socket.gethostname(), pid=self.pid, slots=settings.slots,
            queues=list(settings.queues), stats=self._registry_stats, tasks=sorted(app.tasks),
        )
        # Every supervisor fires its app's due schedules, whatever its queues.
        self.scheduler = Scheduler(app.name, declares_schedules=bool(app.schedules))
        self.listener = Listener(
            url, list(settings.queues), self.channels, self.fds,
            governed=governed or set(), tick_interval=REGISTRY_INTERVAL,
            on_connect=self.registry.connected, on_tick=self.registry.tick,
            on_stop=self.registry.unregister, on_timer=self.scheduler.run,
        )

    # ---- lifecycle -------------------------------------------------------------------------

    def run(self) -> int:
        _preload()
        previous = self._install_signals()
        try:
            for slot in self.slots:
                self._try_spawn(slot)
            self.listener.start()
            self._loop()
        finally:
            self.listener.stop()
            self.registry.unregister_if_needed(self.url)
            self.channels.close_all()
            self._restore_signals(previous)
        totals = self.stats.totals()
        self.console.print(
            f"stopped: {totals['succeeded']} succeeded, {totals['failed']} failed, "
            f"{totals['retried']} retried, {totals['held']} held", highlight=False,
        )
        return self._exit_code

    def _loop(self) -> None:
        while True:
            self._reap()
            self._handle_signals()
            now = time.monotonic()
            if self._stopping:
                if not self._by_pid:
                    return
                if not self._killed and (self._hard or now >= self._deadline):
                    if not self._hard:
                        self.console.print(
                            f"[yellow]grace of {self.settings.grace:g}s expired:[/] stopping "
                            f"{len(self._by_pid)} slot(s) now; their unfinished jobs are "
                            "claimed again when their leases run out", highlight=False,
                        )
                    self._kill_all(signal.SIGKILL)
                    self._killed = True
                timeout = 1.0 if self._killed else max(0.0, min(self._deadline - now, 1.0))
            else:
                timeout = 1.0
                for slot in self.slots:
                    if slot.restart_at is not None:
                        if slot.restart_at <= now:
                            self._try_spawn(slot)
                        else:
                            timeout = min(timeout, slot.restart_at - now)
            self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        ends = self.channels.readable()
        by_fd = {end.fileno(): index for index, end in ends.items()}
        with contextlib.suppress(InterruptedError):  # PEP 475 retries for us anyway
            ready, _, _ = select.select([self._wakeup_r, *by_fd], [], [], max(timeout, 0.0))
            for fd in ready:
                if fd in by_fd:
                    self._relay(by_fd[fd], ends[by_fd[fd]])
        try:
            while os.read(self._wakeup_r, 512):
                pass
        except BlockingIOError:
            pass

    def _relay(self, index: int, end: socket.socket) -> None:
        """A slot passes on a governed queue's hint: the next slot gets it."""
        while True:
            try:
                message = end.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            kind, names = decode(message)
            if kind == PASS and names and not self._stopping:
                self.channels.send_one(encode(HINT, names), exclude=index)
            elif kind == BACKEND and names:
                self._backends[index] = int(next(iter(names)))
                self.listener.own_backends = frozenset(self._backends.values())

    def _has_room(self, index: int) -> bool:
        return self.stats.get(index, IN_FLIGHT) < self.settings.concurrency

    # ---- signals ---------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        self._wakeup_r, self._wakeup_w = os.pipe()
        os.set_blocking(self._wakeup_r, False)
        os.set_blocking(self._wakeup_w, False)
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            handler = (self._on_signal if signum != signal.SIGINT or self.interrupts
                       else signal.SIG_IGN)
            previous[signum] = signal.signal(signum, handler)
        if not self.interrupts:  # a database supervisor: its parent's "stop now"
            previous[signal.SIGUSR2] = signal.signal(signal.SIGUSR2, self._on_signal)
        previous[-1] = signal.set_wakeup_fd(self._wakeup_w, warn_on_full_buffer=False)
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        signal.set_wakeup_fd(previous.pop(-1, -1))
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for fd in (self._wakeup_r, self._wakeup_w):
            os.close(fd)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum != signal.SIGCHLD:
            self._signals.append(signum)

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            name = signal.Signals(signum).name
            if not self._stopping:
                self._begin_stop(f"{name}: draining", code=0)
            elif not self.interrupts and signum == signal.SIGTERM:
                # Under a worker of several databases a SIGTERM may arrive twice (from its
                # parent, and from a service manager signalling the whole group): "stop now"
                # is the parent's SIGUSR2 instead.
                continue
            elif not self._hard:
                self._hard = True
                self.console.print(
                    f"[yellow]{name} again:[/] stopping now; unfinished jobs are claimed again "
                    "when their leases run out", highlight=False,
                )

    def _begin_stop(self, why: str, code: int) -> None:
        self._stopping = True
        self._exit_code = code
        self._deadline = time.monotonic() + self.settings.grace
        for slot in self.slots:
            slot.restart_at = None
        self.console.print(
            f"[bold]{why}[/] {len(self._by_pid)} slot(s) (grace {self.settings.grace:g}s)",
            highlight=False,
        )
        self._kill_all(signal.SIGTERM)

    def _kill_all(self, signum: int) -> None:
        for pid in list(self._by_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    # ---- slots -----------------------------------------------------------------------------

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self._by_pid.pop(pid, None)
            if slot is not None:
                self._slot_exited(slot, status)

    def _slot_exited(self, slot: _SlotProcess, status: int) -> None:
        if self.budget is not None:
            self.budget.reclaim(slot.index)
        self.stats.set(slot.index, IN_FLIGHT, 0)
        self.channels.close(slot.index)
        if self._backends.pop(slot.index, None) is not None:
            self.listener.own_backends = frozenset(self._backends.values())
        pid, slot.pid = slot.pid, 0
        if self._stopping:
            return
        now = time.monotonic()
        lived = now - slot.started
        slot.quick_deaths = slot.quick_deaths + 1 if lived < HEALTHY_AFTER else 1
        how = _describe_exit(status)
        if slot.quick_deaths >= CRASH_LOOP_LIMIT:
            self.console.print(
                f"[red]slot {slot.index} {how}, its {slot.quick_deaths}th death in a row within "
                f"{HEALTHY_AFTER:g}s of starting: crash loop; stopping the worker[/]",
                highlight=False,
            )
            self._begin_stop("crash loop:", code=1)
            return
        delay = _restart_delay(slot.quick_deaths)
        slot.restart_at = now + delay
        self.console.print(
            f"[yellow]slot {slot.index} (pid {pid}) {how};[/] restarting in "
            f"{delay:g}s", highlight=False,
        )

    def _try_spawn(self, slot: _SlotProcess) -> None:
        try:
            self._spawn(slot)
        except OSError as exc:  # out of processes or memory: try again later
            slot.quick_deaths += 1
            delay = _restart_delay(slot.quick_deaths)
            slot.restart_at = time.monotonic() + delay
            self.console.print(f"[red]cannot start slot {slot.index}: {markup_safe(exc)};[/] "
                               "retrying in "
                               f"{delay:g}s", highlight=False)

    def _spawn(self, slot: _SlotProcess) -> None:
        slot.restart_at = None
        child_end = self.channels.open(slot.index)
        config = SlotConfig(
            index=slot.index, url=self.url, queues=self.settings.queues,
            concurrency=self.settings.concurrency, lease=self.settings.lease,
            dequeue_timeout=self.settings.dequeue_timeout, grace=self.settings.grace,
            heartbeat_interval=self.heartbeat_interval, prefetch=self.settings.prefetch,
            database=self.database_name,
        )
        governed = set(self.listener.governed)
        shares = dict(self.listener.shares)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        hooks.run_before_fork()  # a framework's connections (Django's) must not cross the fork
        # Hold the lock under which the listener opens and closes its connection, so that the
        # child's list of inherited connection descriptors is exact.
        locked = self.fds.lock.acquire(timeout=2.0)
        try:
            pid = os.fork()
        except BaseException:
            if locked:
                self.fds.lock.release()
            child_end.close()
            raise
        if pid == 0:  # the slot
            code = 1
            try:
                inherited = set(self.fds.fds) if locked else set()
                if locked:
                    self.fds.lock.release()
                self._become_slot(inherited)
                code = Slot(
                    self.app, config, channel=child_end, budget=self.budget, stats=self.stats,
                    parent_pid=self.pid, governed=governed, shares=shares,
                ).run()
            except BaseException:
                traceback.print_exc()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(OSError, ValueError):
                        stream.flush()
                os._exit(code)
        if locked:
            self.fds.lock.release()
        child_end.close()
        if slot.started:
            slot.restarts += 1
        slot.pid = pid
        slot.started = time.monotonic()
        self._by_pid[pid] = slot

    def _become_slot(self, inherited_connections: set[int]) -> None:
        """In the child, first thing: drop everything that belongs to the supervisor."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (self._wakeup_r, self._wakeup_w, *inherited_connections):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.channels.forget_in_child()
        if os.getppid() != self.pid:  # the supervisor died before prctl took effect
            os._exit(0)

    # ---- registry --------------------------------------------------------------------------

    def _registry_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = dict(self.stats.totals())
        stats.update(
            restarts=sum(s.restarts for s in self.slots),
            slot_pids=[s.pid for s in self.slots if s.pid],
            concurrency=self.settings.concurrency,
            max_concurrent_tasks=self.settings.max_concurrent_tasks,
            app_reference=self.app_reference or None,
            draining=self._stopping,
        )
        return stats


__all__ = ["Supervisor", "WorkerSettings", "policy_drift", "run_database", "run_worker",
           "served_databases", "settings_for"]
