"""The dashboard and a queue governed only by a named budget (issue #41 item 5), without a
browser, on a real database: the overview's row for it shows the budget, the budget's namespace
and its active units against its max_active (not namespace "-" and "0 / -"), the all-queues
table names the budget (not "ungoverned"), its queue page has the budget's units, and the
budgets page lists the queues whose jobs name the budget also once they all ran (not "none").

The fleet is test_budget_only_queue.py's: an App with `openai` (max_active 3) named by
`embeddings` (no policy) and `summaries` (max_active 10), jobs claimed and completed through
`Queue`."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient
from test_budget_only_queue import Fleet, build_fleet, run_all, start

from workhorse import BudgetDefinition, EnqueueOptions
from workhorse.dashboard import _data, create_app


@pytest.fixture
def fleet(database_url: str) -> Iterator[Fleet]:
    fleet = build_fleet(database_url)
    yield fleet
    fleet.app.close()


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


def _governed_row(html: str, queue: str) -> str:
    found = re.search(rf'<tr data-queue="{re.escape(queue)}".*?</tr>', html, re.S)
    assert found, html
    return found.group(0)


def _cell(row: str, css: str) -> str:
    found = re.search(rf'<td class="{re.escape(css)}">(.*?)</td>\s*<td', row, re.S)
    assert found, row
    return re.sub(r"\s+", " ", found.group(1)).strip()


def _all_queues_row(html: str, queue: str) -> str:
    table = html.split('<table class="queues">', 1)[1]
    found = re.search(rf'<tr>\s*<td><a href="/queue\?name={re.escape(queue)}">.*?</tr>',
                      table, re.S)
    assert found, table
    return re.sub(r"\s+", " ", found.group(0))


def _budget_row(html: str, budget: str) -> str:
    found = re.search(rf'<tr id="budget-\d+" data-budget="{re.escape(budget)}".*?</tr>', html,
                      re.S)
    assert found, html
    return found.group(0)


def test_the_overview_data_carries_the_budget_of_a_budget_only_queue(conn, fleet, queue):
    start(fleet, queue)
    view = _data.overview(conn)
    governed = {p.queue: p for p in view.policies}
    assert set(governed) == {"embeddings", "summaries"}
    assert (governed["embeddings"].namespace, governed["embeddings"].budgets) == (
        None, ["openai"])
    openai = view.budgets["openai"]
    assert (openai.health.namespace, openai.health.active_units, openai.health.max_active) == (
        "ai", 1, 3)
    assert [s.budgets for s in view.queues if s.queue == "embeddings"] == [["openai"]]


def test_the_overview_row_shows_the_budget_its_namespace_and_units(conn, fleet, queue, client):
    start(fleet, queue)
    html = client.get("/").text
    row = _governed_row(html, "embeddings")
    namespace = _cell(row, "namespace")
    assert re.fullmatch(
        r'<span class="budget-namespace" data-budget="openai">ai<br><small>\(budget openai\)'
        r"</small></span>", namespace), namespace
    units = _cell(row, "barcell")
    assert '<span class="num">1 / 3 units</span><br><small>budget openai</small>' in units, units
    assert "1 active in this queue" in units and " / -" not in units, units
    # The queue with a policy keeps its own limit, and shows the budget beside it.
    summaries = _cell(_governed_row(html, "summaries"), "barcell")
    assert '<span class="num">0 / 10</span>' in summaries, summaries
    assert "1 / 3 units" in summaries, summaries
    assert _cell(_governed_row(html, "summaries"), "namespace") == "ai"
    # The all-queues table: governed by the budget, not "ungoverned".
    assert "budget openai" in _all_queues_row(html, "embeddings")
    assert "ungoverned" not in _all_queues_row(html, "embeddings")
    assert "max 10, budget openai" in _all_queues_row(html, "summaries")
    assert "ungoverned" in _all_queues_row(html, "plain")
    # The live region says the same.
    live = client.get("/?live=1").text
    assert "1 / 3 units" in _governed_row(live, "embeddings")
    # Once every job ran the queue is still governed by the budget, and says so.
    run_all(queue)
    row = _governed_row(client.get("/").text, "embeddings")
    assert "(budget openai)" in _cell(row, "namespace")
    assert '<span class="num">0 / 3 units</span>' in _cell(row, "barcell")


def test_an_undeclared_or_rate_only_budget_on_the_overview(conn, queue, client):
    queue.enqueue("t", {}, EnqueueOptions(queue="sync", budget="partner"))
    queue.enqueue("t", {}, EnqueueOptions(queue="calls", budget="api"))
    queue.sync_budgets("ns", [BudgetDefinition("api", rate_limit="10/m")])
    html = client.get("/").text
    sync = _governed_row(html, "sync")
    assert "undeclared" in _cell(sync, "namespace")
    assert 'budget partner: <span class="quiet">no limit</span>' in _cell(sync, "barcell")
    calls = _governed_row(html, "calls")
    assert "ns<br><small>(budget api)</small>" in _cell(calls, "namespace")
    assert "0 units</span><br><small>budget api (no max active)</small>" in _cell(
        calls, "barcell")
    assert re.search(r"<td>\s*10/m<br><small>budget api</small></td>", calls), calls


def test_the_budgets_page_lists_the_queues_whose_jobs_ran(conn, fleet, queue, client):
    start(fleet, queue)
    fleet.embed.apply_async(args=(9,), queue="later", delay=3600)  # scheduled only
    run_all(queue)
    [openai] = _data.budgets(conn).budgets
    assert openai.health.queues == []   # no ready or active job names it now
    assert openai.queues == ["embeddings", "later", "summaries"]
    row = _budget_row(client.get("/budgets").text, "openai")
    queues = re.search(r'<td class="queues">(.*?)</td>', row, re.S)
    assert queues, row
    links = re.findall(r'<a href="/queue\?name=([^"]+)" data-queue="[^"]+">', queues.group(1))
    assert links == ["embeddings", "later", "summaries"], queues.group(1)
    assert "none" not in queues.group(1)


def test_the_budgets_page_still_says_none_for_a_budget_no_job_named(conn, queue, client):
    queue.sync_budgets("ns", [BudgetDefinition("idle", max_active=2)])
    row = _budget_row(client.get("/budgets").text, "idle")
    assert '<td class="queues"><span class="quiet">none</span></td>' in row, row


def test_the_queue_page_shows_the_budget_s_units(conn, fleet, queue, client):
    start(fleet, queue)
    page = _data.queue_page(conn, "embeddings")
    assert page.health is not None and page.health.budgets == ["openai"]
    html = client.get("/queue?name=embeddings").text
    card = re.search(r'<div class="card wide budget-card" data-budget="openai">\s*'
                     r'<span class="label">(.*?)</span>.*?<span class="n">(.*?)</span>',
                     html, re.S)
    assert card, html
    assert card.groups() == ("budget openai: active units / max, in all its queues", "1 / 3")
    assert '<span class="n">1 / -</span>' not in html   # no limit of its own shown as "-"
    assert "no policy of its own: the budgets its jobs name govern it" in html
    # Its jobs all ran and moved to history: the overview still lists it, and its page is
    # still there (not 404).
    run_all(queue)
    assert queue.move_to_history(after=0) > 0
    assert "embeddings" in {p.queue for p in _data.overview(conn).policies}
    response = client.get("/queue?name=embeddings")
    assert response.status_code == 200, response.text
    assert '<span class="n">0 / 3</span>' in response.text
