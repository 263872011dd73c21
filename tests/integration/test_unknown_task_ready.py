"""`QueueHealth.unknown_task_ready` and its stall reason (issue #24 item 6, the health side):
ready jobs whose task no live supervisor serving their queue declares, counted within the
health sample, from the task names supervisors register. The checker is also run against a
supervisor that registered no task list (an older release's row: every task presumed declared)
and shown to fail."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from workhorse import EnqueueOptions, Queue, _incident, _ops


def _register(conn: psycopg.Connection[Any], queues: list[str], tasks: list[str] | None,
              seen: str = "0 s") -> None:
    worker_id = _ops.execute(conn, _ops.register_worker("b", "h", 1, 1, queues, {}, tasks))
    conn.execute("UPDATE workhorse.workers SET last_seen = now() - %s::interval WHERE id = %s",
                 (seen, worker_id))


def _jobs(queue: Queue, task: str, n: int, name: str = "shared") -> None:
    queue.enqueue_many([(task, {}, EnqueueOptions(queue=name)) for _ in range(n)])


def unknown_counted(queue: Queue, register: Any) -> None:
    _jobs(queue, "a.report", 2)
    _jobs(queue, "b.cleanup", 1)
    register(["shared"], ["b.cleanup"])
    health = queue.health()
    assert health.unknown_task_ready == {"shared": 2}
    assert "no live supervisor's app declares task a.report" in health.stalled["shared"]


def test_ready_jobs_of_a_task_no_serving_supervisor_declares_are_counted(conn, queue):
    unknown_counted(queue, lambda queues, tasks: _register(conn, queues, tasks))


def test_the_checker_fails_when_supervisors_register_no_tasks(conn, queue):
    with pytest.raises(AssertionError):
        unknown_counted(queue, lambda queues, tasks: _register(conn, queues, None))


def test_only_live_supervisors_serving_the_queue_count(conn, queue):
    _jobs(queue, "a.report", 1)
    _jobs(queue, "a.report", 1, name="other")
    _register(conn, ["shared"], ["a.report"], seen="5 min")  # dead: does not declare anything
    _register(conn, ["other"], ["a.report"])                   # alive, but another queue
    _register(conn, ["shared"], ["b.cleanup"])
    assert queue.health().unknown_task_ready == {"shared": 1}
    _register(conn, ["shared", "x"], ["a.report", "b.cleanup"])  # A's supervisor is back
    health = queue.health()
    assert health.unknown_task_ready == {}
    assert "shared" not in health.stalled


def test_a_queue_no_live_supervisor_serves_is_stalled_for_that_not_for_tasks(conn, queue):
    _jobs(queue, "a.report", 1)
    health = queue.health()
    assert health.unknown_task_ready == {}
    assert health.stalled["shared"] == "no live supervisor: none is registered"


def test_a_supervisor_of_an_older_release_is_taken_to_declare_every_task(conn, queue):
    _jobs(queue, "a.report", 1)
    _register(conn, ["shared"], ["b.cleanup"])
    _register(conn, ["shared"], None)
    assert queue.health().unknown_task_ready == {}


def test_the_count_stays_within_the_health_sample(conn, queue):
    _jobs(queue, "a.report", _ops.HEALTH_SAMPLE + 5)
    _register(conn, ["shared"], ["b.cleanup"])
    assert queue.health().unknown_task_ready == {"shared": _ops.HEALTH_SAMPLE}


def test_the_reason_names_the_tasks():
    reasons = _incident.stall_reasons("q", paused=False, limits=(None,), workers=[],
                                      unknown_tasks=["a.x", "a.y"])
    assert reasons[-1] == "no live supervisor's app declares task a.x, a.y"


def test_queues_and_the_dashboard_show_them(conn, queue, database_url):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    from test_cli import cli

    from workhorse.dashboard import create_app

    _jobs(queue, "a.report", 3)
    _register(conn, ["shared"], ["b.cleanup"])
    result = cli(database_url, "queues")
    assert result.exit_code == 0, result.output
    assert ("unknown task shared: 3 ready job(s) of a task no live supervisor serving the queue"
            " declares (a.report)") in result.output
    assert "stalled shared: no live supervisor's app declares task a.report" in result.output
    with TestClient(create_app(database_url)) as client:
        page = client.get("/").text
    assert 'data-unknown-task="shared"' in page and "3 unknown task" in page
    assert "no live supervisor&#39;s app declares task a.report" in page
