"""Progress from a running handler in real workers (docs/design.md "Job keys ... progress"): values
read from another process while the handler runs, the flush when the attempt ends, a new attempt
starting with none, a stale handler that cannot write, 1,000 calls a second costing one write a
second (counted, and the count shown to catch a variant that writes every call), and eager and
drain."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from apps import progress
from apps.harness import Worker, scalar, wait_for

from workhorse import EnqueueOptions, JobStatus, Progress, Queue
from workhorse.testing import drain, eager

pytestmark = pytest.mark.slow

# A long lease (heartbeats every 20 s): what the tests count is progress, not renewals.
OPTIONS = ["--slots", "1", "--concurrency", "4", "--dequeue-timeout", "1s", "--lease", "60s"]
SEEN = 60.0  # generous: how long a value may take to show on a machine busy with other tests


@pytest.fixture(autouse=True)
def _app_on_the_test_database(database_url):
    progress.app.database_url = database_url
    yield
    progress.app.close()


def _worker(database_url: str, tmp_path: Path, *extra: str, **env: str) -> Worker:
    return Worker(database_url, "apps.progress:app", tmp_path / "w.log", *OPTIONS, *extra,
                  env=env)


def _markers(tmp_path: Path) -> Path:
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    return markers


def _shows(handle: Any, done: Any, message: str) -> Progress | None:
    p = handle.progress()
    return p if p is not None and p.done == done and p.message == message else None


@pytest.mark.parametrize("task", ["stepper", "stepper_async"])
def test_values_are_read_from_another_process_while_the_handler_runs(
        database_url, conn, tmp_path, task):
    markers = _markers(tmp_path)
    fn = getattr(progress, task)
    with progress.app.using(conn):
        h = fn.delay(3, str(markers))
    worker = _worker(database_url, tmp_path)
    try:
        for i in range(1, 4):
            done, message = (i, f"step {i}") if task == "stepper" else (i / 2, f"async <b>{i}</b>")
            seen = wait_for(lambda d=done, m=message: _shows(h, d, m), SEEN,
                            f"progress {i}", worker)
            assert seen.total == (3 if task == "stepper" else 1.5) and seen.at is not None
            assert h.status() == JobStatus.ACTIVE  # read while the handler runs
            (markers / str(i)).write_text("seen")
        assert h.get(timeout=SEEN) == "done"
    finally:
        assert worker.stop() == 0, worker.output()
    kept = h.progress()
    assert kept is not None and kept.done == (3 if task == "stepper" else 1.5)


def test_flushed_when_the_attempt_ends_and_kept_after_success(database_url, conn, tmp_path):
    with progress.app.using(conn):
        handles = [progress.last_then_return.delay() for _ in range(5)]
    worker = _worker(database_url, tmp_path)
    try:
        assert [h.get(timeout=SEEN) for h in handles] == [7] * 5
    finally:
        assert worker.stop() == 0, worker.output()
    for h in handles:
        p = h.progress()
        assert p is not None and (p.done, p.total, p.message) == (7, 10, "last"), h.id
        assert h.job().progress == p
        assert h.job().status == JobStatus.SUCCEEDED


def test_a_new_attempt_starts_with_no_progress(database_url, conn, tmp_path):
    markers = _markers(tmp_path)
    with progress.app.using(conn):
        h = progress.retried.delay(str(markers))
    worker = _worker(database_url, tmp_path)
    try:
        wait_for(lambda: (j := h.job()) is not None and j.attempts == 2
                 and j.status == JobStatus.ACTIVE, SEEN, "the second attempt", worker)
        # The first attempt's value is still stored (flushed with its failure), and is none
        # for the second attempt.
        stored = scalar(conn, "SELECT progress ->> 'message' FROM workhorse.jobs WHERE id = %s",
                        h.id)
        assert stored == "first attempt"
        assert h.progress() is None and h.job().progress is None
        (markers / "go").write_text("go")
        assert h.get(timeout=SEEN) == "second"
    finally:
        assert worker.stop() == 0, worker.output()
    assert h.progress().message == "second attempt"


def _stored(conn: Any, job_id: int) -> tuple[Any, ...]:
    return conn.execute("SELECT progress, progress_at FROM workhorse.jobs WHERE id = %s",
                        (job_id,)).fetchone()


def assert_nothing_written_since(conn: Any, job_id: int, before: tuple[Any, ...]) -> None:
    """The checker of the stale-handler test: the stored progress has not changed."""
    assert _stored(conn, job_id) == before, "a stale handler's progress was written"


def test_a_stale_handlers_progress_is_not_written(database_url, conn, tmp_path):
    markers = _markers(tmp_path)
    with progress.app.using(conn):
        h = progress.ticker.delay(str(markers))
    # One place, taken by the ticker: the worker cannot claim the expired job again itself
    # before the test does.
    worker = _worker(database_url, tmp_path, "--concurrency", "1")
    queue = Queue(conn)
    try:
        wait_for(lambda: h.progress() is not None, SEEN, "the first progress", worker)
        # The lease runs out (as if the worker had frozen) and another claim takes the job; the
        # handler runs on and keeps reporting, and its slot keeps trying to write every second
        # until its next heartbeat (20 s away) says the lease is lost.
        conn.execute("UPDATE workhorse.jobs SET lease_until = clock_timestamp() "
                     "- interval '1 s' WHERE id = %s", (h.id,))
        [again] = queue.claim("progress", 1, 60)
        assert again.id == h.id and again.attempts == 2
        reclaimed_at = scalar(conn, "SELECT clock_timestamp()")
        before = _stored(conn, h.id)
        ticks = scalar(conn, "SELECT (progress ->> 'done')::bigint FROM workhorse.jobs "
                             "WHERE id = %s", h.id)
        wait_for(lambda: worker.output().count("writing progress failed") == 0
                 and scalar(conn, "SELECT clock_timestamp() > %s + interval '3 s'",
                            reclaimed_at), SEEN, "three write intervals", worker)
        assert_nothing_written_since(conn, h.id, before)
        assert h.progress() is None  # the new attempt has reported nothing
        (markers / "stop").write_text("stop")
        # The stale handler's result is refused too; the new claim's attempt records its own.
        wait_for(lambda: "stale" in worker.output(), SEEN, "the stale outcome", worker)
        assert_nothing_written_since(conn, h.id, before)
        queue.complete(again.id, again.fence, "second claim")
    finally:
        (markers / "stop").write_text("stop")
        assert worker.stop() == 0, worker.output()
    assert ticks is not None and h.get(timeout=5) == "second claim"
    assert h.progress() is None


def test_the_stale_checker_catches_a_write_without_the_fence(conn, queue):
    """The checker above fails on a broken write: the same update without the fence check."""
    job_id = queue.enqueue("progress.ticker", {"args": ["x"], "kwargs": {}},
                           EnqueueOptions(queue="progress", max_attempts=3))
    [first] = queue.claim("progress", 1, 60)
    before = _stored(conn, job_id)
    conn.execute("UPDATE workhorse.jobs SET lease_until = clock_timestamp() - interval '1 s' "
                 "WHERE id = %s", (job_id,))
    [again] = queue.claim("progress", 1, 60)
    assert again.fence != first.fence
    conn.execute(  # the broken variant: no `fence = ` and no lease check
        "UPDATE workhorse.jobs SET progress = jsonb_build_object('done', 1, 'fence', %s::bigint,"
        " 'seq', 1), progress_at = clock_timestamp() WHERE id = %s", (first.fence, job_id))
    with pytest.raises(AssertionError, match="stale handler"):
        assert_nothing_written_since(conn, job_id, before)


COUNTER = """
CREATE TABLE public.progress_writes (job_id bigint, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.count_progress_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.progress_writes (job_id) VALUES (NEW.id);
    RETURN NEW;
END $$;
CREATE TRIGGER count_progress_writes AFTER UPDATE ON workhorse.jobs FOR EACH ROW
    WHEN (OLD.progress_at IS DISTINCT FROM NEW.progress_at)
    EXECUTE FUNCTION public.count_progress_write();
"""


def _flood(database_url: str, conn: Any, tmp_path: Path, seconds: float,
           **env: str) -> tuple[int, int, dict[str, Any]]:
    """Runs flood(seconds) on a real worker; (writes counted, calls made, the result)."""
    conn.execute(COUNTER)
    with progress.app.using(conn):
        h = progress.flood.delay(seconds)
    worker = _worker(database_url, tmp_path, **env)
    try:
        result = h.get(timeout=SEEN + seconds)
    finally:
        assert worker.stop() == 0, worker.output()
    writes = scalar(conn, "SELECT count(*) FROM public.progress_writes WHERE job_id = %s", h.id)
    print(f"flood {seconds:g}s {env or ''}: {result['calls']} calls, {writes} writes")
    # The last value is kept: the flush before the outcome wrote it.
    assert h.progress().done == result["calls"]
    return writes, result["calls"], result


def assert_one_write_a_second(writes: int, seconds: float) -> None:
    """At most one write a second of the handler's run, plus the flush when it ends (and one
    more for a run that straddles a write at either end)."""
    assert writes <= math.ceil(seconds) + 2, f"{writes} progress writes in {seconds:g} s"


@pytest.mark.fleet
def test_a_thousand_calls_a_second_cost_one_write_a_second(database_url, conn, tmp_path):
    writes, calls, result = _flood(database_url, conn, tmp_path, 4.0)
    ran = result["ended"] - result["began"]
    assert calls >= 200 * ran  # hundreds of calls a second (about 1,000 on an idle machine)
    assert writes >= 2  # written while it ran, not only at the end
    assert_one_write_a_second(writes, ran)


@pytest.mark.fleet
def test_the_write_count_fails_on_a_variant_that_writes_each_call(database_url, conn, tmp_path):
    writes, calls, result = _flood(database_url, conn, tmp_path, 2.0, PROGRESS_EVERY_CALL="1")
    assert writes >= calls  # the broken variant: every call wrote (the keeper's write adds)
    with pytest.raises(AssertionError, match="progress writes"):
        assert_one_write_a_second(writes, result["ended"] - result["began"])


def test_bad_input_in_a_handler_is_typed_and_writes_nothing(database_url, conn, tmp_path):
    with progress.app.using(conn):
        h = progress.bad_inputs.delay()
    worker = _worker(database_url, tmp_path)
    try:
        assert h.get(timeout=SEEN) == ["InvalidOptionsError"] * len(progress.BAD)
    finally:
        assert worker.stop() == 0, worker.output()
    assert h.progress() is None
    assert scalar(conn, "SELECT progress FROM workhorse.jobs WHERE id = %s", h.id) is None


def test_eager_keeps_the_last_value():
    with eager(progress.app):
        h = progress.last_then_return.delay()
        assert h.get() == 7
        p = h.progress()
        assert p is not None and (p.done, p.total, p.message) == (7, 10, "last")
        assert p.at is not None and h.job().progress == p
        bad = progress.bad_inputs.delay()
        assert bad.get() == ["InvalidOptionsError"] * len(progress.BAD)
        assert bad.progress() is None


def test_eager_a_retried_attempt_starts_with_none(tmp_path):
    markers = _markers(tmp_path)
    (markers / "go").write_text("go")  # eager runs attempt 2 at once: nothing to wait for
    with eager(progress.app):
        h = progress.retried.delay(str(markers))
        assert h.get() == "second"
        assert h.progress().message == "second attempt"


def test_drain_writes_and_keeps_it(conn):
    with progress.app.using(conn):
        handles = [progress.last_then_return.delay(), progress.bad_inputs.delay()]
    report = drain(progress.app, queues=["progress"])
    assert report.succeeded == 2
    p = handles[0].progress()
    assert p is not None and (p.done, p.total, p.message) == (7, 10, "last")
    assert p.at is not None
    assert handles[1].progress() is None


def test_drain_writes_it_while_the_handler_runs(conn, tmp_path):
    """drain() runs the handler in this thread; another thread reads the value meanwhile and
    only then lets the handler go on."""
    markers = _markers(tmp_path)
    with progress.app.using(conn):
        h = progress.stepper.delay(2, str(markers))
    seen: list[Any] = []

    def watch() -> None:
        for i in (1, 2):
            deadline = time.monotonic() + SEEN
            while time.monotonic() < deadline:
                p = h.progress()
                if p is not None and p.done == i:
                    seen.append((p.done, p.message))
                    break
                time.sleep(0.05)
            (markers / str(i)).write_text("seen")  # on time-out too: the drain ends, and fails

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert drain(progress.app, queues=["progress"], timeout=2 * SEEN).succeeded == 1
    finally:
        watcher.join()
    assert seen == [(1, "step 1"), (2, "step 2")]
