"""Bug A: completions that committed just before the connection broke (a server crash, `restart
-m immediate`, a cut) are resent on the new connection, found already succeeded, and counted as
"rejected: its lease had been lost": the supervisor's totals come out short (4,998 vs 5,000).

Made deterministic with a proxy that lets the completion through and loses the reply: the rows
commit, the recorder sees a broken connection, re-queues the batch and resends it.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import psycopg
import pytest
from _proxy import ReplyLosingProxy

from workhorse import EnqueueOptions, JobStatus, Queue
from workhorse.worker.executor import Execution, Outcome
from workhorse.worker.recorder import OutcomeRecorder, Recorded

pytestmark = pytest.mark.slow


def _status(conn: psycopg.Connection[Any], ids: list[int]) -> set[str]:
    return {r[0] for r in conn.execute("SELECT status::text FROM workhorse.jobs WHERE id = ANY(%s)",
                                       (ids,))}


def test_a_completion_committed_before_the_connection_broke_counts_as_succeeded(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    queue = Queue(conn)
    ids = queue.enqueue_many([("t", {"args": [i]}, EnqueueOptions(queue="q")) for i in range(3)])
    claimed = sorted(queue.claim("q", 3, 30.0), key=lambda j: j.id)
    outcomes = [Outcome(Execution(job, None, 30.0), result=f'"r{job.id}"') for job in claimed]
    proxy = ReplyLosingProxy(database_url)
    recorded: list[Recorded] = []

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(proxy.dsn(), autocommit=True)

    async def body() -> None:
        # (`on_recorded` takes one more argument on the throughput branch: accept either.)
        recorder = OutcomeRecorder(connect, lambda items, *_: recorded.extend(items),
                                   name="bug-a")
        async with anyio.create_task_group() as tg:
            # The recorder's connection is made; from now on the server's replies are lost.
            await recorder.flush()
            proxy.swallow.set()
            for outcome in outcomes:
                recorder.add(outcome)
            tg.start_soon(recorder.run)
            deadline = time.monotonic() + 10
            while _status(conn, ids) != {"succeeded"}:  # the completion committed
                assert time.monotonic() < deadline, "the completion never committed"
                await anyio.sleep(0.02)
            assert recorded == []  # and the recorder does not know it yet
            proxy.swallow.clear()
            proxy.drop_all()  # the connection breaks; the recorder reconnects and resends
            deadline = time.monotonic() + 10
            while len(recorded) < len(outcomes):
                assert time.monotonic() < deadline, "the outcomes were never accounted for"
                await anyio.sleep(0.02)
            recorder.close()

    try:
        anyio.run(body)
    finally:
        proxy.close()
    assert proxy.swallowed > 0
    assert [job.status for job in map(queue.get_job, ids) if job] == [JobStatus.SUCCEEDED] * 3
    # Each was recorded once, by this very recorder, under its own fence: a success.
    assert [status for _, status in recorded] == [JobStatus.SUCCEEDED] * 3, recorded
