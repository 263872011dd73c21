"""Progress from the handler at the statement level (docs/design.md "Job keys ... progress"): the
write under the job's fence, the newest value winning, the read rule that gives a new attempt
none, bad input typed before anything is kept, and what jobs show and the dashboard print."""

from __future__ import annotations

import math
from typing import Any

import pytest
from click.testing import CliRunner

from workhorse import EnqueueOptions, InvalidOptionsError, JobContext, Progress, Queue, _ops
from workhorse.cli import main
from workhorse.types import check_progress
from workhorse.worker.executor import Executor

LEASE = 30.0


def _claim_one(queue: Queue) -> Any:
    job_id = queue.enqueue("p.task", {"args": [], "kwargs": {}}, EnqueueOptions(queue="p"))
    [claimed] = queue.claim("p", 1, LEASE)
    assert claimed.id == job_id
    return claimed


def _write(queue: Queue, job: Any, seq: int, done: Any, total: Any = None,
           message: str | None = None, fence: int | None = None) -> set[int]:
    return _ops.execute(queue.conn, _ops.write_progress(
        [(job.id, job.fence if fence is None else fence, seq, done, total, message)]))


def _raw(conn: Any, job_id: int) -> tuple[Any, Any]:
    return conn.execute("SELECT progress, progress_at FROM workhorse.jobs WHERE id = %s",
                        (job_id,)).fetchone()


def test_written_under_the_fence_and_read_back(queue: Queue) -> None:
    job = _claim_one(queue)
    assert queue.get_job(job.id).progress is None
    assert _write(queue, job, 1, 40, 100, "pages") == {job.id}
    progress = queue.get_job(job.id).progress
    assert isinstance(progress, Progress)
    assert (progress.done, progress.total, progress.message) == (40, 100, "pages")
    assert progress.at is not None and progress.fraction == 0.4
    # Floats and no total come back as they went.
    assert _write(queue, job, 2, 2.5) == {job.id}
    progress = queue.get_job(job.id).progress
    assert (progress.done, progress.total, progress.message) == (2.5, None, None)
    assert _ops.execute(queue.conn, _ops.job_progress([job.id]))[job.id] == progress


def test_a_stale_fence_or_an_expired_lease_writes_nothing(queue: Queue, conn: Any) -> None:
    job = _claim_one(queue)
    assert _write(queue, job, 1, 1, message="mine") == {job.id}
    before = _raw(conn, job.id)
    assert _write(queue, job, 2, 2, fence=job.fence + 1000) == set()
    assert _raw(conn, job.id) == before
    # Expired, not yet claimed again: still refused (the handler must stop writing).
    conn.execute("UPDATE workhorse.jobs SET lease_until = clock_timestamp() - interval '1 s' "
                 "WHERE id = %s", (job.id,))
    assert _write(queue, job, 3, 3) == set()
    assert _raw(conn, job.id) == before
    # Claimed again: the old fence is refused, and the new attempt reads as having none.
    [again] = queue.claim("p", 1, LEASE)
    assert again.id == job.id and again.fence != job.fence
    assert _write(queue, job, 4, 4) == set()
    assert _raw(conn, job.id) == before
    assert queue.get_job(job.id).progress is None
    assert _ops.execute(queue.conn, _ops.job_progress([job.id])) == {}
    assert _write(queue, again, 1, 9) == {job.id}
    assert queue.get_job(job.id).progress.done == 9


def test_an_older_value_never_replaces_a_newer_one(queue: Queue) -> None:
    job = _claim_one(queue)
    assert _write(queue, job, 5, 5) == {job.id}
    assert _write(queue, job, 3, 3) == set()  # the periodic write lost a race with the flush
    assert _write(queue, job, 5, 5) == set()  # the same value twice: one write
    assert queue.get_job(job.id).progress.done == 5


def test_kept_after_the_job_ends_and_no_write_after(queue: Queue) -> None:
    job = _claim_one(queue)
    assert _write(queue, job, 1, 10, 10, "all") == {job.id}
    queue.complete(job.id, job.fence, "ok")
    assert _write(queue, job, 2, 11) == set()
    assert queue.get_job(job.id).progress.text == "10/10 (100%) all"


@pytest.mark.parametrize(("args", "kwargs"), [
    ((-1,), {}), (("x",), {}), ((True,), {}), ((math.nan,), {}), ((-math.inf,), {}),
    ((1,), {"total": -0.5}), ((1,), {"total": True}), ((1,), {"total": "3"}),
    ((1,), {"message": "m" * 1001}), ((1,), {"message": b"bytes"}), ((1,), {"message": "\x00"}),
    ((1,), {"message": "\ud800"}), ((2**63,), {}), ((None,), {}),
])
def test_bad_input_is_typed_and_nothing_is_kept(args: Any, kwargs: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        check_progress(*args, **kwargs)
    kept: list[Any] = []
    ctx = JobContext(id=1, task="t", queue="q", concurrency_key=None, attempt=1, max_attempts=1,
                     scheduled_for=None, report=lambda *value: kept.append(value))
    with pytest.raises(InvalidOptionsError):
        ctx.progress(*args, **kwargs)
    assert kept == []
    with pytest.raises(InvalidOptionsError):
        Progress(*args, **kwargs)


def test_good_input_at_the_bounds() -> None:
    assert check_progress(0) == (0, None, None)
    assert check_progress(2**63 - 1, 0.0, "m" * 1000)[0] == 2**63 - 1
    assert check_progress(12, 10) == (12, 10, None)  # a low estimate: the bar shows it full
    assert Progress(12, 10).fraction == 1.0 and Progress(3, 0).fraction is None


def test_the_executor_keeps_only_the_latest_value(queue: Queue) -> None:
    job = _claim_one(queue)
    execution = Executor({}, app_name="a", default_lease=LEASE).prepare(job)
    ctx = Executor({}, app_name="a", default_lease=LEASE).context(execution)
    assert execution.unwritten_progress() is None
    for i in range(1, 1001):
        ctx.progress(i, total=1000)
    assert execution.progress == (1000, 1000, 1000, None)
    assert execution.unwritten_progress() == execution.progress
    execution.progress_written = 1000
    assert execution.unwritten_progress() is None


def test_jobs_show_prints_it(database_url: str, queue: Queue) -> None:
    job = _claim_one(queue)
    _write(queue, job, 1, 3, 4, "[bold]pages[/bold]")
    result = CliRunner().invoke(main, ["--database-url", database_url, "jobs", "show",
                                       str(job.id)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "3/4 (75%) [bold]pages[/bold]" in result.output  # literal, not rich markup
    as_json = CliRunner().invoke(main, ["--database-url", database_url, "jobs", "show",
                                        str(job.id), "--json"], catch_exceptions=False)
    assert '"message": "[bold]pages[/bold]"' in as_json.output


def test_the_dashboard_shows_it_escaped(database_url: str, queue: Queue) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from workhorse.dashboard import create_app

    job = _claim_one(queue)
    evil = "<script>alert(1)</script>"
    _write(queue, job, 1, 1, 4, evil)
    with TestClient(create_app(database_url)) as client:
        for path in (f"/jobs/{job.id}", "/queue?name=p"):
            html = client.get(path).text
            assert "1 / 4 (25%)" in html, path
            assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html, path
            assert 'style="width: 25.0%"' in html, path


def test_job_lists_carry_it(queue: Queue) -> None:
    job = _claim_one(queue)
    other = queue.enqueue("p.task", {"args": [], "kwargs": {}}, EnqueueOptions(queue="p"))
    _write(queue, job, 1, 2, 8, "listed")
    listed = {j.id: j.progress for j in queue.list_jobs(queue="p")}
    assert listed[other] is None
    assert listed[job.id] is not None and listed[job.id].text == "2/8 (25%) listed"
