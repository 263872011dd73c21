"""This supervisor's row in `workhorse.workers`: inserted on start, touched every few seconds with
its counters, deleted on a clean exit. Run by the listener thread, on the listener's connection."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from .. import _sql, telemetry
from ..database import connect
from ..queue import Queue

log = logging.getLogger("workhorse.worker")


class Registry:
    def __init__(
        self,
        *,
        app: str,
        host: str,
        pid: int,
        slots: int,
        queues: list[str],
        stats: Callable[[], dict[str, Any]],
    ) -> None:
        self.app = app
        self.host = host
        self.pid = pid
        self.slots = slots
        self.queues = queues
        self.stats = stats
        self.id: int | None = None

    def _insert(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(
            _sql.statement("worker_register"),
            (self.app, self.host, self.pid, self.slots, self.queues, json.dumps(self.stats())),
        ).fetchone()
        self.id = int(row[0]) if row else None

    def connected(self, conn: psycopg.Connection[Any]) -> None:
        if self.id is None:
            self._insert(conn)
        else:
            self.tick(conn)

    def tick(self, conn: psycopg.Connection[Any]) -> None:
        self._publish_health(conn)
        if self.id is None:
            self._insert(conn)
            return
        row = conn.execute(
            _sql.statement("worker_heartbeat"), (json.dumps(self.stats()), self.id)
        ).fetchone()
        if row is None:  # someone pruned our row: put it back
            self._insert(conn)

    def _publish_health(self, conn: psycopg.Connection[Any]) -> None:
        # The concurrency gauges report this snapshot; health is bounded (a sample per policy).
        try:
            telemetry.publish_health(Queue(conn).health())
        except psycopg.Error as exc:
            log.warning("could not read health for the concurrency gauges: %s", exc)

    def unregister(self, conn: psycopg.Connection[Any]) -> None:
        if self.id is not None:
            conn.execute(_sql.statement("worker_unregister"), (self.id,))
            self.id = None

    def unregister_if_needed(self, url: str) -> None:
        """The listener could not delete the row (its connection was down): try once more."""
        if self.id is None:
            return
        try:
            with connect(url, autocommit=True, connect_timeout=5) as conn:
                self.unregister(conn)
        except Exception as exc:  # a stale row ages out through last_seen
            log.warning("could not remove this worker's registry row: %s", exc)
