"""Tags (issue #43, docs/design.md "Tags") on a real PostgreSQL: set at enqueue by every path
(EnqueueOptions one by one and in shared-option batches, a task's defaults plus a call's, a
signature's `.set()`, a canvas's `apply_async(tags=)` and its on_error job, a schedule's
occurrence, a job_key replace), read back in `Job.tags`, and found by their own index: a tag's
list (newest first, exact), its cancel and its retry (only the statuses each acts on), the CLI's
`--tag`, and pruning that takes a job's lookup rows with it. Bad tags raise InvalidOptionsError
and write nothing.

Each checker reads the job rows and the lookup table itself. Shown to fail on broken variants
(`test_the_list_checker_fails_on_a_list_that_ignores_the_tag`,
`test_the_lookup_checker_fails_when_the_enqueue_writes_no_lookup_rows`)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from _integration import count
from click.testing import CliRunner
from psycopg import sql

from workhorse import (
    App,
    EnqueueOptions,
    InvalidOptionsError,
    JobStatus,
    Queue,
    ScheduleDefinition,
    _sql,
    chain,
    group,
)
from workhorse.cli import main
from workhorse.testing import drain
from workhorse.worker.scheduler import Scheduler

PAYLOAD: dict[str, Any] = {"args": [], "kwargs": {}}


def first_json(output: str) -> Any:
    """The first JSON document the CLI printed (the owners' lines may follow it)."""
    return json.JSONDecoder().raw_decode(output.strip())[0]


def lookup(conn: psycopg.Connection[Any]) -> set[tuple[str, int]]:
    """Every (tag, job id) of the lookup table."""
    return {(tag, job_id) for tag, job_id
            in conn.execute("SELECT tag, job_id FROM workhorse.job_tags").fetchall()}


def stored(conn: psycopg.Connection[Any]) -> dict[int, list[str]]:
    """Each job's tags as its row keeps them."""
    return {job_id: list(tags or []) for job_id, tags
            in conn.execute("SELECT id, tags FROM workhorse.jobs").fetchall()}


def assert_lookup_matches_rows(conn: psycopg.Connection[Any]) -> None:
    """The lookup table holds exactly one row per (tag, job) of the jobs' own tags."""
    expected = {(tag, job_id) for job_id, tags in stored(conn).items() for tag in tags}
    assert lookup(conn) == expected


def test_tags_are_stored_in_order_and_found_newest_first(conn: Any, queue: Queue) -> None:
    one = queue.enqueue("t.a", PAYLOAD, EnqueueOptions(queue="q", tags=["order-1", "acme"]))
    shared = EnqueueOptions(queue="q", tags=["bulk", "acme"])
    batch = queue.enqueue_many([("t.b", PAYLOAD, shared)] * 3)  # one options object: shared path
    mixed = queue.enqueue_many([
        ("t.c", PAYLOAD, EnqueueOptions(queue="q", tags=["order-2"])),
        ("t.c", PAYLOAD, EnqueueOptions(queue="q")),
        ("t.c", PAYLOAD, EnqueueOptions(queue="other", tags=("acme", "acme", "x"))),
    ])
    untagged = queue.enqueue("t.d", PAYLOAD, EnqueueOptions(queue="q"))

    got = queue.get_job(one)
    assert got is not None and got.tags == ["order-1", "acme"]
    assert queue.get_job(mixed[2]).tags == ["acme", "x"]  # type: ignore[union-attr]
    assert queue.get_job(untagged).tags == []  # type: ignore[union-attr]
    assert [j.id for j in queue.list_jobs(tag="bulk")] == sorted(batch, reverse=True)
    assert [j.id for j in queue.list_jobs(tag="acme")] == [mixed[2], *reversed(batch), one]
    assert [j.id for j in queue.list_jobs(tag="acme", queue="q", limit=2)] == batch[:0:-1]
    assert [j.tags for j in queue.list_jobs(tag="order-2")] == [["order-2"]]
    assert queue.list_jobs(tag="nobody-has-it") == []
    # The plain list reads the tags too.
    assert {j.id: j.tags for j in queue.list_jobs(queue="q")}[one] == ["order-1", "acme"]
    assert_lookup_matches_rows(conn)


def test_duplicates_keep_their_tags_and_a_job_key_replace_takes_the_new_ones(
        conn: Any, queue: Queue) -> None:
    first = queue.enqueue("t.i", PAYLOAD, EnqueueOptions(queue="q", idempotency_key="k",
                                                          tags=["first"]))
    again = queue.enqueue("t.i", PAYLOAD, EnqueueOptions(queue="q", idempotency_key="k",
                                                          tags=["second"]))
    assert again == first and queue.get_job(first).tags == ["first"]  # type: ignore[union-attr]

    keyed = queue.enqueue("t.k", PAYLOAD, EnqueueOptions(queue="q", job_key="j", tags=["old"]))
    replaced = queue.enqueue("t.k", PAYLOAD, EnqueueOptions(queue="q", job_key="j",
                                                             tags=["new", "newer"]))
    assert replaced == keyed
    assert queue.get_job(keyed).tags == ["new", "newer"]  # type: ignore[union-attr]
    assert queue.list_jobs(tag="old") == []
    assert [j.id for j in queue.list_jobs(tag="new")] == [keyed]
    untagged = queue.enqueue("t.k", PAYLOAD, EnqueueOptions(queue="q", job_key="j"))
    assert untagged == keyed and queue.get_job(keyed).tags == []  # type: ignore[union-attr]
    assert_lookup_matches_rows(conn)


def test_cancel_and_retry_by_tag_act_only_on_their_statuses(conn: Any, queue: Queue) -> None:
    options = EnqueueOptions(queue="q", tags=["order-9"])
    ready, running, done, failed = queue.enqueue_many([("t.x", PAYLOAD, options)] * 4)
    other = queue.enqueue("t.x", PAYLOAD, EnqueueOptions(queue="q", tags=["order-10"]))
    conn.execute("UPDATE workhorse.jobs SET status = 'succeeded', finished_at = now() "
                 "WHERE id = %s", (done,))
    conn.execute("UPDATE workhorse.jobs SET status = 'failed', finished_at = now() "
                 "WHERE id = %s", (failed,))
    conn.execute("UPDATE workhorse.jobs SET status = 'active', fence = 1, "
                 "lease_until = now() + interval '1 minute', started_at = now() WHERE id = %s",
                 (running,))

    assert sorted(queue.retry_jobs(tag="order-9")) == [failed]
    assert queue.get_job(failed).status is JobStatus.READY  # type: ignore[union-attr]
    assert sorted(queue.cancel_jobs(tag="order-9")) == sorted([ready, running, failed])
    statuses = {j.id: j.status for j in queue.list_jobs(tag="order-9")}
    assert statuses[ready] is JobStatus.CANCELED and statuses[failed] is JobStatus.CANCELED
    assert statuses[done] is JobStatus.SUCCEEDED
    assert queue.get_job(running).cancel_requested  # type: ignore[union-attr]
    assert queue.get_job(other).status is JobStatus.READY  # type: ignore[union-attr]
    # Ids and a tag together: both.
    assert sorted(queue.retry_jobs([other], tag="order-9")) == sorted([ready, failed])


def test_pruning_takes_a_jobs_lookup_rows_with_it(conn: Any, queue: Queue) -> None:
    kept = queue.enqueue("t.p", PAYLOAD, EnqueueOptions(queue="q", tags=["keep", "both"]))
    gone = queue.enqueue_many([("t.p", PAYLOAD, EnqueueOptions(queue="q",
                                                               tags=["gone", "both"]))] * 3)
    conn.execute("UPDATE workhorse.jobs SET status = 'succeeded', "
                 "finished_at = now() - interval '2 days' WHERE id = ANY(%s)", (gone,))
    assert queue.prune_jobs(older_than=86_400) == 3
    assert lookup(conn) == {("keep", kept), ("both", kept)}
    assert [j.id for j in queue.list_jobs(tag="both")] == [kept]


@pytest.mark.parametrize("bad", [
    "urgent", b"x", [""], ["x" * 101], [1], [["nested"]], [f"t{i}" for i in range(17)],
    ["nul\x00"], ["\ud800"], 7,
])
def test_bad_tags_raise_and_write_nothing(conn: Any, queue: Queue, bad: Any) -> None:
    before = count(conn)
    with pytest.raises(InvalidOptionsError):
        queue.enqueue("t.bad", PAYLOAD, EnqueueOptions(queue="q", tags=bad))
    assert count(conn) == before and lookup(conn) == set()


@pytest.mark.parametrize("bad", ["", "x" * 101, 3, None.__class__])
def test_bad_tag_filters_raise(queue: Queue, bad: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        queue.list_jobs(tag=bad)
    with pytest.raises(InvalidOptionsError):
        queue.cancel_jobs(tag=bad)
    with pytest.raises(InvalidOptionsError):
        queue.retry_jobs(tag=bad)


def test_a_task_call_signature_and_canvas_add_their_tags(database_url: str, conn: Any) -> None:
    app = App("tags", database_url=database_url)

    @app.task(name="tags.add", queue="tq", tags=["billing"])
    def add(a: int, b: int = 0) -> int:
        return a + b

    @app.task(name="tags.boom", queue="tq")
    def boom() -> None:
        raise ValueError("boom")

    @app.task(name="tags.noted", queue="tq", tags=["alerts"])
    def noted(failed_id: int) -> int:
        return failed_id

    try:
        plain = add.delay(1, 2)
        called = add.apply_async((1,), tags=["order-7", "billing"])
        signed = add.s(3).set(tags=["sig"]).delay()
        assert [queue_tags(conn, h.id) for h in (plain, called, signed)] == [
            ["billing"], ["billing", "order-7"], ["billing", "sig"]]
        flow = chain(add.s(1, 1), add.s(2)).apply_async(tags=["order-8"])
        assert [j.tags for j in flow.jobs()] == [["billing", "order-8"]] * 2
        failing = group(boom.s(), boom.s().set(max_attempts=1),
                        on_error=noted.s()).apply_async(tags=["order-9"])
        assert [j.tags for j in failing.jobs()] == [["order-9"]] * 2
        drain(app, ["tq"])
        [on_error] = Queue(conn).list_jobs(task="tags.noted")
        assert on_error.tags == ["alerts", "order-9"]
        assert on_error.id in {j.id for j in Queue(conn).list_jobs(tag="order-9")}
        with pytest.raises(InvalidOptionsError):
            add.apply_async((1,), tags=[f"t{i}" for i in range(16)])  # 17 with the task's
        with pytest.raises(InvalidOptionsError):
            add.s(1).set(tags="one-string")
        with pytest.raises(InvalidOptionsError):
            App("bad", database_url=database_url).task(name="t.bad", tags=["x" * 101])(
                lambda: None)
        assert_lookup_matches_rows(conn)
    finally:
        app.close()


def queue_tags(conn: psycopg.Connection[Any], job_id: int) -> list[str]:
    job = Queue(conn).get_job(job_id)
    assert job is not None
    return job.tags


def test_a_schedules_jobs_carry_its_tasks_tags(database_url: str, conn: Any) -> None:
    app = App("tagged-schedules", database_url)

    @app.periodic(every="10s", name="digest", queue="sq", tags=["reports"])
    def digest() -> None: ...

    try:
        assert app.schedules["digest"].tags == ("reports",)
        app.sync()
        [stored_schedule] = Queue(conn).list_schedules("tagged-schedules")
        assert stored_schedule.definition == app.schedules["digest"]  # no drift from tags
        assert app.sync().schedules.unchanged == ["digest"]  # type: ignore[union-attr]
        conn.execute(
            "UPDATE workhorse.schedules SET next_run_at = now() - interval '15 seconds' "
            "WHERE name = 'digest'")
        Scheduler("tagged-schedules").fire(conn)
        fired = Queue(conn).list_jobs(tag="reports")
        assert fired and all(j.tags == ["reports"] and j.task == digest.name for j in fired)
        with pytest.raises(Exception, match="tag"):
            ScheduleDefinition("bad", "t.x", every="1m", tags=[""])
    finally:
        app.close()


def test_the_cli_lists_cancels_and_retries_by_tag(database_url: str, conn: Any,
                                                  queue: Queue) -> None:
    ids = queue.enqueue_many([("t.cli", PAYLOAD, EnqueueOptions(queue="cq", tags=["acme"]))] * 2)
    queue.enqueue("t.cli", PAYLOAD, EnqueueOptions(queue="cq"))
    runner = CliRunner()
    base = ["--database-url", database_url]
    listed = runner.invoke(main, [*base, "jobs", "list", "--tag", "acme", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [j["id"] for j in first_json(listed.output)] == sorted(ids, reverse=True)
    table = runner.invoke(main, [*base, "jobs", "list", "--tag", "acme"])
    assert table.exit_code == 0 and "acme" in table.output
    canceled = runner.invoke(main, [*base, "jobs", "cancel", "--tag", "acme", "--json"])
    assert canceled.exit_code == 0, canceled.output
    assert sorted(first_json(canceled.output)["canceled"]) == sorted(ids)
    retried = runner.invoke(main, [*base, "jobs", "retry", "--tag", "acme", "--queue", "cq",
                                   "--json"])
    assert retried.exit_code == 0, retried.output
    assert sorted(first_json(retried.output)["released"]) == sorted(ids)
    bad = runner.invoke(main, [*base, "jobs", "list", "--tag", "x" * 101])
    assert bad.exit_code != 0 and "tag" in bad.output
    both = runner.invoke(main, [*base, "jobs", "retry", "1", "--tag", "acme"])
    assert both.exit_code == 2


def test_the_list_checker_fails_on_a_list_that_ignores_the_tag(
        conn: Any, queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken variant: the tag's list statement without its tag condition. The checker
    of the first test (the exact ids of one tag) then sees every tagged job."""
    tagged = queue.enqueue("t.a", PAYLOAD, EnqueueOptions(queue="q", tags=["mine"]))
    queue.enqueue("t.a", PAYLOAD, EnqueueOptions(queue="q", tags=["theirs"]))
    text = _sql.statement("list_jobs_by_tag").as_string()
    broken = sql.SQL(text.replace("WHERE t.tag = %(tag)s::text",
                                  "WHERE %(tag)s::text IS NOT NULL"))
    assert broken.as_string() != text
    real = _sql.statement
    monkeypatch.setattr(_sql, "statement",
                        lambda name: broken if name == "list_jobs_by_tag" else real(name))
    assert [j.id for j in queue.list_jobs(tag="mine")] != [tagged]


def test_the_lookup_checker_fails_when_the_enqueue_writes_no_lookup_rows(
        conn: Any, queue: Queue) -> None:
    """The broken variant: an enqueue whose lookup rows are lost (deleted here after it). The
    checker that compares the rows' tags with the lookup table then fails, and so does the
    list by tag."""
    job = queue.enqueue("t.a", PAYLOAD, EnqueueOptions(queue="q", tags=["lost"]))
    conn.execute("DELETE FROM workhorse.job_tags")
    with pytest.raises(AssertionError):
        assert_lookup_matches_rows(conn)
    assert [j.id for j in queue.list_jobs(tag="lost")] != [job]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _nodes(child))]


def test_a_tags_newest_jobs_are_a_walk_of_its_index_not_of_its_jobs(conn: Any) -> None:
    """A tag on 20,000 jobs (and others beside it): its newest 50 read about 50 entries of
    job_tags' primary key, backwards, and each job by its id (no sequential scan, no sort of the
    tag's jobs). The same plan on a million jobs is what benchmarks/bench_tags.py times."""
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, payload, status, tags)"
        " SELECT 't', 'q', '{}', 'ready', ARRAY['big', 'k' || (g % 100)]"
        " FROM generate_series(1, 20000) g")
    conn.execute("INSERT INTO workhorse.job_tags (tag, job_id)"
                 " SELECT unnest(tags), id FROM workhorse.jobs")
    conn.execute("ANALYZE workhorse.jobs")
    conn.execute("ANALYZE workhorse.job_tags")
    statement = _sql.statement("list_jobs_by_tag")
    params = {"tag": "big", "queue": None, "status": None, "key": None, "task": None,
              "limit": 50}
    [[document]] = conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement,
                                params).fetchall()
    nodes = _nodes(document[0]["Plan"])
    kinds = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    assert not any(kind == "Seq Scan" for kind, _, _ in kinds), kinds
    # No Sort of the tag's jobs: the only one that may sort rows merges the live and history
    # sides' newest 50 each (at most 100 rows); the one under depends_on's subplan (a workflow
    # member's parents) never runs for these jobs, which belong to no workflow.
    sorted_rows = [sum(c["Actual Rows"] * c["Actual Loops"] for c in n["Plans"])
                   for n in nodes if n["Node Type"] == "Sort"]
    assert all(rows <= 100 for rows in sorted_rows), (sorted_rows, kinds)
    [walk] = [n for n in nodes if n.get("Index Name") == "job_tags_pkey"]
    assert walk["Scan Direction"] == "Backward" and walk["Actual Rows"] <= 60, walk
    rows = conn.execute(statement, params).fetchall()
    assert [row[0] for row in rows] == sorted((row[0] for row in rows), reverse=True)
    assert len(rows) == 50
