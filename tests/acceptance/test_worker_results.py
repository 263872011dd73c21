"""Results and control across processes: a real worker runs the jobs; this test process reads
their results back with get(), and cancels a running sync job on a governed queue."""

from __future__ import annotations

import asyncio

import pytest
from apps import probe, results
from apps.harness import Worker, scalar, wait_for

from workhorse import App, JobStatus, Queue, TaskCanceledError, TaskFailedError

pytestmark = pytest.mark.slow


def _caller(database_url: str) -> App:
    """A caller in another process would load the same app; here, the same module's app
    pointed at the test database."""
    results.app.close()
    results.app.database_url = database_url
    return results.app


def test_get_returns_results_from_a_worker_fleet(database_url, conn, tmp_path):
    probe.setup(conn)
    app = _caller(database_url)
    Queue(conn).sync_concurrency_policies(app.name, app.policy_definitions())
    handles = [results.add.delay(n, n) for n in range(20)]
    failing = results.explode.delay("no luck")
    worker = Worker(database_url, "apps.results:app", tmp_path / "w.log",
                    "--slots", "2", "--concurrency", "4", "--queues", "math")
    try:
        assert [h.get(timeout=20) for h in handles] == [2 * n for n in range(20)]
        with pytest.raises(TaskFailedError, match="ValueError: no luck") as failed:
            failing.get(timeout=20)
        assert failed.value.job.status.value == "failed"
        assert "remote traceback" in str(failed.value) and "in explode" in str(failed.value)

        async def many() -> list[int]:
            try:
                more = [await results.add.delay_async(1, n) for n in range(5)]
                return list(await asyncio.gather(*(h.get_async(timeout=20) for h in more)))
            finally:
                await app.close_async()  # the async pool belongs to this event loop

        assert asyncio.run(many()) == [1 + n for n in range(5)]
        # A handle rebuilt from an id reads the same result; its expiry came from the app.
        job = app.handle(handles[3].id).wait(timeout=5)
        assert job.result == 6 and job.expires_at is not None
    finally:
        code = worker.stop()
        app.close()
    assert code == 0, worker.output()


def test_cancelling_a_running_sync_job_holds_its_place_until_it_returns(
        database_url, conn, tmp_path):
    """A governed queue of one: cancel the running sync job; the next job must not start while
    the canceled handler still runs (the budget counts what really runs)."""
    probe.setup(conn, {"queue": 1})
    app = _caller(database_url)
    Queue(conn).sync_concurrency_policies(app.name, app.policy_definitions())
    first = results.hold_the_slot.delay("first", 3.0)
    second = results.hold_the_slot.delay("second", 0.1)
    workers = [Worker(database_url, "apps.results:app", tmp_path / f"w{i}.log",
                      "--slots", "2", "--concurrency", "2", "--queues", "one") for i in range(2)]
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'first'"),
                 20, "the first job to start", *workers)
        assert first.cancel().value == "active"  # asked; it is still running
        assert first.job().cancel_requested
        with pytest.raises(TaskCanceledError):
            first.get(timeout=20)
        assert second.get(timeout=20) == "second"
    finally:
        codes = [w.stop() for w in workers]
        app.close()
    assert codes == [0, 0], [w.output() for w in workers]
    _cur, peak, violations = conn.execute(
        "SELECT cur, peak, violations FROM probe_counters WHERE name = 'queue'").fetchone()
    assert (peak, violations) == (1, 0)
    # The second started only after the first handler had returned.
    order = [token for (token,) in conn.execute(
        "SELECT token FROM probe_runs ORDER BY at").fetchall()]
    assert order.index("first:returned") < order.index("second"), order


def test_cancel_in_progress_supersedes_the_running_job_of_a_key(database_url, conn, tmp_path):
    """on_key_full="cancel_in_progress" on a real worker: enqueuing a second job for a key whose
    one place is taken asks the running job to stop; it ends canceled with no result, and the
    second starts only after the first handler returned (the key's peak stays 1)."""
    probe.setup(conn, {"key": 1})
    app = _caller(database_url)
    Queue(conn).sync_concurrency_policies(app.name, app.policy_definitions())
    worker = Worker(database_url, "apps.results:app", tmp_path / "w.log",
                    "--slots", "2", "--concurrency", "2", "--queues", "reindex")
    try:
        first = results.reindex.delay("doc-1", "first", 20.0)
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'first'"),
                 30, "the first job to start", worker)
        second = results.reindex.delay("doc-1", "second", 0.1)
        assert first.job().cancel_requested, "the enqueue asked the running job to stop"
        with pytest.raises(TaskCanceledError):
            first.get(timeout=30)
        assert second.get(timeout=30) == "second"
    finally:
        code = worker.stop()
        app.close()
    assert code == 0, worker.output()
    ended = first.job()
    assert ended.status is JobStatus.CANCELED and ended.result is None
    _cur, peak, violations = conn.execute(
        "SELECT cur, peak, violations FROM probe_counters WHERE name = 'key'").fetchone()
    assert (peak, violations) == (1, 0)
    order = [token for (token,) in conn.execute(
        "SELECT token FROM probe_runs ORDER BY at").fetchall()]
    assert order.index("first:returned") < order.index("second"), order
