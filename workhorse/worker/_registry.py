"""This supervisor's row in `workhorse.workers`: inserted on start, touched every few seconds with
its counters, deleted on a clean exit; with it, the fleet's housekeeping (one supervisor at a
time): pruning, vacuuming the admission tables, and the planner statistics of `jobs`. Run by the
listener thread, on the listener's connection."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg

from .. import _ops, telemetry
from ..database import connect
from ..errors import first_line

log = logging.getLogger("workhorse.worker")

# One supervisor at a time vacuums the small admission tables: every claim of a per-key queue
# deletes hints and moves heads, and their dead rows would otherwise slow claims until autovacuum.
HOUSEKEEPING_INTERVAL = 30.0
# Retention: expired jobs go in batches of PRUNE_BATCH, for at most PRUNE_BUDGET s per tick (5 s).
PRUNE_BATCH = 5000
PRUNE_BUDGET = 1.0


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
        tasks: list[str] | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self.pid = pid
        self.slots = slots
        self.queues = queues
        self.stats = stats
        self.tasks = tasks  # the task names the app declares (health's unknown_task_ready)
        self.id: int | None = None
        self._next_housekeeping = time.monotonic() + HOUSEKEEPING_INTERVAL
        # The counters already added to the throughput history (the dashboard's chart).
        self._counted = dict.fromkeys(_ops.THROUGHPUT_FIELDS, 0)

    def _insert(self, conn: psycopg.Connection[Any]) -> None:
        self.id = _ops.execute(conn, _ops.register_worker(
            self.app, self.host, self.pid, self.slots, self.queues, self.stats(), self.tasks))

    def connected(self, conn: psycopg.Connection[Any]) -> None:
        self._keep_statistics(conn)
        if self.id is None:
            self._insert(conn)
        else:
            self.tick(conn)

    def tick(self, conn: psycopg.Connection[Any]) -> None:
        self._keep_statistics(conn)
        self._publish_health(conn)
        self._record_throughput(conn)
        self._prune(conn)
        self._housekeeping(conn)
        if self.id is None:
            self._insert(conn)
            return
        if not _ops.execute(conn, _ops.touch_worker(self.id, self.stats())):
            # Someone pruned our row: put it back.
            self._insert(conn)

    def _prune(self, conn: psycopg.Connection[Any]) -> None:
        """Move finished jobs to history, then delete expired jobs (whole days of history
        first), in batches, each its own short transaction, for at most PRUNE_BUDGET seconds a
        tick; one mover or pruner at a time fleet-wide (the SQL try-lock)."""
        deadline = time.monotonic() + PRUNE_BUDGET
        try:
            while time.monotonic() < deadline:
                if _ops.execute(conn, _ops.move_to_history(_ops.MOVE_BATCH)) < _ops.MOVE_BATCH:
                    break
        except psycopg.Error as exc:  # e.g. a role that may not create the day's partition
            log.warning("could not move finished jobs to history: %s", first_line(exc))
        try:
            while time.monotonic() < deadline:
                if _ops.execute(conn, _ops.prune_jobs(PRUNE_BATCH)) < PRUNE_BATCH:
                    return
        except psycopg.Error as exc:
            log.warning("could not prune expired jobs: %s", first_line(exc))

    def _housekeeping(self, conn: psycopg.Connection[Any]) -> None:
        if time.monotonic() < self._next_housekeeping:
            return
        self._next_housekeeping = time.monotonic() + HOUSEKEEPING_INTERVAL
        try:
            # Expired overrides cleared and old rate-limit start buckets pruned under a
            # transaction-scoped lock (no session state: PgBouncer in transaction mode), then
            # VACUUM, which cannot run in a transaction and skips a table being vacuumed.
            with conn.transaction():
                if not _ops.execute(conn, _ops.try_lock_housekeeping()):
                    return
                _ops.execute(conn, _ops.housekeeping())
            _ops.execute(conn, _ops.vacuum_admission_tables())
        except psycopg.Error as exc:  # e.g. not the tables' owner: autovacuum still runs
            log.warning("could not vacuum the admission tables: %s", exc)

    def _keep_statistics(self, conn: psycopg.Connection[Any]) -> None:
        """ANALYZE `jobs` when its planner statistics are missing or stale
        (jobs_statistics_stale.sql), one supervisor at a time: at start, and at every tick,
        whether or not autovacuum runs. A table never analyzed made the planner walk the whole
        ready backlog at every claim (a 300,000-job drain at 4-5k jobs/s instead of 36-40k)."""
        try:
            with conn.transaction():
                if (_ops.execute(conn, _ops.jobs_statistics_stale())
                        and _ops.execute(conn, _ops.try_lock_housekeeping())):
                    _ops.execute(conn, _ops.analyze_jobs())
        except psycopg.Error as exc:  # e.g. not the table's owner: autovacuum still runs
            log.warning("could not analyze workhorse.jobs: %s", first_line(exc))

    def _publish_health(self, conn: psycopg.Connection[Any]) -> None:
        # The concurrency gauges report this snapshot; health is bounded (a sample per policy).
        # Read only once a metrics SDK collects them: with none configured nobody sees the
        # values, and on 8 idle supervisors these reads were a quarter of the server's CPU
        # (docs/architecture.md "Background reads", issue #40).
        if not telemetry.gauges_collected():
            return
        try:
            telemetry.publish_health(_ops.execute(conn, _ops.health()))
        except psycopg.Error as exc:
            log.warning("could not read health for the concurrency gauges: %s", exc)

    def _record_throughput(self, conn: psycopg.Connection[Any]) -> None:
        """Add what this supervisor counted since the last tick to the per-minute history; a
        failed write is retried with the next tick's deltas (nothing is counted twice)."""
        totals = self.stats()
        current = {name: int(totals.get(name, 0)) for name in _ops.THROUGHPUT_FIELDS}
        deltas = {name: current[name] - self._counted[name] for name in current}
        if not any(value > 0 for value in deltas.values()):
            return
        try:
            _ops.execute(conn, _ops.record_throughput(deltas))
        except psycopg.Error as exc:
            log.warning("could not record throughput: %s", first_line(exc))
            return
        self._counted = current

    def unregister(self, conn: psycopg.Connection[Any]) -> None:
        self._record_throughput(conn)
        if self.id is not None:
            _ops.execute(conn, _ops.unregister_worker(self.id))
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
