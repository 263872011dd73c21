"""Another app's jobs (issue #24 item 6): a real supervisor of app B serving the queue where app
A's jobs wait never claims them. It runs B's jobs behind a flood of A's; A's jobs stay `ready`
with no attempt used; health counts them as `unknown_task_ready` and says the queue is stalled
for them ("no live supervisor's app declares task a.report"). Once A's supervisor starts, A's
jobs run there and nowhere else.

Before the claim filter, B's worker claimed A's jobs and failed them for good with
UnknownTaskError: the assertions on A's jobs (ready, attempts 0, then succeeded by A's worker)
are what caught it."""

from __future__ import annotations

import pytest
from apps.harness import Worker, scalar, wait_for

from workhorse import EnqueueOptions, JobStatus, Queue

pytestmark = pytest.mark.slow

FLOOD = 300


def _live_workers(conn) -> int:
    return scalar(conn, "SELECT count(*) FROM workhorse.workers"
                        " WHERE last_seen > now() - interval '30 s'")


def test_a_worker_never_claims_another_apps_jobs(database_url, conn, tmp_path):
    queue = Queue(conn)
    a_jobs = queue.enqueue_many([("a.report", {"args": [], "kwargs": {}},
                                  EnqueueOptions(queue="shared"))] * FLOOD)
    b_jobs = queue.enqueue_many([("b.cleanup", {"args": [], "kwargs": {}},
                                  EnqueueOptions(queue="shared"))] * 20)
    worker_b = Worker(database_url, "apps.two_apps:app_b", tmp_path / "b.log",
                      "--slots", "1", "--concurrency", "4", "--queues", "shared")
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status ="
                                      " 'succeeded' AND task = 'b.cleanup'") == len(b_jobs),
                 60, "B's jobs to run behind A's flood", worker_b)
        assert scalar(conn, "SELECT tasks FROM workhorse.workers") == ["b.cleanup"]
        # Every one of A's jobs is untouched: never claimed, so no attempt used, no error.
        assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE task = 'a.report'"
                            " AND status = 'ready' AND attempts = 0 AND error IS NULL"
                            " AND started_at IS NULL") == FLOOD
        health = queue.health()
        assert health.unknown_task_ready == {"shared": FLOOD}
        assert "no live supervisor's app declares task a.report" in health.stalled["shared"]

        worker_a = Worker(database_url, "apps.two_apps:app_a", tmp_path / "a.log",
                          "--slots", "1", "--concurrency", "4", "--queues", "shared")
        try:
            wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status ="
                                          " 'succeeded' AND task = 'a.report'") == FLOOD,
                     90, "A's worker to run A's jobs", worker_a)
        finally:
            assert worker_a.stop() == 0, worker_a.output()
        assert "a.report" not in worker_b.output()  # B's worker logged none of A's jobs
        assert all(queue.get_job(j).status is JobStatus.SUCCEEDED for j in a_jobs[:5])
        assert scalar(conn, "SELECT max(attempts) FROM workhorse.jobs") == 1
        assert queue.health().unknown_task_ready == {}
    finally:
        assert worker_b.stop() == 0, worker_b.output()
    # No live supervisor serves the queue now: that is the reason a new job would stall for.
    queue.enqueue("a.report", {"args": [], "kwargs": {}}, EnqueueOptions(queue="shared"))
    assert _live_workers(conn) == 0
    stalled = queue.health().stalled["shared"]
    assert "no live supervisor" in stalled and "declares task" not in stalled
