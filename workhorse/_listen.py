"""Whether LISTEN works on a connection, found out by trying it, and where LISTEN connects.

PgBouncer in transaction mode accepts LISTEN and then never delivers a notification: the server
session that ran the LISTEN goes back to the pool after the statement, and a session waiting in
`notifies()` has no server connection at all. Nothing reports an error, so a waiter would hang
until its poll. `listen_works` asks instead: it LISTENs on a private probe channel, has another
session NOTIFY a random token, and waits up to PROBE_TIMEOUT for it. Directly on PostgreSQL (or
through PgBouncer in session mode) the token is back in a millisecond or two; otherwise the
caller polls and says so in its log.

`WORKHORSE_LISTEN_URL` names where LISTEN should connect when the main URL cannot: the server
itself, or a PgBouncer database in session mode.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable
from typing import Any

import psycopg

from . import _ops

ENV_LISTEN_URL = "WORKHORSE_LISTEN_URL"
# How long the probe's NOTIFY may take to come back before LISTEN is judged not to work.
PROBE_TIMEOUT = 2.0


def listen_url(url: str) -> str:
    """Where to LISTEN for `url`: WORKHORSE_LISTEN_URL when it is set, else `url` itself."""
    return os.environ.get(ENV_LISTEN_URL) or url


def listen_works(
    conn: psycopg.Connection[Any],
    notify: Callable[[str], None],
    timeout: float = PROBE_TIMEOUT,
) -> bool:
    """Whether `conn` (autocommit) receives a NOTIFY that `notify(token)` sends from another
    session. Leaves no LISTEN behind on `conn`: on success the caller LISTENs on its own
    channel next; on failure `UNLISTEN *`, so that no pooled server connection keeps it."""
    token = f"probe-{secrets.token_hex(8)}"
    _ops.execute(conn, _ops.listen_probe())
    heard = False
    try:
        notify(token)
        deadline = time.monotonic() + timeout
        while not heard and (left := deadline - time.monotonic()) > 0:
            for notification in conn.notifies(timeout=left, stop_after=1):
                heard = heard or notification.payload == token
    finally:
        with contextlib.suppress(psycopg.Error):
            _ops.execute(conn, _ops.unlisten_probe() if heard else _ops.unlisten_all())
    return heard


def notify_probe(conn: psycopg.Connection[Any], token: str) -> None:
    """The probe's NOTIFY, on a session other than the listener's."""
    _ops.execute(conn, _ops.notify_probe(token))
