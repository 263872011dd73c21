"""Wake-ups: one LISTEN connection per supervisor, relayed to its slots; polling is the fallback.

Supervisor side, `Listener` is one thread with one connection. It LISTENs on the wake-up
channel (`listen.sql`: only SQL spells the channel's name), whose payload is a queue name, sent
on enqueue, on complete/fail in governed queues, and on a policy change; it relays the names of
the queues this supervisor serves to every slot. The same connection runs a cheap timer query
(`next_due.sql`): the earliest scheduled `run_at` and the earliest `lease_until` per queue,
because a job falling due or a lease running out sends no NOTIFY. It also reports which queues
are governed, so that a slot polls a saturated governed queue sooner than an empty one.
`on_tick` lets the supervisor use the connection for its registry row.

Slot side, `WakeupReceiver` reads its end of a datagram socketpair. Messages are tiny:
`q\\0name\\0name...` (these queues may have work), `g\\0name...` (the governed set) and
`s\\0N:name...` (a slot's share of each queue's max_active, from the same timer query: the
claimer gives its places back to the fleet only when it holds more than that).
Notifications are only hints: a slot also polls every `--dequeue-timeout`, so nothing depends
on them for correctness, and a full socket buffer simply drops a hint.

Where LISTEN cannot work (PgBouncer in transaction mode: LISTEN "succeeds" and nothing ever
arrives), the listener finds out on every connect with a probe (`_listen.listen_works`) and then
polls instead: every POLL_WAKEUPS seconds it asks which served queues have ready jobs
(`ready_queues.sql`, one index probe per queue) and hints those, so a job enqueued into an idle
fleet starts within about POLL_WAKEUPS, never only at the next `--dequeue-timeout`.
`WORKHORSE_LISTEN_URL` moves the LISTEN to another URL (the server itself, or PgBouncer in
session mode) while every other statement keeps the main one.

A hint for a governed queue (usually "capacity was freed") goes to ONE slot, not all: every
claimer of a governed queue takes its admission lock exclusively, and N slots woken for one
freed place would make N-1 empty claims in a row. The slot that got the hint passes it on
(`p\\0name`, back to the supervisor, which sends it to the next slot) only when its claim came
back full, that is when there may be room left. A NOTIFY sent by one of this supervisor's own
slots (the listener knows their outcome connections' backend pids, `b\\0pid`) is not relayed
at all for a governed queue: that slot saw its completion first and acts on it itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import psycopg

from .. import _listen, _ops
from ..database import mask
from ..errors import first_line
from ._reconnect import Reconnect

log = logging.getLogger("workhorse.worker")

HINT = b"q"
GOVERNED = b"g"
PASS = b"p"
BACKEND = b"b"
SHARES = b"s"
_SEP = b"\x00"
# Re-read the timer at least this often, and at most this often after NOTIFYs.
DUE_REFRESH = 1.0
DUE_REFRESH_MIN = 0.2
# Without LISTEN: how often the served queues are polled for ready jobs (the wake-up latency).
POLL_WAKEUPS = 0.5


def encode(kind: bytes, names: Iterable[str]) -> bytes:
    return _SEP.join([kind, *(n.encode() for n in sorted(names))])


def decode(message: bytes) -> tuple[bytes, set[str]]:
    kind, *names = message.split(_SEP)
    return kind, {n.decode(errors="replace") for n in names if n}


def encode_shares(shares: dict[str, float]) -> bytes:
    """The SHARES message: each queue's share as `N:name` (a name may hold a colon; N may not)."""
    return encode(SHARES, [f"{share!r}:{queue}" for queue, share in shares.items()])


def decode_shares(entries: Iterable[str]) -> dict[str, float]:
    """The queue -> share map of a decoded SHARES message (a malformed entry is left out)."""
    shares = {}
    for entry in entries:
        share, _, queue = entry.partition(":")
        with contextlib.suppress(ValueError):
            if queue:
                shares[queue] = float(share)
    return shares


class ChannelSet:
    """The supervisor's ends of the slots' socketpairs, written by the listener thread."""

    def __init__(self, has_room: Callable[[int], bool] | None = None) -> None:
        self._lock = threading.Lock()
        self._ends: dict[int, socket.socket] = {}
        self._has_room = has_room
        self._next = 0

    def open(self, index: int) -> socket.socket:
        """A new pair for slot `index`; returns the slot's end (the child keeps it)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        mine.setblocking(False)
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        with self._lock:
            old = self._ends.pop(index, None)
            self._ends[index] = mine
        if old is not None:
            old.close()
        return theirs

    def close(self, index: int) -> None:
        with self._lock:
            end = self._ends.pop(index, None)
        if end is not None:
            end.close()

    def fds(self) -> list[int]:
        with self._lock:
            return [end.fileno() for end in self._ends.values()]

    def broadcast(self, message: bytes) -> None:
        with self._lock:
            for end in self._ends.values():
                # A full buffer drops a hint; a gone slot cannot read it: both harmless.
                with contextlib.suppress(OSError):
                    end.send(message)

    def send_one(self, message: bytes, exclude: int | None = None) -> None:
        """Send to one slot, round-robin, preferring one with free capacity."""
        with self._lock:
            indices = sorted(i for i in self._ends if i != exclude)
            if not indices:
                return
            n = len(indices)
            order = [indices[(self._next + k) % n] for k in range(n)]
            chosen = next((i for i in order if self._has_room is None or self._has_room(i)),
                          order[0])
            self._next = (indices.index(chosen) + 1) % n
            with contextlib.suppress(OSError):
                self._ends[chosen].send(message)

    def readable(self) -> dict[int, socket.socket]:
        with self._lock:
            return dict(self._ends)

    def forget_in_child(self) -> None:
        """In a freshly forked slot: drop the supervisor's ends without closing anything through
        a socket object, which could close a descriptor that has been reused meanwhile. No lock:
        the listener thread may have held it at the fork, and it does not exist here."""
        ends, self._ends = list(self._ends.values()), {}
        self._lock = threading.Lock()
        for end in ends:
            with contextlib.suppress(OSError):
                os.close(end.detach())

    def close_all(self) -> None:
        with self._lock:
            ends, self._ends = list(self._ends.values()), {}
        for end in ends:
            end.close()


class ConnectionFds:
    """File descriptors of the supervisor's own connections, so a slot forked later can close
    its inherited copies at once without ever speaking on them (psycopg will not finalize a
    connection in another process: its PQfinish is guarded by the pid)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fds: set[int] = set()


class Listener:
    """The supervisor's one database thread: LISTEN, the due-time timer, and `on_tick`."""

    def __init__(
        self,
        url: str,
        queues: list[str],
        channels: ChannelSet,
        fds: ConnectionFds,
        *,
        governed: set[str],
        tick_interval: float = 5.0,
        on_connect: Callable[[psycopg.Connection[Any]], None] | None = None,
        on_tick: Callable[[psycopg.Connection[Any]], None] | None = None,
        on_stop: Callable[[psycopg.Connection[Any]], None] | None = None,
        on_timer: Callable[[psycopg.Connection[Any]], float] | None = None,
        listen_url: str | None = None,
    ) -> None:
        self.url = url
        self.listen_url = listen_url or _listen.listen_url(url)
        # True: notifications arrive (LISTEN); False: the probe failed and wake-ups poll;
        # None: not connected yet.
        self.listening: bool | None = None
        self.queues = list(queues)
        self._served = set(queues)
        self.channels = channels
        self.fds = fds
        self.governed = set(governed)
        self.shares: dict[str, float] = {}
        self.tick_interval = tick_interval
        self.on_connect = on_connect
        self.on_tick = on_tick
        self.on_stop = on_stop
        # A service with its own cadence (the schedule firing): it returns when to call it again.
        self.on_timer = on_timer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workhorse-listen", daemon=True)
        self.connected = threading.Event()
        # Backend pids of our slots' outcome connections (replaced whole; read by this thread).
        self.own_backends: frozenset[int] = frozenset()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    # ---- the thread ------------------------------------------------------------------------

    def _connect(self, url: str, name: str = "workhorse-supervisor") -> psycopg.Connection[Any]:
        # Under the lock that forking takes: a slot forked meanwhile knows to close its copy.
        with self.fds.lock:
            conn = psycopg.connect(url, autocommit=True, connect_timeout=10,
                                   application_name=name, prepare_threshold=None)
            self.fds.fds.add(conn.fileno())
        return conn

    def _close(self, conn: psycopg.Connection[Any]) -> None:
        with self.fds.lock:
            with contextlib.suppress(Exception):  # a broken connection has no fileno
                self.fds.fds.discard(conn.fileno())
            conn.close()

    def _notify_probe(self, token: str) -> None:
        probe = self._connect(self.listen_url, "workhorse-supervisor-probe")
        try:
            _listen.notify_probe(probe, token)
        finally:
            self._close(probe)

    def _start_listening(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any] | None:
        """The connection that LISTENs (`conn` itself, or one to WORKHORSE_LISTEN_URL), or None
        when the probe shows that LISTEN cannot work there: then wake-ups poll."""
        listener = conn if self.listen_url == self.url else self._connect(
            self.listen_url, "workhorse-supervisor-listen")
        try:
            works = _listen.listen_works(listener, self._notify_probe)
            if works:
                _ops.execute(listener, _ops.listen())
        except BaseException:
            if listener is not conn:
                with contextlib.suppress(Exception):
                    self._close(listener)
            raise
        if self.listening is not works:
            if works:
                log.info("wake-ups: LISTEN on %s", mask(self.listen_url))
            else:
                log.warning(
                    "wake-ups: LISTEN on %s delivers no notifications (PgBouncer in "
                    "transaction mode?); polling for ready jobs every %.1fs instead. Set %s to "
                    "the server or a session-mode pooler for instant wake-ups",
                    mask(self.listen_url), POLL_WAKEUPS, _listen.ENV_LISTEN_URL)
        self.listening = works
        if works:
            return listener
        if listener is not conn:
            self._close(listener)
        return None

    def _run(self) -> None:
        reconnect = Reconnect()
        while not self._stop.is_set():
            conn: psycopg.Connection[Any] | None = None
            listener: psycopg.Connection[Any] | None = None
            try:
                conn = self._connect(self.url)
                listener = self._start_listening(conn)
                if self.on_connect is not None:
                    self.on_connect(conn)
                self.connected.set()
                # Anything sent while we were not listening is lost: tell every slot to look.
                self.channels.broadcast(encode(HINT, self.queues))
                reconnect.succeeded()
                self._serve(conn, listener)
            except psycopg.Error as exc:
                delay = reconnect.failed()
                log.warning("listener: %s (%s); reconnecting in %.1fs", first_line(exc),
                            mask(self.url), delay)
                self._stop.wait(delay)
            except Exception:  # a bug here must not end wake-ups for good: slots would poll
                delay = reconnect.failed()
                log.exception("listener: unexpected error; restarting in %.1fs", delay)
                self._stop.wait(delay)
            finally:
                if conn is not None:
                    if self._stop.is_set() and self.on_stop is not None and not conn.closed:
                        with contextlib.suppress(psycopg.Error):
                            self.on_stop(conn)
                    with contextlib.suppress(Exception):  # closing a broken connection
                        self._close(conn)
                if listener is not None and listener is not conn:
                    with contextlib.suppress(Exception):
                        self._close(listener)

    def _serve(self, conn: psycopg.Connection[Any],
               listener: psycopg.Connection[Any] | None) -> None:
        """Relay notifications from `listener` (None: poll `conn` for ready queues instead)
        and run the timer and `on_tick` on `conn`."""
        next_tick = time.monotonic() + self.tick_interval
        next_due = 0.0  # read the timer now
        last_due_read = 0.0
        next_timer = 0.0 if self.on_timer is not None else float("inf")
        next_poll = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if listener is None:
                if now >= next_poll:
                    ready = _ops.execute(conn, _ops.ready_queues(self.queues))
                    if ready:
                        self.hint(ready)
                    next_poll = now + POLL_WAKEUPS
                timeout = max(0.0, min(next_tick, next_due, next_timer, next_poll) - now)
                self._stop.wait(timeout)
                notified = []
            else:
                timeout = max(0.0, min(next_tick, next_due, next_timer, now + 0.5) - now)
                notified = list(listener.notifies(timeout=timeout, stop_after=1))
            if notified:
                # A burst (one NOTIFY per completed batch) collapses into one message per slot.
                notified.extend(listener.notifies(timeout=0.0) if listener else ())
                own, governed = self.own_backends, self.governed
                served = {
                    n.payload for n in notified
                    if n.payload in self._served
                    and not (n.pid in own and n.payload in governed)
                }
                if served:
                    self.hint(served)
                    # An enqueue with a delay also notifies: its due time may be the next one.
                    next_due = min(next_due, last_due_read + DUE_REFRESH_MIN)
            now = time.monotonic()
            if now >= next_due:
                next_due = self._read_due(conn)
                last_due_read = now
            if self.on_timer is not None and now >= next_timer:
                next_timer = time.monotonic() + self.on_timer(conn)
            if now >= next_tick:
                if self.on_tick is not None:
                    self.on_tick(conn)
                next_tick = now + self.tick_interval

    def hint(self, queues: set[str]) -> None:
        """Ungoverned queues: every slot may claim at once. Governed ones: one slot each."""
        governed = queues & self.governed
        others = queues - governed
        if others:
            self.channels.broadcast(encode(HINT, others))
        for queue in sorted(governed):
            self.channels.send_one(encode(HINT, [queue]))

    def _read_due(self, conn: psycopg.Connection[Any]) -> float:
        """Wake the queues whose timer has passed; returns when to read it again (monotonic)."""
        rows = _ops.execute(conn, _ops.next_due(self.queues))
        mono = time.monotonic()
        soonest = mono + DUE_REFRESH
        due_now: set[str] = set()
        governed: set[str] = set()
        shares: dict[str, float] = {}
        for timer in rows:
            if timer.governed:
                governed.add(timer.queue)
            if timer.share is not None:
                shares[timer.queue] = timer.share
            if timer.due is None:
                continue
            wait = (timer.due - timer.now).total_seconds()
            if wait <= 0:
                due_now.add(timer.queue)
            else:
                soonest = min(soonest, mono + wait + 0.005)
        if governed != self.governed:
            self.governed = governed
            self.channels.broadcast(encode(GOVERNED, governed))
        if shares != self.shares:
            self.shares = shares
            self.channels.broadcast(encode_shares(shares))
        if due_now:
            self.hint(due_now)
            # An expired lease stays "due" until a claim reclaims it: do not spin on it.
            soonest = max(min(soonest, mono + DUE_REFRESH), mono + DUE_REFRESH_MIN)
        return soonest


class WakeupReceiver:
    """The slot's end: hands each message (kind, queue names) to `on_message`."""

    def __init__(self, sock: socket.socket, on_message: Callable[[bytes, set[str]], None]) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self.on_message = on_message

    async def run(self) -> None:
        while True:
            await anyio.wait_readable(self.sock)
            while True:
                try:
                    message = self.sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    break
                if not message:
                    break
                kind, names = decode(message)
                self.on_message(kind, names)

    def report_backend(self, pid: int) -> None:
        """Tell the supervisor which backend our outcomes (and their NOTIFYs) come from."""
        with contextlib.suppress(OSError):
            self.sock.send(encode(BACKEND, [str(pid)]))

    def pass_on(self, queue: str) -> None:
        """Ask the supervisor to hand this governed queue's hint to the next slot."""
        with contextlib.suppress(OSError):
            self.sock.send(encode(PASS, [queue]))
