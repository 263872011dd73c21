"""The dashboard's budgets (issue #30 item 4; docs/design.md "Named budgets" and "The dashboard in
an incident"), without a browser, on a real database: the budgets page (one row per BudgetHealth,
the limits and override in force, units against max_active, ready capped at the sample, the queues,
the next start), a full or out-of-rate budget as a "blocked by" reason of the queues whose ready
jobs name it, and a queue that only a budget governs listed where governed queues are.

A budget is made full by marking its jobs active by hand, and out of rate by writing its starts
into budget_starts, the stored state health() and the claim read."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from workhorse import BudgetDefinition, ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _ops
from workhorse.dashboard import _data, _queries, create_app


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


def _activate(conn: psycopg.Connection[Any], where: str, *params: Any) -> int:
    """Mark ready jobs active with a live lease (as a claim would), returning how many."""
    cur = conn.execute(
        "UPDATE workhorse.jobs SET status = 'active', fence = id, attempts = 1,"
        " started_at = clock_timestamp(),"
        " lease_until = clock_timestamp() + interval '10 minutes'"
        f" WHERE status = 'ready' AND {where}", params)
    return cur.rowcount


def _starts(conn: psycopg.Connection[Any], budget: str, span: int, n: int,
            ago: float) -> None:
    """`n` starts of `budget` in a bucket that ended `ago` seconds ago (span 0: the rate's
    window, 1: the burst's)."""
    conn.execute("INSERT INTO workhorse.budget_starts (budget, span, bucket_end, n)"
                 " VALUES (%s, %s, clock_timestamp() - make_interval(secs => %s), %s)",
                 (budget, span, ago, n))


@pytest.fixture
def fleet(conn: psycopg.Connection[Any], queue: Queue) -> dict[str, Any]:
    """A declared budget `openai` (max_active 3) used by a governed queue `summaries` and by
    `embeddings`, which has no policy; 3 of openai's units active, more ready in both queues; an
    undeclared budget `partner` with ready jobs in `sync`; unbudgeted ready work in `embeddings`."""
    queue.sync_concurrency_policies("ai", [ConcurrencyPolicyDefinition("summaries", max_active=10)])
    queue.sync_budgets("ai", [BudgetDefinition("openai", max_active=3)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="summaries", budget="openai"))
                        for _ in range(4)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="embeddings", budget="openai"))
                        for _ in range(2)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="embeddings")) for _ in range(2)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="sync", budget="partner"))
                        for _ in range(3)])
    first = conn.execute("SELECT min(id) FROM workhorse.jobs WHERE queue = 'summaries'"
                         ).fetchone()
    assert first is not None
    assert _activate(conn, "queue = 'summaries' AND id < %s + 3", first[0]) == 3
    return {}


def test_the_budgets_page_has_one_row_per_budget_with_what_holds_it(conn, queue, fleet):
    page = _data.budgets(conn)
    rows = {b.name: b for b in page.budgets}
    assert set(rows) == {b.name for b in queue.health().budgets} == {"openai", "partner"}
    openai, partner = rows["openai"], rows["partner"]
    assert (openai.health.namespace, openai.health.max_active, openai.health.active_units) == (
        "ai", 3, 3)
    assert openai.full and not openai.out_of_rate
    assert openai.hold == "budget openai full (3 of 3 units)"
    assert openai.health.ready == 3 and openai.blocked_ready == 3
    assert openai.ready_by_queue == {"summaries": 1, "embeddings": 2}
    assert openai.health.queues == ["embeddings", "summaries"]
    assert partner.health.namespace is None and not partner.limited
    assert partner.hold is None and partner.blocked_ready == 0


def test_a_full_budget_is_a_blocked_by_reason_and_a_budget_only_queue_is_governed(
        conn, queue, fleet):
    view = _data.overview(conn)
    governed = {p.queue: p for p in view.policies}
    # embeddings has no policy and no control: only its budget governs it, and health() lists
    # it so (issue #41 item 5), with the budget its jobs name.
    [embeddings] = [p for p in queue.health().policies if p.queue == "embeddings"]
    assert (embeddings.namespace, embeddings.max_active, embeddings.budgets) == (
        None, None, ["openai"])
    assert set(governed) == {"summaries", "embeddings", "sync"}
    assert governed["embeddings"].namespace is None
    assert governed["embeddings"].blocked_ready == 2  # its two openai jobs, not the others
    assert governed["summaries"].blocked_ready == 1
    assert governed["sync"].blocked_ready == 0
    assert view.holds["embeddings"] == ["budget openai full (3 of 3 units)"]
    assert view.holds["summaries"] == ["budget openai full (3 of 3 units)"]
    assert "sync" not in view.holds  # partner limits nothing
    page = _data.queue_page(conn, "embeddings")
    assert page.health is not None and page.holds == ["budget openai full (3 of 3 units)"]
    assert [(b.name, use.ready) for b, use in page.budgets] == [("openai", 2)]
    # One unit freed: the budget has room, and nothing holds either queue back.
    conn.execute("UPDATE workhorse.jobs SET status = 'succeeded', finished_at = now()"
                 " WHERE id = (SELECT min(id) FROM workhorse.jobs WHERE status = 'active')")
    view = _data.overview(conn)
    assert view.holds == {}
    assert {p.queue: p.blocked_ready for p in view.policies} == {
        "summaries": 0, "embeddings": 0, "sync": 0}


def test_an_override_is_in_force_and_shown_with_its_expiry(conn, queue, fleet, client):
    queue.override_budget("openai", max_active=5, expires_in=3600)
    [openai] = [b for b in _data.budgets(conn).budgets if b.name == "openai"]
    assert openai.health.max_active == 5 and not openai.full and openai.hold is None
    html = client.get("/budgets").text
    row = _row(html, "openai")
    assert "override" in row and "max 5" in row and re.search(r"expires in (59|60)m", row), row
    assert "3 / 5" in row


def test_a_budget_out_of_rate_says_when_the_next_start_is_allowed(conn, queue):
    queue.sync_budgets("ai", [BudgetDefinition("api", rate_limit="10/m", rate_burst=2)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="calls", budget="api"))
                        for _ in range(2)])
    # 10 starts within the minute: the oldest 4 ended 20 s ago, so in 40 s one more may start.
    _starts(conn, "api", 0, 4, 20.0)
    _starts(conn, "api", 0, 6, 5.0)
    [api] = _data.budgets(conn).budgets
    assert api.window is not None and api.window.used == 10
    assert api.out_of_rate and not api.full
    # (40 s less the moments the test took so far: allow for a loaded machine)
    assert api.next_start is not None and 30 <= api.next_start <= 40
    assert api.next_start_at is not None
    out_of_rate = r"budget api out of rate \(next start in (3[0-9]|40) s\)"
    assert re.fullmatch(out_of_rate, api.hold or "")
    # The overview reads the windows again, a moment later: the seconds may have moved on.
    [hold] = _data.overview(conn).holds["calls"]
    assert re.fullmatch(out_of_rate, hold), hold
    # The rate's window moves on: 9 of 10 and the burst window (12 s for 2 of 10/m) is empty.
    conn.execute("DELETE FROM workhorse.budget_starts WHERE n = 4")
    _starts(conn, "api", 0, 3, 50.0)  # 9 in the window
    [api] = _data.budgets(conn).budgets
    assert not api.out_of_rate and api.hold is None and api.next_start == 0.0
    # The burst: 2 starts in the last 12 s hold it back, for 12 - 3 = 9 s.
    conn.execute("DELETE FROM workhorse.budget_starts WHERE n = 3")
    _starts(conn, "api", 1, 2, 3.0)
    [api] = _data.budgets(conn).budgets
    assert api.window is not None and api.window.burst_used == 2
    assert api.out_of_rate and api.next_start is not None and 0 < api.next_start <= 9


def test_the_ready_count_is_capped_at_the_health_sample(conn, queue, client):
    queue.sync_budgets("ai", [BudgetDefinition("many", max_active=1)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="bulk", budget="many"))
                        for _ in range(_ops.HEALTH_SAMPLE + 5)])
    _activate(conn, "id = (SELECT min(id) FROM workhorse.jobs)")
    [many] = _data.budgets(conn).budgets
    assert many.health.capped and many.health.ready == _ops.HEALTH_SAMPLE
    assert many.full and many.blocked_ready == _ops.HEALTH_SAMPLE
    row = _row(client.get("/budgets").text, "many")
    assert '<td class="num ready">1000+</td>' in row, row
    assert '<td class="num blocked">1000+</td>' in row, row
    [bulk] = _data.overview(conn).policies
    assert (bulk.queue, bulk.blocked_ready, bulk.capped) == ("bulk", _ops.HEALTH_SAMPLE, True)


def _row(html: str, budget: str) -> str:
    found = re.search(rf'<tr id="budget-\d+" data-budget="{re.escape(budget)}".*?</tr>', html,
                      re.S)
    assert found, html
    return found.group(0)


def test_the_budgets_page_renders_every_budget_escaped(conn, queue, fleet, client):
    evil = "<script>window.pwned=1</script>"
    queue.enqueue("t", {}, EnqueueOptions(queue=evil, budget=evil))
    response = client.get("/budgets")
    assert response.status_code == 200
    html = response.text
    assert '<a href="/budgets" class="here">Budgets</a>' in html
    openai = _row(html, "openai")
    assert "ai" in openai and "3 / 3" in openai
    assert "budget openai full (3 of 3 units)" in openai
    assert 'href="/queue?name=summaries"' in openai and 'href="/queue?name=embeddings"' in openai
    partner = _row(html, "partner")
    assert "undeclared: no limit" in partner and "limits nothing" in partner
    assert evil not in html and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
    live = client.get("/budgets?live=1").text
    assert live.startswith('<section id="live"') and "openai" in live
    # The queue pages say it too.
    queue_html = client.get("/queue?name=embeddings").text
    assert "budget openai full (3 of 3 units)" in queue_html
    overview = client.get("/").text
    assert re.search(r'<tr data-queue="embeddings".*?held by budget openai full \(3 of 3 units\)',
                     overview, re.S)


# ---- bounded reads ------------------------------------------------------------------------------


def _jobs_read(conn: psycopg.Connection[Any], statement: Any, params: Any
               ) -> tuple[int, list[str]]:
    """The rows the plan's scans of jobs returned, in all (EXPLAIN ANALYZE), and the kinds of
    those scans that are sequential."""
    import json

    import psycopg.sql

    [[plan]] = conn.execute(psycopg.sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement,
                            params).fetchall()
    plan = plan if isinstance(plan, list) else json.loads(plan)
    total = 0
    sequential = []

    def walk(node: dict[str, Any]) -> None:
        nonlocal total
        if node.get("Relation Name") == "jobs":
            if node["Node Type"] == "Seq Scan":
                sequential.append(node["Node Type"])
            total += int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
        for child in node.get("Plans", []):
            walk(child)
    walk(plan[0]["Plan"])
    return total, sequential


def _bounded(found: tuple[int, list[str]], bound: int) -> bool:
    rows, sequential = found
    return rows <= bound and not sequential


def test_the_budget_statements_read_no_backlog(conn, queue):
    """With 20,000 ready jobs of a full budget, the dashboard's budget statements read at most a
    sample per queue from jobs, by index. The same count with its sample's LIMIT taken out (the
    broken variant) reads the whole backlog, so the bound can fail."""
    from workhorse import _sql

    sample = _ops.HEALTH_SAMPLE
    queue.sync_budgets("ns", [BudgetDefinition("flood", max_active=5)])
    for start in range(0, 20_000, 5000):
        queue.enqueue_many([
            ("t", {}, EnqueueOptions(queue=f"q{i % 2}", budget="flood" if i % 4 else None))
            for i in range(start, start + 5000)])
    # q1 waits for the budget and had its turn before q0: q0 leaves the places to it (the
    # turns' probe of q1's ready jobs runs too).
    conn.execute("UPDATE workhorse.budget_queues SET last_turn = now() - interval '1 minute'"
                 " WHERE queue = 'q0'")
    conn.execute("UPDATE workhorse.budget_queues SET last_turn = now() - interval '2 minutes',"
                 " wanted_at = clock_timestamp() + interval '1 minute' WHERE queue = 'q1'")
    conn.execute("ANALYZE workhorse.jobs")
    bound = 2 * (sample + 1) + 2  # two queues, one capped sample each; one probe per waiter
    uses = _sql.statement("dashboard_budget_queues")
    params = {"sample": sample, "pairs": 10_000}
    assert _bounded(_jobs_read(conn, uses, params), bound)
    assert [(u.queue, u.defers_to) for u in _ops.execute(conn, _queries.budget_uses(sample))
            ] == [("q0", "q1"), ("q1", None)]
    counted = _sql.statement("dashboard_budgeted_queues")
    assert _bounded(_jobs_read(conn, counted, {"queues": ["q0", "q1"], "blocked": ["flood"],
                                               "sample": sample}), bound)
    _activate(conn, "id IN (SELECT id FROM workhorse.jobs WHERE budget = 'flood'"
                    " AND queue = 'q1' ORDER BY id LIMIT 5)")
    view = _data.overview(conn)
    assert {p.queue: (p.blocked_ready, p.capped) for p in view.policies} == {
        "q0": (sample // 2, True), "q1": (sample, True)}
    broken = psycopg.sql.SQL(uses.as_string(conn).replace("LIMIT %(sample)s + 1", ""))
    rows, _ = _jobs_read(conn, broken, params)
    assert rows > 10_000 and not _bounded((rows, []), bound)


# ---- against the claim that admits by budget ----------------------------------------------------


def test_what_real_claims_leave_is_what_the_pages_say(conn, queue):
    """Claims fill `openai` (max_active 2) from two queues, one without a policy; then the
    dashboard says it is full and holds both queues' ready work back, as the claim does (a further
    claim takes nothing), and agrees with health()'s blocked_ready. Completing one frees a place:
    the pages say it is the other queue's turn, as the claims then do. A budget rate
    (3/m) exhausted by claims is out of rate, with the next start about a minute away."""
    queue.sync_concurrency_policies("ai", [ConcurrencyPolicyDefinition("summaries", max_active=10)])
    queue.sync_budgets("ai", [BudgetDefinition("openai", max_active=2),
                              BudgetDefinition("api", rate_limit="3/m")])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="summaries", budget="openai"))
                        for _ in range(3)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="embeddings", budget="openai"))
                        for _ in range(3)])
    [first] = queue.claim("summaries", 1, 600)
    [_] = queue.claim("embeddings", 5, 600)
    assert queue.claim("summaries", 5, 600) == [] and queue.claim("embeddings", 5, 600) == []
    [openai] = [b for b in _data.budgets(conn).budgets if b.name == "openai"]
    assert openai.full and openai.hold == "budget openai full (2 of 2 units)"
    assert openai.blocked_ready == openai.health.blocked_ready == 4
    view = _data.overview(conn)
    assert view.holds["summaries"] == view.holds["embeddings"] == [openai.hold]
    assert {p.queue: p.blocked_ready for p in view.policies} == {"summaries": 2, "embeddings": 2}
    queue.complete(first.id, first.fence)
    # The freed place is summaries' turn (it wanted one and its last turn is older): the pages
    # say embeddings leaves it to summaries, and a claim of embeddings indeed takes nothing.
    turns = {"embeddings": ["budget openai turns: its next places go to queue summaries first "
                            "(it has waited longer)"]}
    assert _data.overview(conn).holds == turns
    assert queue.claim("embeddings", 5, 600) == []
    assert _data.overview(conn).holds == turns
    assert len(queue.claim("summaries", 5, 600)) == 1
    assert _data.overview(conn).holds["summaries"] == [openai.hold]  # full again

    queue.enqueue_many([("t", {}, EnqueueOptions(queue="calls", budget="api"))
                        for _ in range(5)])
    assert len(queue.claim("calls", 5, 600)) == 3
    assert queue.claim("calls", 5, 600) == []
    [api] = [b for b in _data.budgets(conn).budgets if b.name == "api"]
    assert api.window is not None and api.window.used == 3
    assert api.out_of_rate and api.next_start is not None and 45 < api.next_start <= 61
    assert api.health.next_start_at is not None and api.blocked_ready == 2
    out_of_rate = r"budget api out of rate \(next start in (4[5-9]|5[0-9]|6[01]) s\)"
    assert re.fullmatch(out_of_rate, api.hold or "")
    [hold] = _data.overview(conn).holds["calls"]
    assert re.fullmatch(out_of_rate, hold), hold
