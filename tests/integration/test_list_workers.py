"""`Queue.list_workers` and `AsyncQueue.list_workers`: the supervisors' rows as `WorkerInfo`,
written by the worker's own registry (insert on start, touch with its counters), with `stats`
as the supervisor last published them and `alive` from `last_seen`."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from workhorse import AsyncQueue, Queue, WorkerInfo
from workhorse.worker._registry import Registry


def _registry(name: str, counters: dict[str, Any]) -> Registry:
    return Registry(app=name, host="host-1", pid=4242, slots=3, queues=["mail", "crm"],
                    stats=lambda: dict(counters))


def test_list_workers_shows_each_supervisor_with_its_stats(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    queue = Queue(conn)
    assert queue.list_workers() == []
    counters: dict[str, Any] = {"claimed": 0, "succeeded": 0, "failed": 0}
    first = _registry("billing", counters)
    first.connected(conn)
    counters.update(claimed=12, succeeded=10, failed=2)
    first.tick(conn)  # the counters reach the row
    second = _registry("reports", {"claimed": 1, "succeeded": 1, "failed": 0})
    second.connected(conn)
    # The second supervisor stopped touching its row a minute ago.
    conn.execute("UPDATE workhorse.workers SET last_seen = now() - interval '60 seconds'"
                 " WHERE id = %s", (second.id,))

    workers = queue.list_workers()
    assert all(isinstance(w, WorkerInfo) for w in workers)
    assert [w.app for w in workers] == ["billing", "reports"]  # by start time
    billing, reports = workers
    assert (billing.id, billing.host, billing.pid, billing.slots, billing.queues) == (
        first.id, "host-1", 4242, 3, ["mail", "crm"])
    assert billing.stats == {"claimed": 12, "succeeded": 10, "failed": 2}
    assert billing.alive and not reports.alive
    assert billing.last_seen >= billing.started_at
    assert reports.stats["claimed"] == 1

    async def listed() -> list[WorkerInfo]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            return await AsyncQueue(aconn).list_workers()

    assert asyncio.run(listed()) == workers  # the async twin reads the same rows
