"""Workflows (issue #28, docs/design.md "Workflows", invariant 11): chain, group, chord and
`depends_on`, inserted whole, released in the transaction that records the last needed success
(a row trigger), failures propagated, on a real PostgreSQL through the real claim path (drain)."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from workhorse import (
    App,
    InvalidOptionsError,
    JobStatus,
    PayloadError,
    TaskCanceledError,
    TaskFailedError,
    UnknownTaskError,
    WorkflowHandle,
    _ops,
    chain,
    chord,
    group,
)
from workhorse._enqueue import _single
from workhorse.testing import assert_enqueued, drain, eager

QUEUES = ["wf", "wf2"]


@pytest.fixture
def app(database_url: str) -> Any:
    app = App("wf", database_url=database_url)

    @app.task(name="wf.add", queue="wf")
    def add(a: int, b: int = 0) -> int:
        return a + b

    @app.task(name="wf.total", queue="wf2")
    def total(values: list[int]) -> int:
        return sum(values)

    @app.task(name="wf.boom", queue="wf", max_attempts=1)
    def boom(*args: Any) -> None:
        raise ValueError("boom")

    @app.task(name="wf.hold", queue="wf", max_attempts=1, on_failure="hold")
    def hold(*args: Any) -> None:
        raise ValueError("held")

    @app.task(name="wf.big", queue="wf")
    def big(n: int) -> str:
        return "x" * n

    @app.task(name="wf.echo", queue="wf")
    def echo(*args: Any) -> list[Any]:
        return list(args)

    @app.task(name="wf.noted", queue="wf2")
    def noted(failed_id: int) -> int:
        return failed_id

    app.t = {"add": add, "total": total, "boom": boom, "hold": hold, "big": big,  # type: ignore
             "echo": echo, "noted": noted}
    yield app
    app.close()


def _releases(app: App, h: WorkflowHandle) -> dict[int, int]:
    return {job_id: n for job_id, n, _ in app._run(_single(_ops.workflow_releases(h.id)))}


def _statuses(h: WorkflowHandle) -> list[str]:
    return [job.status.value for job in h.jobs()]


def _count_jobs(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM workhorse.jobs").fetchone()
        assert row is not None
        return int(row[0])


def test_chain_passes_results_and_releases_once(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    h = (t["add"].s(2, 3) | t["add"].s(4) | t["add"].si(1, 1)).delay()
    assert _statuses(h) == ["ready", "waiting", "waiting"]
    jobs = h.jobs()
    assert jobs[1].depends_on == [jobs[0].id] and jobs[0].workflow_id == h.id
    assert app.get_job(jobs[1].id).depends_on == [jobs[0].id]  # type: ignore[union-attr]
    drain(app, QUEUES)
    assert [j.result for j in h.jobs()] == [5, 9, 2]
    assert h.get(timeout=10) == 2
    assert set(_releases(app, h).values()) == {0, 1}
    assert _releases(app, h)[jobs[0].id] == 0  # the head was never "released": it began ready
    st = h.status()
    assert st.finished and st.counts == {"succeeded": 3}


def test_chord_and_nested(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    c = chord(group(t["add"].s(i, i) for i in range(5)), t["total"].s())
    h = c.delay()
    drain(app, QUEUES)
    assert h.get(timeout=10) == 20
    # A group followed by a member is a chord; a member before a group feeds each member.
    h2 = chain(t["add"].s(1, 1), group(t["add"].s(10), t["add"].s(20)), t["total"].s()).delay()
    drain(app, QUEUES)
    assert h2.get(timeout=10) == 12 + 22
    g = group(t["add"].s(1), chain(t["add"].s(2), t["add"].s(3))).delay()
    drain(app, QUEUES)
    assert g.get(timeout=10) == [1, 5]
    assert all(n <= 1 for n in _releases(app, h).values())


def test_failure_cancels_three_levels_and_retry_revives(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    inner = chain(t["boom"].s(), t["add"].s(1))
    h = chain(t["add"].s(1, 1), group(inner, t["add"].s(5)),
              chord(group(t["echo"].s()), t["echo"].s())).delay()
    drain(app, QUEUES)
    jobs = {j.task + str(i): j for i, j in enumerate(h.jobs())}
    boom = next(j for j in h.jobs() if j.task == "wf.boom")
    canceled = [j for j in h.jobs() if j.status is JobStatus.CANCELED]
    assert boom.status is JobStatus.FAILED
    assert len(canceled) == 3, jobs
    for job in canceled:
        assert job.error["type"] == "DependencyFailedError"  # type: ignore[index]
        assert job.error["dependency"] == boom.id  # type: ignore[index]
    with pytest.raises(TaskFailedError) as info:
        h.get(timeout=5)
    assert info.value.job.id == boom.id
    # A retry puts the canceled dependents back to waiting (they stay: boom fails again).
    app.retry([boom.id])
    assert sorted(_statuses(h)).count("waiting") == 3
    assert boom.id in [j.id for j in h.jobs() if j.status is JobStatus.READY]


def test_held_keeps_dependents_waiting_and_retry_lets_them_go(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    h = chain(t["hold"].s(), t["add"].si(1, 2)).delay()
    drain(app, QUEUES)
    assert _statuses(h) == ["held", "waiting"]
    with pytest.raises(TaskFailedError):
        h.get(timeout=5)
    # Make the held job succeed on retry: complete it by hand through the real path.
    held = h.jobs()[0]
    app.retry([held.id])
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        conn.execute("UPDATE workhorse.jobs SET task = 'wf.echo' WHERE id = %s", (held.id,))
    drain(app, QUEUES)
    assert _statuses(h) == ["succeeded", "succeeded"]
    assert h.get(timeout=5) == 3


def test_cancel_workflow_and_waiting_member(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    h = chain(t["add"].s(1), t["add"].s(2), t["add"].s(3)).delay()
    # Canceling a waiting member cancels its dependents.
    app.cancel([h.jobs()[1].id])
    assert _statuses(h) == ["ready", "canceled", "canceled"]
    h2 = chord(group(t["add"].s(1), t["add"].s(2)), t["total"].s()).delay()
    h2.cancel()
    assert set(_statuses(h2)) == {"canceled"}
    with pytest.raises(TaskCanceledError):
        h2.get(timeout=5)


def test_depends_on_existing_jobs(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    a = t["add"].delay(1, 1)
    drain(app, QUEUES)
    b = t["add"].delay(2, 2)
    # One parent already succeeded, one pending: waits for b only.
    x = t["add"].apply_async(args=(7,), depends_on=[a, b.id])
    assert x.status() is JobStatus.WAITING
    assert_enqueued(app, t["add"], args=(7,), count=1)  # waiting members are seen
    drain(app, QUEUES)
    assert x.get(timeout=5) == 7
    # One parent already failed: canceled at once.
    f = t["boom"].delay()
    drain(app, QUEUES)
    y = t["add"].apply_async(args=(1,), depends_on=[f])
    assert y.status() is JobStatus.CANCELED
    # After a whole workflow.
    h = chain(t["add"].s(1, 1), t["add"].s(1)).delay()
    z = t["add"].apply_async(args=(0,), depends_on=[h])
    drain(app, QUEUES)
    assert z.get(timeout=5) == 0
    assert t["add"].apply_async(args=(0,), depends_on=[]).status() is JobStatus.READY


def test_bad_input_typed_and_nothing_written(app: App, database_url: str) -> None:
    t = app.t  # type: ignore[attr-defined]
    before = _count_jobs(database_url)
    with pytest.raises(UnknownTaskError):
        app.signature("wf.nope")
    with pytest.raises(InvalidOptionsError):
        chain(t["add"].s(1), t["add"].s(1, 2)).delay()  # the parent's result is a third arg
    with pytest.raises(InvalidOptionsError):
        group(t["add"].s(1), "not a signature")
    with pytest.raises(InvalidOptionsError):
        group(t["add"].si(i) for i in range(10_001)).delay()
    with pytest.raises(InvalidOptionsError, match="do not exist"):
        t["add"].apply_async(args=(1,), depends_on=[10**12])
    with pytest.raises(InvalidOptionsError):
        chain(t["add"].s(1), t["add"].s(1, 2, 3))
        chain(t["add"].s(1), t["add"].s(1, 2, 3)).delay()
    with pytest.raises(InvalidOptionsError):
        t["add"].s(1).set(bogus=1)
    assert _count_jobs(database_url) == before
    assert app.signature("wf.add", args=[1]).delay(2).get is not None


def test_rolled_back_canvas_leaves_nothing(app: App, database_url: str) -> None:
    t = app.t  # type: ignore[attr-defined]
    before = _count_jobs(database_url)
    with psycopg.connect(database_url) as conn:
        with app.using(conn):
            chord(group(t["add"].s(i) for i in range(3)), t["total"].s()).delay()
        conn.rollback()
    assert _count_jobs(database_url) == before
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM workhorse.workflow_members").fetchone()
        assert row is not None and row[0] == 0


def test_released_payload_too_big_fails_and_cancels(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    h = chain(group(t["big"].s(600_000), t["big"].s(600_000)), t["echo"].s(),
              t["echo"].s()).delay()
    drain(app, QUEUES)
    jobs = h.jobs()
    assert [j.status.value for j in jobs] == ["succeeded", "succeeded", "failed", "canceled"]
    assert jobs[2].error["type"] == PayloadError.__name__  # type: ignore[index]


def test_on_error_once_per_workflow(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    h = group(t["boom"].s(), t["boom"].s(), on_error=t["noted"].s()).delay()
    drain(app, QUEUES)
    first = min(j.id for j in h.jobs())
    with psycopg.connect(app.database_url) as conn:
        rows = conn.execute("SELECT payload, result FROM workhorse.jobs WHERE task = 'wf.noted'"
                            ).fetchall()
    assert len(rows) == 1 and rows[0][1] in {first, first + 1}


def test_queue_level_raised(app: App, database_url: str) -> None:
    t = app.t  # type: ignore[attr-defined]
    chain(t["add"].s(1), t["total"].si([1])).delay()
    with psycopg.connect(database_url) as conn:
        levels = dict(conn.execute("SELECT queue, feature_level FROM workhorse.queue_levels"
                                   ).fetchall())
    assert levels.get("wf") == 2 and levels.get("wf2") == 2


def test_eager_runs_canvas_in_order(app: App) -> None:
    t = app.t  # type: ignore[attr-defined]
    with eager(app):
        h = chord(group(t["add"].s(i, 1) for i in range(4)), t["total"].s()).delay()
        assert h.get() == 10
        h2 = chain(t["boom"].s(), t["add"].s(1)).delay()
        assert _statuses(h2) == ["failed", "canceled"]
        with pytest.raises(TaskFailedError):
            h2.get()


def test_release_counter_checker_catches_double_release(app: App, database_url: str) -> None:
    """The checker the fleet tests use (every released count <= 1, the callback's == 1) fails
    on a broken variant: a trigger that releases on the first success only."""
    t = app.t  # type: ignore[attr-defined]
    broken = _install_first_success_trigger(database_url)
    try:
        h = chord(group(t["add"].s(i) for i in range(3)), t["total"].s()).delay()
        drain(app, QUEUES)
        callback = h.jobs()[-1]
        # Released after the first success: it ran with one result, not three.
        assert callback.result != 0 + 1 + 2 or callback.status is not JobStatus.SUCCEEDED
        with pytest.raises(AssertionError):
            check_released_once(app, h, len(h.jobs()) - 1)
    finally:
        _restore_trigger(database_url, broken)


def check_released_once(app: App, h: WorkflowHandle, expect_results: int) -> None:
    """Every member released at most once; the chord's callback ran with every result."""
    releases = _releases(app, h)
    assert all(n <= 1 for n in releases.values()), releases
    callback = h.jobs()[-1]
    assert callback.status is JobStatus.SUCCEEDED
    assert len(callback.payload["args"][0]) == expect_results, callback.payload


def _install_first_success_trigger(database_url: str) -> str:
    """Replace the release so that the first parent's success releases (a broken variant)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p"
            " WHERE p.proname ~ '^_workflow_release_v' ORDER BY p.proname DESC LIMIT 1"
        ).fetchone()
        assert row is not None
        original = str(row[0])
        broken = original.replace("SET pending = GREATEST(m.pending - v_child.n, 0)",
                                  "SET pending = 0")
        broken = re.sub(r"AND m\.pending > 0\s*\n", "\n", broken, count=1)
        assert broken != original
        conn.execute(broken)
        return original


def _restore_trigger(database_url: str, original: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(original)


def test_waiting_is_counted_cli_and_dashboard(app: App, database_url: str) -> None:
    import json
    import subprocess
    import sys

    from starlette.testclient import TestClient

    from workhorse import Queue
    from workhorse.dashboard import create_app

    t = app.t  # type: ignore[attr-defined]
    h = chain(t["add"].s(1), t["boom"].s(), t["add"].s(1)).delay()
    with psycopg.connect(database_url, autocommit=True) as conn:
        queue = Queue(conn)
        assert queue.health().depth["waiting"] == 2
        by_queue = {q.queue: q.depth for q in queue.list_queues()}
        assert by_queue["wf"]["waiting"] == 2 and by_queue["wf"]["ready"] == 1
    run = subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "workflows", "show",
         str(h.id), "--json"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    shown = json.loads(run.stdout)
    assert shown["counts"] == {"ready": 1, "waiting": 2} and len(shown["jobs"]) == 3
    table = subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "workflows", "show",
         str(h.id)], capture_output=True, text=True, timeout=60)
    assert table.returncode == 0 and "waiting" in table.stdout, table.stderr
    queues = subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "queues", "--json"],
        capture_output=True, text=True, timeout=60)
    listed = {q["queue"]: q["depth"] for q in json.loads(queues.stdout)}
    assert listed["wf"]["waiting"] == 2, queues.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "workflows", "show",
         "999999"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no workflow" in missing.stderr
    with TestClient(create_app(database_url)) as client:
        member = h.jobs()[1]
        page = client.get(f"/jobs/{member.id}")
        assert page.status_code == 200 and f'href="/workflows/{h.id}"' in page.text
        wf_page = client.get(f"/workflows/{h.id}")
        assert wf_page.status_code == 200
        assert all(f'href="/jobs/{j.id}"' in wf_page.text for j in h.jobs())
        assert "waiting" in wf_page.text
        assert client.get("/workflows/999999").status_code == 404


def test_prune_skips_members_of_unfinished_workflows(app: App, database_url: str) -> None:
    from workhorse import Queue

    t = app.t  # type: ignore[attr-defined]
    h = chain(t["add"].s(1), t["hold"].s(), t["add"].s(1)).delay()
    done = chain(t["add"].s(1), t["add"].s(1)).delay()
    drain(app, QUEUES)
    assert _statuses(h) == ["succeeded", "held", "waiting"]
    with psycopg.connect(database_url, autocommit=True) as conn:
        queue = Queue(conn)
        queue.prune_jobs(1000, older_than=0, statuses=["succeeded", "failed", "canceled"])
        left = {row[0] for row in conn.execute("SELECT id FROM workhorse.jobs").fetchall()}
        assert {j.id for j in h.jobs()} <= left and len(h.jobs()) == 3
        assert not done.jobs()  # a finished workflow goes whole, with its rows
        assert conn.execute("SELECT count(*) FROM workhorse.workflows WHERE id = %s",
                            (done.id,)).fetchone() == (0,)


def test_async_twins(app: App, database_url: str) -> None:
    import asyncio

    t = app.t  # type: ignore[attr-defined]

    async def go() -> tuple[WorkflowHandle, WorkflowHandle, Any]:
        first = await chain(t["add"].s(1, 1), t["add"].s(1)).delay_async()
        aconn = await psycopg.AsyncConnection.connect(database_url)
        try:
            second = await group(t["add"].s(1), t["add"].s(2)).enqueue_async(connection=aconn)
            await aconn.rollback()  # inside the caller's transaction: nothing left
            third = await group(t["add"].s(5)).enqueue_async(connection=aconn)
            await aconn.commit()
        finally:
            await aconn.close()
        single = await t["add"].s(2, 2).delay_async()
        assert second.id
        return first, third, single

    first, third, single = asyncio.run(go())
    drain(app, QUEUES)
    assert first.get(timeout=10) == 3
    assert third.get(timeout=10) == [5]
    assert single.get(timeout=10) == 4


def test_enqueue_options_depends_on(app: App, database_url: str) -> None:
    from workhorse import EnqueueOptions, Queue

    with psycopg.connect(database_url, autocommit=True) as conn:
        q = Queue(conn)
        parent = q.enqueue("wf.add", {"args": [1], "kwargs": {}}, EnqueueOptions(queue="wf"))
        child = q.enqueue("wf.add", {"args": [2], "kwargs": {}},
                          EnqueueOptions(queue="wf", depends_on=[parent]))
        assert q.get_job(child).status is JobStatus.WAITING  # type: ignore[union-attr]
        assert q.get_job(child).depends_on == [parent]  # type: ignore[union-attr]
        with pytest.raises(InvalidOptionsError):
            EnqueueOptions(depends_on="7")  # type: ignore[arg-type]
    drain(app, QUEUES)
    assert app.handle(child).get(timeout=10) == 2
