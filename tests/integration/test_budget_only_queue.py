"""A queue governed only by a named budget, where operators look (issue #41 item 5; docs/design.md
"Named budgets"): `Queue.list_queues()` and `workhorse queues` (and `--json`) name its budget and
show the budget's units against its limit, health lists the queue as governed (with
`PolicyHealth.budgets`) and `BudgetHealth.used_by` keeps naming the queue after its jobs ran, and
`workhorse health` and `workhorse budgets` say so. Before, such a queue read as ungoverned ("-"),
left `workhorse queues` once its jobs had run, and its budget listed no queue.

Built through the public API (an App with `app.budget(...)` and tasks naming it, `app.sync()`),
on a real database; jobs are claimed and completed through `Queue`, as a worker does. The
dashboard's side is test_dashboard_budget_only_queue.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg.sql
import pytest
from test_cli import cli, ok_json

from workhorse import (
    App,
    BudgetDefinition,
    BudgetHealth,
    EnqueueOptions,
    PolicyHealth,
    Queue,
    QueueSummary,
    Task,
    _ops,
    _sql,
)
from workhorse.cli import _base as cli_base


@dataclass
class Fleet:
    """`openai` (declared by app ai, max_active 3) named by `embeddings` (no policy: only the
    budget governs it) and `summaries` (max_active 10); `plain` names no budget."""

    app: App
    embed: Task[Any, Any]
    summarize: Task[Any, Any]
    plain: Task[Any, Any]


def build_fleet(database_url: str) -> Fleet:
    app = App("ai", database_url=database_url)
    openai = app.budget("openai", max_active=3)

    @app.task(name="ai.embed", queue="embeddings", budget=openai)
    def embed(n: int) -> int:
        return n

    @app.task(name="ai.summarize", queue=app.queue("summaries", max_active=10), budget=openai)
    def summarize(n: int) -> int:
        return n

    @app.task(name="ai.plain", queue="plain")
    def plain(n: int) -> int:
        return n

    app.sync()
    return Fleet(app, embed, summarize, plain)


def start(fleet: Fleet, queue: Queue) -> None:
    """Four embeddings (one ran, one running, two ready: 1 of openai's 3 units in use), one
    summary ready, one plain job ready."""
    for n in range(4):
        fleet.embed.delay(n)
    fleet.summarize.delay(0)
    fleet.plain.delay(0)
    claimed = queue.claim("embeddings", 2, 600)
    assert len(claimed) == 2
    queue.complete(claimed[0].id, claimed[0].fence)


def run_all(queue: Queue) -> None:
    """Every job runs to its end, as workers would run them: nothing is left live."""
    for name in ("embeddings", "summaries", "plain"):
        for job in queue.list_jobs(queue=name, status="active"):
            queue.complete(job.id, job.fence)
        while claimed := queue.claim(name, 10, 600):
            for job in claimed:
                queue.complete(job.id, job.fence)
    assert queue.health().depth["ready"] == queue.health().depth["active"] == 0


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's tables one row a line, as off a terminal, whatever width the test runner's
    environment gave the console when it was made (COLUMNS)."""
    monkeypatch.setattr(cli_base.console, "width", 1000)


@pytest.fixture
def fleet(database_url: str) -> Iterator[Fleet]:
    fleet = build_fleet(database_url)
    yield fleet
    fleet.app.close()


def _row(table: str, queue: str) -> str:
    """The line of a rich table (wide: nothing wraps off a terminal) whose first cell is
    `queue`."""
    found = re.search(rf"^│ {re.escape(queue)} +│.*$", table, re.M)
    assert found, table
    return found.group(0)


# ---- list_queues and `workhorse queues` ---------------------------------------------------------


def test_list_queues_names_the_budget_of_a_queue_it_governs(fleet, queue):
    start(fleet, queue)
    rows = {s.queue: s for s in queue.list_queues()}
    embeddings = rows["embeddings"]
    assert (embeddings.namespace, embeddings.max_active, embeddings.budgets) == (
        None, None, ["openai"])
    assert (embeddings.depth["active"], embeddings.depth["ready"]) == (1, 2)
    assert (rows["summaries"].max_active, rows["summaries"].budgets) == (10, ["openai"])
    assert rows["plain"].budgets == []
    # Its jobs all ran: it is still a queue the budget governs, and still listed.
    run_all(queue)
    rows = {s.queue: s for s in queue.list_queues()}
    assert rows["embeddings"].budgets == ["openai"]
    assert not any(rows["embeddings"].depth.values())
    assert rows["summaries"].budgets == ["openai"]
    assert "plain" not in rows  # nothing governs it and nothing of it is live


def test_a_scheduled_job_s_queue_is_listed_with_its_budget(fleet, queue):
    fleet.embed.apply_async(args=(1,), queue="later", delay=3600)
    [later] = [s for s in queue.list_queues() if s.queue == "later"]
    assert (later.depth["scheduled"], later.budgets) == (1, ["openai"])


def test_workhorse_queues_shows_the_budget_with_its_units_and_limit(
        database_url, fleet, queue):
    start(fleet, queue)
    table = cli(database_url, "queues")
    assert table.exit_code == 0, table.output
    assert re.search(r"┃ limits +┃ budgets +┃ controls", table.stdout), table.stdout
    embeddings = _row(table.stdout, "embeddings")
    # Not "-" in the limits (ungoverned): the budget, its units in use against its max_active.
    assert re.search(r"│ budget only +│ openai 1 / 3 units +│", embeddings), embeddings
    summaries = _row(table.stdout, "summaries")
    assert re.search(r"│ max 10 +│ openai 1 / 3 units +│", summaries), summaries
    assert re.search(r"│ - +│ - +│ - +│$", _row(table.stdout, "plain"))
    rows = {row["queue"]: row for row in ok_json(database_url, "queues")}
    assert (rows["embeddings"]["budgets"], rows["plain"]["budgets"]) == (["openai"], [])
    assert rows["embeddings"]["namespace"] is None
    run_all(queue)
    embeddings = _row(cli(database_url, "queues").stdout, "embeddings")
    assert re.search(r"│ budget only +│ openai 0 / 3 units +│", embeddings), embeddings


def test_a_budget_only_queue_stays_known_to_actions_once_its_jobs_moved_to_history(
        database_url, fleet, queue):
    """`workhorse queues` lists it after its jobs ran, so `queues pause` (without --force) and
    the dashboard's queue page know it too, also once its jobs left `jobs` for history."""
    start(fleet, queue)
    run_all(queue)
    assert queue.move_to_history(after=0) > 0
    assert queue.list_jobs(queue="embeddings", status="active") == []
    assert [s.queue for s in queue.list_queues() if s.queue == "embeddings"] == ["embeddings"]
    paused = cli(database_url, "queues", "pause", "embeddings")
    assert paused.exit_code == 0, paused.output
    assert queue.claim("embeddings", 1, 60) == []
    assert cli(database_url, "queues", "pause", "never-used").exit_code == 1  # still refused


def test_an_undeclared_budget_says_it_limits_nothing(database_url, queue):
    queue.enqueue("t", {}, EnqueueOptions(queue="sync", budget="partner"))
    row = _row(cli(database_url, "queues").stdout, "sync")
    assert "partner (not declared: no limit)" in row, row
    queue.sync_budgets("ns", [BudgetDefinition("partner", rate_limit="10/m")])
    row = _row(cli(database_url, "queues").stdout, "sync")
    assert "partner 0 units, 10/m" in row, row


def test_a_queue_without_budgets_prints_no_budgets_column(database_url, queue):
    queue.enqueue("t", {}, EnqueueOptions(queue="plain"))
    table = cli(database_url, "queues").stdout
    assert "budgets" not in table and "plain" in table


# ---- health -------------------------------------------------------------------------------------


def test_health_lists_a_budget_only_queue_as_governed_by_its_budget(
        database_url, fleet, queue):
    start(fleet, queue)
    health = queue.health()
    policies = {p.queue: p for p in health.policies}
    assert "plain" not in policies  # ungoverned queues stay out
    embeddings = policies["embeddings"]
    assert (embeddings.namespace, embeddings.max_active, embeddings.available) == (
        None, None, None)
    assert (embeddings.active, embeddings.budgets) == (1, ["openai"])
    assert (policies["summaries"].max_active, policies["summaries"].budgets) == (10, ["openai"])
    [openai] = health.budgets
    assert (openai.namespace, openai.max_active, openai.active_units) == ("ai", 3, 1)
    assert openai.queues == ["embeddings", "summaries"]      # ready or active jobs of it
    assert openai.used_by == ["embeddings", "summaries"]
    # The CLI's policies table shows the budget beside the queue's own limits.
    text = cli(database_url, "health").stdout
    assert re.search(r"│ - +│ embeddings +│ budget only +│ openai 1 / 3 units +│",
                     text), text
    data = ok_json(database_url, "health")
    assert {p["queue"]: p["budgets"] for p in data["policies"]} == {
        "embeddings": ["openai"], "summaries": ["openai"]}
    assert data["budgets"][0]["used_by"] == ["embeddings", "summaries"]

    run_all(queue)
    health = queue.health()
    [openai] = health.budgets
    # No job of it is live: `queues` is empty, and `used_by` still names who uses it.
    assert (openai.queues, openai.active_units) == ([], 0)
    assert openai.used_by == ["embeddings", "summaries"]
    [embeddings] = [p for p in health.policies if p.queue == "embeddings"]
    assert (embeddings.active, embeddings.budgets) == (0, ["openai"])
    budgets = cli(database_url, "budgets").stdout
    assert re.search(r"│ openai +│ ai +│ +3 │ - +│ +- │ +0 │ +0 │ embeddings, summaries +│",
                     budgets), budgets


def test_the_budget_s_queues_include_one_with_only_scheduled_jobs(fleet, queue):
    fleet.embed.apply_async(args=(1,), queue="later", delay=3600)
    [openai] = queue.health().budgets
    assert (openai.queues, openai.used_by) == ([], ["later"])
    [later] = [p for p in queue.health().policies if p.queue == "later"]
    assert later.budgets == ["openai"]


def test_the_records_take_the_new_fields_as_defaults():
    """Additive: constructors that predate the budgets keep working."""
    assert QueueSummary("q", {}).budgets == []
    assert PolicyHealth("ns", "q", 5, None, 0, 5, 0, 0, False).budgets == []
    assert BudgetHealth("b", None, None, None, None, None, 0, 0, []).used_by == []


# ---- bounded reads ------------------------------------------------------------------------------


def _jobs_rows(conn: psycopg.Connection[Any], statement: Any, params: Any
               ) -> tuple[int, bool]:
    """The rows the plan's scans of jobs returned in all (EXPLAIN ANALYZE), and whether any
    of them is a sequential scan."""
    [[plan]] = conn.execute(psycopg.sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement,
                            params).fetchall()
    plan = plan if isinstance(plan, list) else json.loads(plan)
    total, sequential = 0, False

    def walk(node: dict[str, Any]) -> None:
        nonlocal total, sequential
        if node.get("Relation Name") == "jobs":
            sequential = sequential or node["Node Type"] == "Seq Scan"
            total += int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
        for child in node.get("Plans", []):
            walk(child)
    walk(plan[0]["Plan"])
    return total, sequential


def test_health_of_budget_only_queues_reads_a_sample_not_the_backlog(conn, queue):
    """20,000 ready jobs in two queues that only a full budget governs: health's policy rows
    for them read their active jobs and a sample of ready jobs each, by index, and its budget
    rows name them without reading jobs for it. The same statement with the sample's LIMIT
    taken out reads the backlog, so the bound can fail."""
    sample = _ops.HEALTH_SAMPLE
    queue.sync_budgets("ns", [BudgetDefinition("flood", max_active=5)])
    for first in range(0, 20_000, 5000):
        queue.enqueue_many([("t", {}, EnqueueOptions(queue=f"q{i % 2}", budget="flood"))
                            for i in range(first, first + 5000)])
    assert len(queue.claim("q0", 5, 600)) == 5
    conn.execute("ANALYZE workhorse.jobs")
    policies = {p.queue: p for p in queue.health().policies}
    assert {q: p.budgets for q, p in policies.items()} == {"q0": ["flood"], "q1": ["flood"]}
    assert (policies["q0"].active, policies["q1"].active) == (5, 0)
    bound = 2 * (sample + 1) + 5   # a capped sample per queue, and q0's active jobs
    statement = _sql.statement("policy_health")
    rows, sequential = _jobs_rows(conn, statement, {"sample": sample})
    assert rows <= bound and not sequential, rows
    broken = psycopg.sql.SQL(statement.as_string(conn).replace("LIMIT %(sample)s + 1", ""))
    rows, _ = _jobs_rows(conn, broken, {"sample": sample})
    assert rows > 10_000
    [flood] = queue.health().budgets
    assert flood.used_by == ["q0", "q1"]


def test_the_statements_stay_below_the_jit_threshold_on_tables_never_analyzed(
        conn, fleet, queue):
    """health() and list_queues() are read by the dashboard and the CLI (and health by
    supervisors whose gauges are collected): with budget_queues in them, on tables never
    analyzed, no plan may be estimated above PostgreSQL's jit_above_cost (100,000), where each
    read would pay for JIT compilation (test_query_plans.py has the story)."""
    start(fleet, queue)
    for name, params in (("policy_health", {"sample": _ops.HEALTH_SAMPLE}),
                         ("budget_health", {"sample": _ops.HEALTH_SAMPLE}),
                         ("list_queues", None)):
        [[plan]] = conn.execute(psycopg.sql.SQL("EXPLAIN (FORMAT JSON) ")
                                + _sql.statement(name), params).fetchall()
        plan = plan if isinstance(plan, list) else json.loads(plan)
        assert plan[0]["Plan"]["Total Cost"] < 100_000, (name, plan[0]["Plan"]["Total Cost"])
