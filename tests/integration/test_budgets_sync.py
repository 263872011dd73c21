"""Named budgets (issue #30, docs/design.md "Named budgets ... and rate bursts"): declaration, sync,
storage, validation, listing, overrides and health. Admission by budget is in
test_budget_admission.py; nothing here claims."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any

import psycopg
import psycopg.sql
import pytest
from click.testing import CliRunner

from workhorse import (
    App,
    AsyncQueue,
    Budget,
    BudgetDefinition,
    BudgetHealth,
    BudgetSpec,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    InvalidPolicyError,
    PolicyConflictError,
    Queue,
    SyncReport,
    UndeclaredBudgetWarning,
)
from workhorse.cli import main

B = BudgetDefinition


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's tables print whole off a terminal unless COLUMNS says otherwise (xdist sets
    it): the text checks below look for whole names."""
    monkeypatch.delenv("COLUMNS", raising=False)


def _stored(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every stored budget and budget override, as rows: what "nothing written" compares."""
    budgets = conn.execute(
        "SELECT namespace, name, max_active, rate_limit, rate_period, rate_burst, updated_at"
        " FROM workhorse.budgets ORDER BY name").fetchall()
    controls = conn.execute(
        "SELECT name, max_active, rate_limit, rate_burst, override_set_at"
        " FROM workhorse.budget_controls ORDER BY name").fetchall()
    return [*budgets, ("controls", *controls)]


# ---- validation: typed, at construction, nothing written ----------------------------------------

BAD_DEFINITIONS: list[tuple[str, dict[str, Any]]] = [
    ("empty name", {"name": "", "max_active": 1}),
    ("name over 255", {"name": "b" * 256, "max_active": 1}),
    ("NUL in name", {"name": "a\x00b", "max_active": 1}),
    ("name not a str", {"name": 7, "max_active": 1}),
    ("no limit", {"name": "b"}),
    ("max_active 0", {"name": "b", "max_active": 0}),
    ("max_active bool", {"name": "b", "max_active": True}),
    ("max_active too big", {"name": "b", "max_active": 1_000_001}),
    ("bad rate", {"name": "b", "rate_limit": "lots"}),
    ("rate_burst above N", {"name": "b", "rate_limit": "10/s", "rate_burst": 11}),
    ("rate_burst 0", {"name": "b", "rate_limit": "10/s", "rate_burst": 0}),
    ("rate_burst bool", {"name": "b", "rate_limit": "10/s", "rate_burst": True}),
    ("burst without a rate", {"name": "b", "max_active": 3, "rate_burst": 1}),
]


@pytest.mark.parametrize(("case", "fields"), BAD_DEFINITIONS, ids=[c for c, _ in BAD_DEFINITIONS])
def test_bad_budget_definitions_are_typed_and_write_nothing(
        case: str, fields: dict[str, Any], queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_budgets("ns", [B("kept", max_active=4)])
    conn.commit()
    before = _stored(conn)
    with pytest.raises(InvalidPolicyError):
        queue.sync_budgets("ns", [B(**fields)])
    if case == "no limit":
        # app.budget(name) with no limits declares nothing: it names a budget (docs/design.md
        # "Holds"), so there is nothing to refuse and nothing to sync.
        assert App("ns").budget(**fields).definition is not None
        assert App("ns").budget_definitions() == []
    else:
        with pytest.raises(InvalidPolicyError):
            App("ns").budget(**fields)
        # An app's sync never reaches the database with it either.
        app = App("ns", database_url="postgresql://invalid.invalid/none")
        with pytest.raises(InvalidPolicyError):
            app.budget(**fields)
    assert _stored(conn) == before


def test_a_good_definition_normalises_its_rate() -> None:
    d = B("openai", max_active=50, rate_limit="3000 / 1m", rate_burst=100)
    assert (d.rate_limit, d.rate.n, d.rate.period) == ("3000/m", 3000, 60.0)
    assert B("partner", rate_limit="5/10s", rate_burst=5).limits == (None, "5/10s", 5)
    assert BudgetSpec("db", max_active=8).definition() == B("db", max_active=8)


def test_conflicting_declarations_in_one_app_raise_at_declaration() -> None:
    app = App("billing")
    openai = app.budget("openai", max_active=50, rate_limit="3000/m")
    assert app.budget("openai", max_active=50, rate_limit="3000/1m") is openai  # the same
    with pytest.raises(InvalidPolicyError, match="declared twice"):
        app.budget("openai", max_active=40, rate_limit="3000/m")
    with pytest.raises(InvalidPolicyError, match="declared twice"):

        @app.task(name="t.embed", budget=BudgetSpec("openai", max_active=1))
        def embed(text: str) -> None: ...

    assert "t.embed" not in app.tasks
    assert app.budget_definitions() == [B("openai", 50, "3000/m")]


def test_sync_payload_checks_before_sending(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    before = _stored(conn)
    with pytest.raises(InvalidPolicyError, match="defined twice"):
        queue.sync_budgets("ns", [B("a", 1), B("a", 2)])
    with pytest.raises(InvalidPolicyError, match="BudgetDefinition"):
        queue.sync_budgets("ns", [ConcurrencyPolicyDefinition("a", 1)])  # type: ignore[list-item]
    with pytest.raises(InvalidPolicyError):
        queue.sync_budgets("", [B("a", 1)])
    assert _stored(conn) == before


# ---- sync, prune, list --------------------------------------------------------------------------


def test_sync_prune_list_round_trip(queue: Queue) -> None:
    rows = queue.sync_budgets("billing", [B("openai", 50, "3000/m", 100), B("db", 8)])
    assert [(b.namespace, b.name, b.max_active, b.rate_limit, b.rate_burst) for b in rows] == [
        ("billing", "db", 8, None, None), ("billing", "openai", 50, "3000/m", 100)]
    assert all(isinstance(b, Budget) and b.created_at.tzinfo for b in rows)
    assert rows[1].definition == B("openai", 50, "3000/m", 100)
    queue.sync_budgets("search", [B("es", rate_limit="5/10s")])
    assert [b.name for b in queue.list_budgets()] == ["db", "openai", "es"]
    assert [b.name for b in queue.list_budgets("search")] == ["es"]

    report = queue.sync_budgets_report("billing", [B("openai", 50, "3000/m", 100), B("db", 4),
                                                    B("partner", rate_limit="10/s")])
    assert report == SyncReport(created=["partner"], updated=["db"], unchanged=["openai"])
    report = queue.sync_budgets_report("billing", [B("db", 4)], prune=False)
    assert report == SyncReport(unchanged=["db"])
    report = queue.sync_budgets_report("billing", [B("db", 4)])
    assert report == SyncReport(pruned=["openai", "partner"], unchanged=["db"])
    assert [b.name for b in queue.list_budgets()] == ["db", "es"]  # search's is not pruned


def test_another_namespaces_budget_conflicts_and_nothing_is_written(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_budgets("billing", [B("openai", 50)])
    conn.commit()
    before = _stored(conn)
    with pytest.raises(PolicyConflictError, match="owned by namespace billing"):
        queue.sync_budgets("search", [B("zzz-new", 3), B("openai", 10)])
    conn.rollback()
    assert _stored(conn) == before


def test_async_twins(database_url: str) -> None:
    async def run() -> tuple[list[Budget], SyncReport, list[Budget]]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            aq = AsyncQueue(aconn)
            synced = await aq.sync_budgets("ns", [B("db", 8)])
            report = await aq.sync_budgets_report("ns", [B("db", 9)])
            await aq.override_budget("db", max_active=2)
            listed = await aq.list_budgets()
            await aq.clear_budget_override("db")
            return synced, report, listed

    synced, report, listed = asyncio.run(run())
    assert [b.max_active for b in synced] == [8]
    assert report == SyncReport(updated=["db"])
    assert listed[0].override is not None and listed[0].override.max_active == 2


# ---- the app: budget= on tasks and at the call site, app.sync() ---------------------------------


def _app(database_url: str, name: str = "billing") -> App:
    return App(name, database_url=database_url)


def test_app_sync_syncs_and_prunes_budgets_and_warns_about_undeclared(database_url: str) -> None:
    app = _app(database_url)
    openai = app.budget("openai", max_active=50, rate_limit="3000/m", rate_burst=100)

    @app.task(name="t.summarize", queue="summaries", budget=openai)
    def summarize(text: str) -> None: ...

    @app.task(name="t.push", queue="sync", budget="partner-api")
    def push(record: str) -> None: ...

    try:
        with pytest.warns(UndeclaredBudgetWarning, match="'partner-api'"):
            report = app.sync()
        assert report.budgets == SyncReport(created=["openai"])
        assert report.schedules is None

        other = _app(database_url, "partner")
        other.budget("partner-api", rate_limit="10/s")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert other.sync().budgets == SyncReport(created=["partner-api"])
            # Declared now, by another namespace: no warning.
            assert app.sync().budgets == SyncReport(unchanged=["openai"])

        bare = _app(database_url)  # the same namespace, no budgets any more: pruned

        @bare.task(name="t.summarize", queue="summaries")
        def summarize2(text: str) -> None: ...

        assert bare.sync().budgets == SyncReport(pruned=["openai"])
        assert bare.sync().budgets is None  # nothing declared and nothing left to prune
        bare.close()
        other.close()
    finally:
        app.close()


def test_job_budget_round_trip_and_call_site(database_url: str, queue: Queue) -> None:
    app = _app(database_url)
    openai = app.budget("openai", max_active=50)

    @app.task(name="t.embed", queue="embeddings", budget=openai)
    def embed(text: str) -> None: ...

    @app.task(name="t.plain", queue="plain")
    def plain(text: str) -> None: ...

    try:
        h1 = embed.delay("a")
        h2 = embed.apply_async(("b",), budget="partner-api")   # the call site wins
        h3 = plain.apply_async(("c",), budget=openai)
        h4 = plain.delay("d")
        [h5, h6] = embed.map([("e",), ("f",)])                  # shared options
        h7 = app.send_task("t.plain", args=["g"], budget="db")
        assert [h.job().budget for h in (h1, h2, h3, h4, h5, h6, h7)] == [
            "openai", "partner-api", "openai", None, "openai", "openai", "db"]
        listed = {j.id: j.budget for j in queue.list_jobs(limit=100)}
        assert listed[h1.id] == "openai" and listed[h4.id] is None and listed[h7.id] == "db"
        with pytest.raises(InvalidOptionsError):
            embed.apply_async(("x",), budget="")
        with pytest.raises(InvalidOptionsError):
            embed.apply_async(("x",), budget=7)
        assert len(queue.list_jobs(limit=100)) == 7  # none of the refused ones was written
        # Workflow members keep theirs: a job after another, and a chain's members.
        after = embed.apply_async(("x",), depends_on=[h1])
        assert after.job().budget == "openai"
        from workhorse import chain

        wf = chain(embed.s("y").set(queue="wf-embeddings"), plain.si("z")).delay()
        assert [j.budget for j in wf.jobs()] == ["openai", None]
        recorded = queue.conn.execute(
            "SELECT budget FROM workhorse.budget_queues WHERE queue = 'wf-embeddings'")
        assert recorded.fetchall() == [("openai",)]
    finally:
        app.close()


def test_enqueue_options_budget_bounds(queue: Queue) -> None:
    for bad in ("", "b" * 256, "a\x00", 5):
        with pytest.raises(InvalidOptionsError):
            EnqueueOptions(queue="q", budget=bad)  # type: ignore[arg-type]
    assert EnqueueOptions(budget="b" * 255).budget == "b" * 255
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q", budget="db"))
    job = queue.get_job(job_id)
    assert job is not None and job.budget == "db"


def test_a_budget_raises_the_queue_feature_level(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    def level(name: str) -> int | None:
        row = conn.execute("SELECT feature_level FROM workhorse.queue_levels WHERE queue = %s",
                           (name,)).fetchone()
        return None if row is None else int(row[0])

    queue.enqueue("t", {}, EnqueueOptions(queue="plain"))
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="plain2")),
                        ("t", {}, EnqueueOptions(queue="budgeted", budget="db"))])
    queue.enqueue("t", {}, EnqueueOptions(queue="keyed", job_key="k", budget="db"))
    assert (level("plain"), level("plain2"), level("budgeted"), level("keyed")) == (
        None, None, 2, 2)
    # The job rows themselves stay at level 1 (nothing new is needed to record them).
    assert conn.execute("SELECT DISTINCT feature_level FROM workhorse.jobs").fetchall() == [(1,)]


# ---- overrides ----------------------------------------------------------------------------------


def test_budget_override_and_clear(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_budgets("ns", [B("openai", 50, "3000/m", 100)])
    o = queue.override_budget("openai", max_active=5, expires_in=3600)
    assert o is not None and (o.max_active, o.rate_limit, o.rate_burst) == (5, None, None)
    assert o.expires_at is not None
    o = queue.override_budget("openai", rate_burst=10)  # replaces only what it names
    assert o is not None and (o.max_active, o.rate_burst, o.expires_at) == (5, 10, None)
    [listed] = queue.list_budgets()
    assert listed.override is not None and listed.override.rate_burst == 10
    queue.sync_budgets("ns", [B("openai", 40, "3000/m", 100)])   # a sync keeps it
    assert queue.list_budgets()[0].override is not None
    conn.commit()
    before = _stored(conn)
    for bad in ({}, {"rate_burst": 3001}, {"rate_limit": "10/s", "rate_burst": 11},
                {"max_active": 0}, {"rate_limit": "x"}):
        with pytest.raises(InvalidPolicyError):
            queue.override_budget("openai", **bad)
        conn.rollback()
    with pytest.raises(InvalidPolicyError, match="rate_burst"):
        queue.override_budget("no-rate", rate_burst=1)  # no rate in force anywhere
    conn.rollback()
    assert _stored(conn) == before
    queue.clear_budget_override("openai")
    assert queue.list_budgets()[0].override is None


# ---- health -------------------------------------------------------------------------------------


def test_budget_health_counts_active_units_and_queues(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_budgets("ns", [B("openai", 50, "3000/m", 100), B("idle", 3)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="summaries", budget="openai", cost=3)),
                        ("t", {}, EnqueueOptions(queue="summaries", budget="openai", cost=2)),
                        ("t", {}, EnqueueOptions(queue="embeddings", budget="openai")),
                        ("t", {}, EnqueueOptions(queue="other", budget="ghost")),
                        ("t", {}, EnqueueOptions(queue="other"))])
    # Two jobs active (made so by hand), one expired.
    conn.execute("UPDATE workhorse.jobs SET status = 'active', fence = 1, attempts = 1,"
                 " lease_until = clock_timestamp() + interval '1 minute'"
                 " WHERE queue = 'summaries' AND cost = 3")
    conn.execute("UPDATE workhorse.jobs SET status = 'active', fence = 2, attempts = 1,"
                 " lease_until = clock_timestamp() - interval '1 minute'"
                 " WHERE queue = 'summaries' AND cost = 2")
    queue.override_budget("idle", max_active=1)
    health = {b.name: b for b in queue.health().budgets}
    assert set(health) == {"openai", "idle", "ghost"}
    openai = health["openai"]
    assert isinstance(openai, BudgetHealth)
    assert (openai.namespace, openai.max_active, openai.rate_limit, openai.rate_burst) == (
        "ns", 50, "3000/m", 100)
    assert openai.active_units == 3            # the expired lease holds nothing
    assert openai.queues == ["embeddings", "summaries"]
    assert (openai.ready, openai.blocked_ready) == (1, 0)
    now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    assert openai.next_start_at is not None and openai.next_start_at <= now  # starts left
    assert health["idle"].next_start_at is None                             # no rate
    assert health["idle"].max_active == 1 and health["idle"].override is not None
    assert health["idle"].queues == [] and health["idle"].active_units == 0
    ghost = health["ghost"]                      # named, declared by nobody: limits nothing
    assert (ghost.namespace, ghost.max_active, ghost.queues, ghost.ready) == (
        None, None, ["other"], 1)


# ---- the CLI ------------------------------------------------------------------------------------


def test_cli_budgets_json_override_and_clear(database_url: str, queue: Queue) -> None:
    queue.sync_budgets("ns", [B("openai", 50, "3000/m", 100)])
    queue.conn.commit()
    queue.enqueue("t", {}, EnqueueOptions(queue="summaries", budget="openai"))
    queue.conn.commit()
    runner = CliRunner()
    base = ["--database-url", database_url, "budgets"]
    result = runner.invoke(main, [*base, "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["name"] == "openai" and row["namespace"] == "ns" and row["rate_burst"] == 100
    assert row["queues"] == ["summaries"] and row["override"] is None

    result = runner.invoke(main, [*base, "override", "openai", "--max-active", "5",
                                  "--rate-burst", "10", "--for", "1h", "--json"])
    assert result.exit_code == 0, result.output
    override = json.loads(result.output)
    assert (override["max_active"], override["rate_burst"]) == (5, 10)
    assert override["expires_at"] is not None
    [row] = json.loads(runner.invoke(main, [*base, "--json"]).output)
    assert row["max_active"] == 5 and row["rate_burst"] == 10
    assert row["override"]["max_active"] == 5

    text = runner.invoke(main, base)
    assert text.exit_code == 0 and "openai" in text.output and "override" in text.output

    bad = runner.invoke(main, [*base, "override", "openai", "--rate-burst", "3001"])
    assert bad.exit_code == 1 and "rate_burst" in bad.output
    assert runner.invoke(main, [*base, "override", "openai"]).exit_code == 2

    result = runner.invoke(main, [*base, "clear-override", "openai"])
    assert result.exit_code == 0 and "no override" in result.output
    [row] = json.loads(runner.invoke(main, [*base, "--json"]).output)
    assert row["max_active"] == 50 and row["override"] is None


def test_enqueue_records_the_budgets_queues(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="a", budget="openai")),
                        ("t", {}, EnqueueOptions(queue="b", budget="openai")),
                        ("t", {}, EnqueueOptions(queue="a", budget="openai")),
                        ("t", {}, EnqueueOptions(queue="c"))])
    queue.enqueue("t", {}, EnqueueOptions(queue="a", budget="db", idempotency_key="k"))
    rows = conn.execute("SELECT budget, queue FROM workhorse.budget_queues ORDER BY 1, 2")
    assert rows.fetchall() == [("db", "a"), ("openai", "a"), ("openai", "b")]


# ---- rate bursts on queue policies --------------------------------------------------------------

BAD_BURSTS: list[tuple[str, dict[str, Any]]] = [
    ("burst above N", {"rate_limit": "10/s", "rate_burst": 11}),
    ("burst 0", {"rate_limit": "10/s", "rate_burst": 0}),
    ("burst without a rate", {"max_active": 3, "rate_burst": 2}),
    ("per-key burst without its rate", {"rate_limit": "10/s", "rate_burst_per_key": 2}),
    ("per-key burst above its N", {"rate_limit_per_key": "3/s", "rate_burst_per_key": 4}),
    ("burst not an int", {"rate_limit": "10/s", "rate_burst": 2.0}),
]


@pytest.mark.parametrize(("case", "fields"), BAD_BURSTS, ids=[c for c, _ in BAD_BURSTS])
def test_bad_bursts_are_typed_and_write_nothing(
        case: str, fields: dict[str, Any], queue: Queue, conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(InvalidPolicyError):
        ConcurrencyPolicyDefinition("q", **fields)
    with pytest.raises(InvalidPolicyError):
        App("ns").queue("q", **fields)
    app = App("ns")
    with pytest.raises(InvalidPolicyError):

        @app.task(name="t.x", queue="q", **fields)
        def x() -> None: ...

    assert "t.x" not in app.tasks
    assert conn.execute("SELECT count(*) FROM workhorse.policies").fetchone() == (0,)


def test_bursts_sync_list_health_and_feature_level(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    D = ConcurrencyPolicyDefinition
    queue.sync_concurrency_policies("ns", [
        D("mail", rate_limit="100/m", rate_burst=10, rate_limit_per_key="10/m",
          rate_burst_per_key=2),
        D("plain", rate_limit="100/m")])
    policies = {p.queue: p for p in queue.list_concurrency_policies()}
    assert (policies["mail"].rate_burst, policies["mail"].rate_burst_per_key) == (10, 2)
    assert (policies["plain"].rate_burst, policies["plain"].rate_burst_per_key) == (None, None)
    levels = dict(conn.execute("SELECT queue, feature_level FROM workhorse.policies").fetchall())
    assert levels == {"mail": 2, "plain": 1}
    report = queue.sync_report("ns", [D("mail", rate_limit="100/m", rate_burst=10,
                                        rate_limit_per_key="10/m", rate_burst_per_key=2),
                                      D("plain", rate_limit="100/m", rate_burst=50)])
    assert report == SyncReport(updated=["plain"], unchanged=["mail"])
    health = {p.queue: p for p in queue.health().policies}
    assert (health["mail"].rate_burst, health["mail"].rate_burst_per_key) == (10, 2)
    assert health["plain"].rate_burst == 50
    # Two declarations of one queue that disagree on a burst conflict.
    app = App("ns")
    app.queue("mail", rate_limit="100/m", rate_burst=10)
    with pytest.raises(InvalidPolicyError, match="declared twice"):
        app.queue("mail", rate_limit="100/m", rate_burst=20)


def test_override_bursts(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    D = ConcurrencyPolicyDefinition
    queue.sync_concurrency_policies("ns", [D("mail", rate_limit="100/m", rate_burst=10)])
    control = queue.override_policy("mail", rate_burst=5)          # a burst alone
    assert control.override is not None and control.override.rate_burst == 5
    assert {p.queue: p.rate_burst for p in queue.health().policies}["mail"] == 5
    control = queue.override_policy("mail", max_active=3)          # keeps the burst
    assert control.override is not None
    assert (control.override.max_active, control.override.rate_burst) == (3, 5)
    conn.commit()

    def stored() -> list[tuple[Any, ...]]:
        return conn.execute("SELECT * FROM workhorse.queue_controls ORDER BY queue").fetchall()

    before = stored()
    for bad in ({"rate_burst": 101}, {"rate_limit": "4/s", "rate_burst": 5},
                {"rate_burst_per_key": 1}, {"rate_burst": 0}):
        with pytest.raises(InvalidPolicyError):
            queue.override_policy("mail", **bad)
        conn.rollback()
    with pytest.raises(InvalidPolicyError):
        queue.override_policy("ungoverned", rate_burst=1)            # no rate in force
    conn.rollback()
    assert stored() == before
    control = queue.override_policy("mail", rate_limit="1000/m", rate_burst=500)
    assert control.override is not None and control.override.rate_burst == 500
    queue.clear_override("mail")
    assert {p.queue: p.rate_burst for p in queue.health().policies}["mail"] == 10
    assert stored() == [] or all(row is None for row in stored())


def test_cli_policies_shows_and_overrides_bursts(database_url: str, queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition(
        "mail", rate_limit="100/m", rate_burst=10)])
    queue.conn.commit()
    runner = CliRunner()
    [row] = json.loads(runner.invoke(main, ["--database-url", database_url, "policies",
                                            "--json"]).output)
    assert (row["rate_burst"], row["rate_burst_per_key"]) == (10, None)
    result = runner.invoke(main, ["--database-url", database_url, "policies", "override",
                                  "mail", "--rate-burst", "4", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["override"]["rate_burst"] == 4
    result = runner.invoke(main, ["--database-url", database_url, "policies", "override",
                                  "mail", "--rate-burst", "101"])
    assert result.exit_code == 1 and "rate_burst" in result.output
    text = runner.invoke(main, ["--database-url", database_url, "policies"])
    assert text.exit_code == 0 and "rate_burst" in text.output


def test_the_nothing_written_checker_sees_writes(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    """`_stored` must see each kind of write the bad-input tests rule out, or they prove nothing:
    the broken variants here are a sync that wrote a budget, an updated limit, and an override."""
    before = _stored(conn)
    queue.sync_budgets("ns", [B("new", 1)])
    after_sync = _stored(conn)
    assert after_sync != before
    queue.sync_budgets("ns", [B("new", 2)])
    assert _stored(conn) != after_sync
    changed = _stored(conn)
    queue.override_budget("new", max_active=1)
    assert _stored(conn) != changed


def _seq_scans_of_jobs(conn: psycopg.Connection[Any], statement: Any, params: Any) -> list[str]:
    rows = conn.execute(psycopg.sql.SQL("EXPLAIN ") + statement, params).fetchall()
    return [row[0] for row in rows if "Seq Scan on jobs" in row[0]]


def test_budget_health_reads_no_backlog(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    """budget_health stays on the partial budget indexes with a big backlog: no sequential scan
    of jobs. The same check on a statement that must scan (no status, so no partial index fits)
    finds one, so it can fail."""
    queue.sync_budgets("ns", [B("flood", 5), B("idle", 1)])
    for start in range(0, 20_000, 5000):
        queue.enqueue_many([
            ("t", {}, EnqueueOptions(queue=f"q{i % 3}", budget="flood" if i % 2 else None))
            for i in range(start, start + 5000)])
    conn.execute("UPDATE workhorse.jobs SET status = 'active', fence = id, attempts = 1,"
                 " lease_until = now() + interval '1 minute' WHERE id % 1000 = 1")
    conn.execute("ANALYZE workhorse.jobs")
    from workhorse import _sql

    assert _seq_scans_of_jobs(conn, _sql.statement("budget_health"), {"sample": 1000}) == []
    broken = psycopg.sql.SQL("SELECT count(*) FROM workhorse.jobs WHERE budget = 'flood'")
    assert _seq_scans_of_jobs(conn, broken, None) != []
    [flood] = [b for b in queue.health().budgets if b.name == "flood"]
    assert flood.queues == ["q0", "q1", "q2"] and flood.capped and flood.ready == 1000


def test_eager_jobs_carry_their_budget() -> None:
    from workhorse.testing import eager

    app = App("eager")
    db = app.budget("db", max_active=2)

    @app.task(name="t.q", budget=db)
    def query(n: int) -> int:
        return n

    with eager(app):
        assert query.delay(1).job().budget == "db"
        assert query.apply_async((2,), budget="other").job().budget == "other"


def test_cli_health_shows_budgets(database_url: str, queue: Queue) -> None:
    runner = CliRunner()
    plain = runner.invoke(main, ["--database-url", database_url, "health"])
    assert plain.exit_code == 0 and "budgets" not in plain.output  # none: no table
    queue.sync_budgets("ns", [B("openai", 50)])
    queue.enqueue("t", {}, EnqueueOptions(queue="summaries", budget="openai"))
    queue.conn.commit()
    result = runner.invoke(main, ["--database-url", database_url, "health"])
    assert result.exit_code == 0 and "budgets" in result.output
    assert "openai" in result.output and "summaries" in result.output
    data = json.loads(runner.invoke(main, ["--database-url", database_url, "health",
                                           "--json"]).stdout)
    assert [b["name"] for b in data["budgets"]] == ["openai"]


def test_a_cost_that_can_never_fit_its_budget_or_burst_is_refused(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_budgets("ns", [B("gpus", 8), B("tokens", rate_limit="1000/m", rate_burst=100)])
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition(
        "mail", rate_limit="100/m", rate_burst=10)])
    conn.commit()
    count = "SELECT count(*) FROM workhorse.jobs"
    for options in (EnqueueOptions(queue="a", budget="gpus", cost=9),
                    EnqueueOptions(queue="a", budget="tokens", rate_cost=101),   # above B
                    EnqueueOptions(queue="mail", rate_cost=11)):                  # policy burst
        with pytest.raises(InvalidOptionsError, match="can never start"):
            queue.enqueue_many([("t", {}, EnqueueOptions(queue="fine")), ("t", {}, options)])
        conn.rollback()
        assert conn.execute(count).fetchone() == (0,)
    # What fits is accepted, and a budget nobody declared limits nothing.
    queue.enqueue("t", {}, EnqueueOptions(queue="a", budget="gpus", cost=8))
    queue.enqueue("t", {}, EnqueueOptions(queue="a", budget="tokens", rate_cost=100))
    queue.enqueue("t", {}, EnqueueOptions(queue="a", budget="nobody", cost=1_000_000))
    queue.enqueue("t", {}, EnqueueOptions(queue="mail", rate_cost=10))
    assert conn.execute(count).fetchone() == (4,)


def test_housekeeping_clears_expired_budget_overrides_and_old_starts(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    from workhorse import _ops

    queue.sync_budgets("ns", [B("openai", 50, "10/s")])
    queue.override_budget("openai", max_active=5, expires_in=3600)
    queue.override_budget("db", max_active=1)                      # no expiry: kept
    conn.execute("UPDATE workhorse.budget_controls SET override_expires_at = now() - interval"
                 " '1 second' WHERE name = 'openai'")
    conn.execute("INSERT INTO workhorse.budget_starts VALUES"
                 " ('openai', 0, now() - interval '1 minute', 3),"   # past its 10 s window
                 " ('openai', 0, now() + interval '1 second', 2),"   # live
                 " ('gone', 1, now() - interval '1 second', 1)")     # no budget: any age goes
    expired, pruned = _ops.execute(conn, _ops.housekeeping())
    assert (expired, pruned) == (1, 2)
    assert [c[0] for c in conn.execute("SELECT name FROM workhorse.budget_controls")] == ["db"]
    assert conn.execute("SELECT budget, n FROM workhorse.budget_starts").fetchall() == [
        ("openai", 2)]
