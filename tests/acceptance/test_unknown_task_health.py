"""Registered tasks (issue #24 item 6, the health side): a real supervisor of app B serving the
queue where app A's job waits registers the tasks B declares; health counts A's ready job as
`unknown_task_ready` and the queue is stalled with the reason "no live supervisor's app declares
task a.report"; `workhorse queues` and the dashboard show both.

The queue is paused: the claim side (a worker passes over a job its app does not declare) is
another change, and until it is in, B's worker would claim A's job and fail it."""

from __future__ import annotations

import pytest
from apps.harness import Worker, scalar, wait_for

from workhorse import EnqueueOptions, Queue

pytestmark = pytest.mark.slow


def test_a_job_no_live_supervisor_declares_is_counted_and_stalls_its_queue(
        database_url, conn, tmp_path):
    queue = Queue(conn)
    queue.pause("shared")
    job_id = queue.enqueue("a.report", {"args": [], "kwargs": {}}, EnqueueOptions(queue="shared"))
    known = queue.enqueue("b.cleanup", {"args": [], "kwargs": {}}, EnqueueOptions(queue="shared"))
    worker = Worker(database_url, "apps.two_apps:app_b", tmp_path / "b.log",
                    "--slots", "1", "--queues", "shared")
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.workers"
                                      " WHERE last_seen > now() - interval '30 s'") == 1,
                 60, "B's supervisor registered", worker)
        tasks = scalar(conn, "SELECT tasks FROM workhorse.workers")
        assert tasks == ["b.cleanup"], tasks
        health = queue.health()
        assert health.unknown_task_ready == {"shared": 1}
        assert "no live supervisor's app declares task a.report" in health.stalled["shared"]
        # Both jobs wait: none was claimed (the queue is paused), nor failed.
        assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'ready'"
                            " AND id IN (%s, %s)", job_id, known) == 2
    finally:
        worker.stop()
    # Once B's supervisor is gone, no live one serves the queue: that is the reason instead.
    health = queue.health()
    assert health.unknown_task_ready == {}
    assert "no live supervisor" in health.stalled["shared"]
    assert "declares task" not in health.stalled["shared"]
