"""Waiting for jobs to finish, for `JobHandle.get` and `wait`: one thread and one connection per
process and database, however many waiters.

The thread LISTENs on the results channel (`listen_results.sql`; complete, fail, cancel and an
expired last lease NOTIFY the ids of jobs that reached a resting status) and, every
`POLL_INTERVAL`, asks which of the waited-for jobs are resting, in one statement: the fallback
for where LISTEN does not work (PgBouncer in transaction mode) or a notification was missed.
`WORKHORSE_LISTEN_URL`, when set, is where it LISTENs. Before relying on LISTEN it checks that a
notification really arrives (`_listen.listen_works`): behind PgBouncer in transaction mode none
ever does, and it then only polls (a result is seen at most POLL_INTERVAL after it is stored).
A waiter holds no connection while it waits: it registers its job id here and sleeps on an
event (or an asyncio future).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from . import _listen, _ops
from .database import mask
from .errors import first_line

log = logging.getLogger("workhorse.results")

ENV_LISTEN_URL = _listen.ENV_LISTEN_URL
# How often waited-for jobs are looked up when no notification came (the poll fallback).
POLL_INTERVAL = 0.5
RECONNECT = 1.0
# With nobody waiting this long, the thread closes its connection and ends (the next waiter
# starts it again).
IDLE_EXIT = 5.0
# The LISTEN probe's wait here: a waiter's first poll comes after it. A false "no" only means
# polling; and once the probe said no, this waiter does not ask again (the thread restarts after
# every idle spell).
PROBE_TIMEOUT = 1.0

_Wake = Callable[[], None]


class ResultWaiter:
    """Per (process, database): `wait(job_id, timeout)` returns when the job rests (True) or
    when the timeout passes (False). Started on first use; a daemon thread."""

    def __init__(self, url: str, listen_url: str | None = None) -> None:
        self.url = url
        self.listen_url = listen_url or url
        self._lock = threading.Lock()
        self._waiting: dict[int, list[_Wake]] = {}
        self._thread: threading.Thread | None = None
        self._kick = threading.Event()
        # Whether the last connect found LISTEN working (None: not connected yet).
        self.listening: bool | None = None
        self._unheard = False  # a probe came back empty: poll from now on
        # Any session may NOTIFY the channel: what it says is parsed defensively, and nothing
        # it (or a bug) raises ends the thread. Each kind of trouble is logged once.
        self._warned_payload = False
        self._warned_crash = False

    # ---- waiters -------------------------------------------------------------------------------

    def _register(self, job_id: int, wake: _Wake) -> None:
        with self._lock:
            self._waiting.setdefault(job_id, []).append(wake)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="workhorse-results", daemon=True)
                self._thread.start()
        self._kick.set()  # look the job up at once: it may have ended before we registered

    def _unregister(self, job_id: int, wake: _Wake) -> None:
        with self._lock:
            wakes = self._waiting.get(job_id)
            if wakes is not None:
                with contextlib.suppress(ValueError):
                    wakes.remove(wake)
                if not wakes:
                    del self._waiting[job_id]

    def wait(self, job_id: int, timeout: float | None) -> bool:
        done = threading.Event()
        self._register(job_id, done.set)
        try:
            return done.wait(timeout)
        finally:
            self._unregister(job_id, done.set)

    async def wait_async(self, job_id: int, timeout: float | None) -> bool:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not future.done():
                future.set_result(None)

        def wake() -> None:
            loop.call_soon_threadsafe(settle)

        self._register(job_id, wake)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._unregister(job_id, wake)

    def _resolve(self, ids: set[int]) -> None:
        with self._lock:
            wakes = [wake for job_id in ids for wake in self._waiting.pop(job_id, [])]
        for wake in wakes:
            with contextlib.suppress(RuntimeError):  # an event loop that closed meanwhile
                wake()

    # ---- the thread ------------------------------------------------------------------------------

    def _idle_exit(self, since: float) -> bool:
        """End the thread if nobody has waited for IDLE_EXIT seconds (decided under the lock
        that registration takes, so a new waiter either sees the thread gone or is served)."""
        with self._lock:
            if self._waiting or time.monotonic() - since < IDLE_EXIT:
                return False
            self._thread = None
            return True

    def _run(self) -> None:
        while True:
            try:
                if self._run_once():
                    return
            except Exception:  # no error may end the thread: waiters would sleep for ever
                if not self._warned_crash:
                    self._warned_crash = True
                    log.exception("results: the waiter thread hit an error; it carries on "
                                  "(reconnecting in %.1fs); further errors are logged at "
                                  "debug level", RECONNECT)
                else:
                    log.debug("results: the waiter thread hit an error", exc_info=True)
                time.sleep(RECONNECT)

    def _run_once(self) -> bool:
        """One connection's life. True when the thread should end (idle)."""
        if self._idle_exit(time.monotonic() - IDLE_EXIT):
            return True
        listener: psycopg.Connection[Any] | None = None
        poller: psycopg.Connection[Any] | None = None
        try:
            poller = psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                     application_name="workhorse-results",
                                     prepare_threshold=None)
            try:
                if self._unheard:
                    raise _NoListen
                listener = poller if self.listen_url == self.url else psycopg.connect(
                    self.listen_url, autocommit=True, connect_timeout=10,
                    application_name="workhorse-results-listen", prepare_threshold=None)
                if _listen.listen_works(listener, self._notify_probe, PROBE_TIMEOUT):
                    _ops.execute(listener, _ops.listen_results())
                    self._listening(True, "")
                else:
                    self._listening(False, "no notification arrives (PgBouncer in "
                                    "transaction mode?)")
                    self._unheard = True
                    if listener is not poller:
                        listener.close()
                    listener = None
            except _NoListen:
                listener = None
            except psycopg.Error as exc:
                self._listening(False, f"cannot LISTEN ({first_line(exc)})")
                if listener is not None and listener is not poller:
                    with contextlib.suppress(Exception):
                        listener.close()
                listener = None
            if self._serve(poller, listener):
                return True
        except psycopg.Error as exc:
            log.warning("results: %s; reconnecting in %.1fs", first_line(exc), RECONNECT)
            time.sleep(RECONNECT)
        finally:
            for conn in {id(c): c for c in (listener, poller) if c is not None}.values():
                with contextlib.suppress(Exception):
                    conn.close()
        return False

    def _notify_probe(self, token: str) -> None:
        with psycopg.connect(self.listen_url, autocommit=True, connect_timeout=10,
                             application_name="workhorse-results-probe",
                             prepare_threshold=None) as probe:
            _listen.notify_probe(probe, token)

    def _listening(self, works: bool, why: str) -> None:
        if not works and self.listening is not False:
            log.warning("results: LISTEN on %s: %s; polling every %.1fs. Set %s to the server "
                        "or a session-mode pooler for instant results", mask(self.listen_url),
                        why, POLL_INTERVAL, ENV_LISTEN_URL)
        self.listening = works

    def _serve(self, poller: psycopg.Connection[Any], listener: psycopg.Connection[Any] | None
               ) -> bool:
        """Serve waiters until an error (raised) or until idle (returns True: the thread ends)."""
        next_poll = 0.0
        busy_at = time.monotonic()
        while True:
            now = time.monotonic()
            if self._kick.is_set() or now >= next_poll:
                self._kick.clear()
                with self._lock:
                    waited = list(self._waiting)
                if waited:
                    busy_at = now
                    self._resolve(_ops.execute(poller, _ops.resting_jobs(waited)))
                elif self._idle_exit(busy_at):
                    return True
                next_poll = now + POLL_INTERVAL
            timeout = max(0.0, min(next_poll - time.monotonic(), 0.05))
            if listener is None:
                self._kick.wait(timeout)
                continue
            ended: set[int] = set()
            heard = False
            for notify in listener.notifies(timeout=timeout, stop_after=1):
                heard = True
                ended.update(self._ids(notify.payload))
            if heard:
                for notify in listener.notifies(timeout=0.0):
                    ended.update(self._ids(notify.payload))
            if ended:
                self._resolve(ended)

    def _ids(self, payload: str) -> set[int]:
        ids, malformed = _ids(payload)
        if malformed and not self._warned_payload:
            self._warned_payload = True
            log.warning("results: ignored a malformed notification on the results channel "
                        "(%.60r; any session may NOTIFY it); further ones are ignored silently",
                        payload)
        return ids


class _NoListen(Exception):
    """This waiter already knows LISTEN does not work on its URL."""


_JOB_ID = re.compile(r"[0-9]{1,19}")
_MAX_ID = 2**63 - 1


def _ids(payload: str) -> tuple[set[int], bool]:
    """The job ids of a notification's payload (comma-separated ASCII decimals), and whether
    anything else was in it. Never raises: `'²'.isdigit()` is true, `int('²')` is not."""
    ids: set[int] = set()
    malformed = False
    for part in str(payload).split(","):
        part = part.strip()
        if _JOB_ID.fullmatch(part) and int(part) <= _MAX_ID:
            ids.add(int(part))
        else:
            malformed = True
    return ids, malformed


_waiters: dict[tuple[int, str], ResultWaiter] = {}
_waiters_lock = threading.Lock()


def waiter(url: str) -> ResultWaiter:
    """This process's waiter for `url` (a forked child gets its own)."""
    key = (os.getpid(), url)
    with _waiters_lock:
        found = _waiters.get(key)
        if found is None:
            found = _waiters[key] = ResultWaiter(url, os.environ.get(ENV_LISTEN_URL) or None)
        return found
