"""The databases one dashboard reads (docs/design.md "Several databases"): a pool of connections
each, by name.

With one database nothing changes: its pool opens when the dashboard starts (which fails when
the database cannot be reached), and a read that fails answers 503, as it always did.

With several, a database that cannot be reached must not hide the others: it is tried when the
dashboard starts and, while it stays down, again at most every RETRY_SECONDS, in a thread of its
own that a page waits for at most TRY_WAIT seconds (a read in between says "cannot be reached"
at once, with the reason of the last try). A try is a plain connection with a short
connect_timeout, then the schema (when it installs itself), then a fresh pool: a pool left to
reconnect by itself backs off for minutes, so a database that answers again would stay "down"
long after. A read whose connection breaks, or that waits POOL_WAIT seconds for one, marks its
database down the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from .. import database
from ..errors import WorkhorseError, first_line

# While a database cannot be reached, it is tried again at most this often (seconds).
RETRY_SECONDS = 5.0
# libpq's connect_timeout (seconds) for a try and for the pool's connections, unless the URL
# names its own: a host that drops packets must not hold a page for minutes.
CONNECT_TIMEOUT = 3
# How long (seconds) a read waits for one of a reachable database's pooled connections.
POOL_WAIT = 10.0
# How long (seconds) a page waits for a try of a database that did not answer (the try goes on
# in its own thread, and the page says "cannot be reached" meanwhile).
TRY_WAIT = 1.0
MIN_CONNECTIONS = 1
MAX_CONNECTIONS = 4


class Unreachable(Exception):
    """Database `name` cannot be reached now (several databases: its part of a page says so)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"database {name!r} cannot be reached: {reason}")
        self.name = name
        self.reason = reason


def _pool(name: str, url: str, *, several: bool) -> ConnectionPool:
    kwargs: dict[str, Any] = {"autocommit": True}
    if several and "connect_timeout" not in _params(url):
        kwargs["connect_timeout"] = CONNECT_TIMEOUT
    return ConnectionPool(url, min_size=MIN_CONNECTIONS, max_size=MAX_CONNECTIONS, open=False,
                          kwargs=kwargs,
                          name="workhorse-dashboard" if not several
                          else f"workhorse-dashboard-{name}")


class Source:
    """One database of the dashboard: its name, its URL and its pool. `several` says whether
    it is one of several (then a failure is remembered and shown, not raised)."""

    def __init__(self, name: str, url: str, *, several: bool) -> None:
        self.name = name
        self.url = url
        self.several = several
        self.pool = _pool(name, url, several=several)
        self.lock = threading.Lock()
        self.opened = False
        self.reason: str | None = None   # why the last try failed (None: it did not)
        self.tried_at = 0.0              # time.monotonic() of the last failed try
        self.trying: threading.Thread | None = None
        self.closed = False

    # ---- the dashboard's start and stop ----------------------------------------------------

    def start(self) -> None:
        """Open the pool. One database: as the dashboard always did (a failure stops the start).
        Several: try once; a failure is remembered and shown on the pages."""
        if not self.several:
            database.ensure_schema(self.url)
            self.pool.open(wait=True, timeout=30)
            self.opened = True
            return
        self._try()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.pool.close()
            self.opened = False

    # ---- reading -------------------------------------------------------------------------

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection. Several databases: Unreachable when the database
        cannot be reached (now, or at its last try less than RETRY_SECONDS ago)."""
        if not self.several:
            with self.pool.connection() as conn:
                yield conn
            return
        pool = self._ready()
        try:
            conn_cm = pool.connection(timeout=POOL_WAIT)
            conn = conn_cm.__enter__()
        except psycopg.OperationalError as exc:  # PoolTimeout and PoolClosed are ones too
            self._lost(pool, exc)
            raise Unreachable(self.name, first_line(exc)) from None
        try:
            yield conn
        except psycopg.OperationalError as exc:
            broken = conn.broken or conn.closed
            conn_cm.__exit__(type(exc), exc, exc.__traceback__)
            if broken:  # the connection went with its server: the database is down
                self._lost(pool, exc)
                raise Unreachable(self.name, first_line(exc)) from None
            raise
        except BaseException as exc:
            conn_cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        else:
            conn_cm.__exit__(None, None, None)

    def _ready(self) -> ConnectionPool:
        """The pool, while the database answers. While it does not: a new try once the last
        is RETRY_SECONDS old, in its own thread, awaited at most TRY_WAIT seconds (a database
        that answers again is used at once; one whose packets are dropped holds no page);
        Unreachable with the last try's reason when it is not open after that."""
        with self.lock:
            if self.closed:
                raise Unreachable(self.name, "the dashboard is stopping")
            if self.opened:
                return self.pool
            due = time.monotonic() - self.tried_at >= RETRY_SECONDS
            if due and (self.trying is None or not self.trying.is_alive()):
                self.trying = threading.Thread(target=self._try, daemon=True,
                                               name=f"workhorse-dashboard-try-{self.name}")
                self.trying.start()
            trying = self.trying
        if trying is not None:
            trying.join(TRY_WAIT)
        with self.lock:
            if self.opened and not self.closed:
                return self.pool
            raise Unreachable(self.name, self.reason or "being tried")

    def _try(self) -> None:
        """Try the database: a plain connection first (it fails at once where a pool would
        retry), its schema, then a fresh pool, which replaces the closed one. A failure is
        remembered (`reason`, `tried_at`)."""
        pool = None
        try:
            probe: dict[str, Any] = {} if "connect_timeout" in _params(self.url) else {
                "connect_timeout": CONNECT_TIMEOUT}
            psycopg.connect(self.url, autocommit=True, **probe).close()  # it answers
            database.ensure_schema(self.url)
            pool = _pool(self.name, self.url, several=True)
            pool.open(wait=True, timeout=POOL_WAIT)
        except (psycopg.Error, WorkhorseError) as exc:
            if pool is not None:
                pool.close()
            with self.lock:
                self.reason = first_line(exc)
                self.tried_at = time.monotonic()
            return
        with self.lock:
            if self.closed:
                old = pool
            else:
                old, self.pool = self.pool, pool
                self.opened = True
                self.reason = None
        old.close()

    def _lost(self, pool: ConnectionPool, exc: BaseException) -> None:
        """The database stopped answering: close its pool (a fresh one is made when it answers
        again) and remember why."""
        with self.lock:
            if pool is self.pool and self.opened:
                self.opened = False
                self.reason = first_line(exc)
                self.tried_at = time.monotonic()
                # Connections still lent out are closed as they come back.
                threading.Thread(target=pool.close, kwargs={"timeout": 1.0},
                                 name=f"workhorse-dashboard-close-{self.name}",
                                 daemon=True).start()


def _params(url: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return {}


__all__ = ["RETRY_SECONDS", "Source", "Unreachable"]
