"""The dashboard's budgets page in headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright) against a real database and a running `workhorse dashboard` (issue #30 item 4;
docs/design.md "Named budgets": "the dashboard has a budgets page and a full budget is a 'blocked
by' reason"):

- /budgets, linked from the nav, has a row for a declared budget that is full (its units against
  max_active, its override and when it expires, its queues as links, "budget NAME full (a of m
  units)") and for a budget nobody declared ("undeclared: no limit");
- following a queue's link, the queue page says the budget holds its ready work back, for a queue
  with a policy and for one that only the budget governs (listed with the governed queues on the
  overview, "held by budget ...");
- a unit freed elsewhere reaches the open budgets page by its live refresh, without a reload;
- markup in a budget's name is shown as text, and the page fits 390 px.

The budget is made full by marking its jobs active in SQL (the stored state health() reads), so no
worker runs: the queues also read `stalled` (no supervisor), which the checks allow.
Marked `slow` and `browser`, like the other browser tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from ci_guard import skip_or_fail
from test_dashboard_browser import (
    ARTEFACTS,
    Process,
    _free_port,
    _missing,
    _responds,
    launch_chromium,
    wait_for,
)

from workhorse import BudgetDefinition, ConcurrencyPolicyDefinition, EnqueueOptions, Queue

pytestmark = [pytest.mark.slow, pytest.mark.browser]
EVIL = "<script>window.pwned = 1</script>"


@pytest.fixture(scope="module", autouse=True)
def _browser_available() -> None:
    missing = _missing()
    if missing:
        skip_or_fail(missing)


def _fill(conn: psycopg.Connection[Any]) -> None:
    """`openai` (declared by namespace ai, max_active 2, overridden to 2 for an hour over a
    declared 4) with 2 units active in `summaries` (which has a policy) and ready jobs in
    `summaries` and `embeddings` (which has none); `partner`, named by `partner-sync`'s jobs and
    declared by nobody; a budget whose name is markup."""
    q = Queue(conn)
    q.sync_concurrency_policies("ai", [ConcurrencyPolicyDefinition("summaries", max_active=10)])
    q.sync_budgets("ai", [BudgetDefinition("openai", max_active=4, rate_limit="600/m")])
    q.override_budget("openai", max_active=2, expires_in=3600)
    q.enqueue_many([("ai.summarize", {}, EnqueueOptions(queue="summaries", budget="openai"))
                    for _ in range(5)])
    q.enqueue_many([("ai.embed", {}, EnqueueOptions(queue="embeddings", budget="openai"))
                    for _ in range(3)])
    q.enqueue_many([("ai.push", {}, EnqueueOptions(queue="partner-sync", budget="partner"))
                    for _ in range(2)])
    q.enqueue("ai.evil", {}, EnqueueOptions(queue="evil", budget=EVIL))
    conn.execute(
        "UPDATE workhorse.jobs SET status = 'active', fence = id, attempts = 1,"
        " started_at = clock_timestamp(), lease_until = clock_timestamp() + interval '1 hour'"
        " WHERE id IN (SELECT id FROM workhorse.jobs WHERE queue = 'summaries'"
        "              ORDER BY id LIMIT 2)")


@pytest.fixture
def dashboard(database_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    conn = psycopg.connect(database_url, autocommit=True)
    _fill(conn)
    port = _free_port()
    process = Process(database_url, tmp_path / "dashboard.log", "dashboard", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _responds(base), 30, "the dashboard to listen")
        yield {"conn": conn, "base": base}
    except BaseException:
        print("--- dashboard ---\n" + process.output())
        raise
    finally:
        process.stop()
        conn.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    with launch_chromium() as chromium:
        yield chromium


def _tab(browser: Any, width: int = 1280, height: int = 900) -> Any:
    tab = browser.new_page(viewport={"width": width, "height": height})
    tab.errors = []
    tab.dialogs = []
    tab.on("pageerror", lambda error: tab.errors.append(str(error)))
    tab.on("dialog", lambda dialog: (tab.dialogs.append(dialog.message), dialog.dismiss()))
    tab.set_default_timeout(15_000)
    return tab


def check_budgets_page(tab: Any) -> None:
    """What the budgets page must show for _fill's state (the checker; the broken variants of
    the page in check_fails_on_broken_pages must each fail it)."""
    openai = tab.locator('tr[data-budget="openai"]')
    text = openai.inner_text()
    assert openai.locator("td.namespace").inner_text() == "ai", text
    assert openai.locator("td.max-active").inner_text() == "2", text      # the override's
    assert openai.locator("td.units .num").inner_text() == "2 / 2", text
    assert openai.locator("td.units .bar.full").count() == 1, text
    assert "override" in openai.locator("td.override").inner_text(), text
    assert "max 2" in openai.locator("td.override").inner_text(), text
    expires = openai.locator("td.override .expires").inner_text()
    assert expires in ("expires in 60m", "expires in 59m"), expires
    assert openai.locator("td.ready").inner_text() == "6", text
    assert openai.locator("td.blocked").inner_text() == "6", text
    assert openai.locator("td.queues a").all_inner_texts() == ["embeddings", "summaries"], text
    assert "600/m" in openai.locator("td.rate").inner_text(), text
    assert openai.locator("td.state").inner_text() == "budget openai full (2 of 2 units)", text
    partner = tab.locator('tr[data-budget="partner"]')
    assert partner.locator("td.namespace").inner_text() == "undeclared: no limit"
    assert partner.locator("td.max-active").inner_text() == "-"
    assert partner.locator("td.units .num").inner_text() == "0 / -"
    assert partner.locator("td.ready").inner_text() == "2"
    assert partner.locator("td.queues a").all_inner_texts() == ["partner-sync"]
    assert partner.locator("td.state").inner_text() == "limits nothing"
    # The markup budget: a row of its own, its name as text.
    assert tab.locator("tr[data-budget] td.name").all_inner_texts().count(EVIL) == 1


# Broken variants of the budgets page (as a dashboard that got one thing wrong would render it):
# each must fail check_budgets_page, or the checker proves nothing.
BROKEN = {
    "the full budget not said to hold work back": (
        "budget openai full (2 of 2 units)</small>", "room</small>"),
    "the declared limit shown instead of the override's": (
        '<td class="num max-active">2</td>', '<td class="num max-active">4</td>'),
    "the undeclared budget shown as declared": ("undeclared: no limit", "ai"),
    "a queue's link missing": ('data-queue="embeddings">embeddings</a>', ">embeddings"),
    "the markup name run instead of shown": ("&lt;script&gt;", "<script>"),
}


def check_fails_on_broken_pages(browser: Any, html: str) -> None:
    from playwright.sync_api import Error as PlaywrightError

    scratch = _tab(browser)
    scratch.set_default_timeout(2_000)  # a row a variant lost is missing for good
    try:
        for what, (good, bad) in BROKEN.items():
            assert good in html, what
            scratch.set_content(html.replace(good, bad))
            try:
                check_budgets_page(scratch)
            except (AssertionError, PlaywrightError) as exc:
                print("BROKEN", what, "->", type(exc).__name__, str(exc).splitlines()[0][:150])
                continue
            raise AssertionError(f"check_budgets_page passed a page with {what}")
    finally:
        scratch.close()


def test_the_budgets_page_and_the_queue_pages_say_which_budget_holds_work_back(
        dashboard, browser):
    conn, base = dashboard["conn"], dashboard["base"]
    tab = _tab(browser)
    try:
        tab.goto(base + "/")
        tab.click('nav a[href="/budgets"]')
        tab.wait_for_url("**/budgets")
        assert tab.locator("nav a.here").inner_text() == "Budgets"
        check_budgets_page(tab)
        tab.screenshot(path=str(ARTEFACTS / "budgets.png"), full_page=True)
        check_fails_on_broken_pages(browser, tab.content())

        # The queue with a policy, from the budget's link.
        tab.locator('tr[data-budget="openai"] td.queues a[data-queue="summaries"]').click()
        tab.wait_for_url("**/queue?name=summaries")
        held = tab.locator("#held-by").inner_text()
        assert "budget openai full (2 of 2 units)" in held, held
        assert "budget openai full (2 of 2 units)" in tab.locator(
            'table.queue-budgets tr[data-budget="openai"]').inner_text()
        tab.screenshot(path=str(ARTEFACTS / "budget-queue.png"), full_page=True)
        # The queue that only the budget governs.
        tab.goto(base + "/queue?name=embeddings")
        held = tab.locator("#held-by").inner_text()
        assert "budget openai full (2 of 2 units)" in held, held
        # The overview lists it with the governed queues, held by the budget.
        tab.goto(base + "/")
        for name in ("summaries", "embeddings"):
            state = tab.locator(f'tr[data-queue="{name}"] td.state').inner_text()
            assert "held by budget openai full (2 of 2 units)" in state, state
        assert "held by" not in tab.locator(
            'tr[data-queue="partner-sync"] td.state').inner_text()

        # One unit freed elsewhere: the open budgets page follows by its live refresh.
        tab.goto(base + "/budgets")
        tab.evaluate("() => { window.__mark = 1; }")
        conn.execute("UPDATE workhorse.jobs SET status = 'succeeded', finished_at = now()"
                     " WHERE id = (SELECT min(id) FROM workhorse.jobs WHERE status = 'active')")
        state = tab.locator('tr[data-budget="openai"] td.state')
        wait_for(lambda: state.inner_text() == "room", 20, "the live refresh")
        assert tab.locator('tr[data-budget="openai"] td.units .num').inner_text() == "1 / 2"
        assert tab.evaluate("() => window.__mark") == 1  # no reload
        assert tab.errors == [] and tab.dialogs == []
        assert not tab.evaluate("window.pwned")
    finally:
        tab.close()
    phone = _tab(browser, 390, 844)
    try:
        phone.goto(base + "/budgets")
        width = phone.evaluate("() => document.documentElement.scrollWidth")
        phone.screenshot(path=str(ARTEFACTS / "phone-budgets.png"), full_page=True)
        assert width <= 390, width
    finally:
        phone.close()


def test_a_real_fleet_s_full_budget_on_the_pages(database_url, tmp_path, browser):
    """A `workhorse worker` (the claim that admits by budget) fills `openai` from both queues
    and runs every `partner` job (nobody declared it: no limit); the pages say so."""
    import budgetapp
    from test_dashboard_browser import scalar

    conn = psycopg.connect(database_url, autocommit=True)
    worker = Process(database_url, tmp_path / "worker.log", "worker", "budgetapp:app", "--sync",
                     "--slots", "1", "--concurrency", "8", "--grace", "1s")
    port = _free_port()
    dashboard = Process(database_url, tmp_path / "dashboard.log", "dashboard", "--port",
                        str(port))
    base = f"http://127.0.0.1:{port}"

    def active(where: str) -> int:
        return int(scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'active'"
                                f" AND {where}"))
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.budgets") == 1, 30,
                 "the worker's sync")
        with budgetapp.app.using(conn):
            budgetapp.app.enqueue_many([budgetapp.summarize.call((n,)) for n in range(4)]
                                       + [budgetapp.embed.call((n,)) for n in range(4)]
                                       + [budgetapp.push.call((n,)) for n in range(3)])
        wait_for(lambda: active("budget = 'openai'") == 2, 30, "2 openai jobs active")
        wait_for(lambda: active("budget = 'partner'") == 3, 30, "every partner job active")
        wait_for(lambda: _responds(base), 30, "the dashboard to listen")
        tab = _tab(browser)
        tab.goto(base + "/budgets")
        openai = tab.locator('tr[data-budget="openai"]')
        assert openai.locator("td.namespace").inner_text() == "budgetapp"
        assert openai.locator("td.units .num").inner_text() == "2 / 2"
        assert openai.locator("td.ready").inner_text() == "6"
        assert openai.locator("td.blocked").inner_text() == "6"
        assert openai.locator("td.state").inner_text() == "budget openai full (2 of 2 units)"
        partner = tab.locator('tr[data-budget="partner"]')
        assert partner.locator("td.namespace").inner_text() == "undeclared: no limit"
        assert partner.locator("td.units .num").inner_text() == "3 / -"
        assert partner.locator("td.state").inner_text() == "limits nothing"
        assert partner.locator("td.queues a").all_inner_texts() == ["partner-sync"]
        tab.screenshot(path=str(ARTEFACTS / "budgets-fleet.png"), full_page=True)
        for name in ("summaries", "embeddings"):
            tab.goto(f"{base}/queue?name={name}")
            assert tab.locator("#stalled").count() == 0  # the worker serves it
            held = tab.locator("#held-by").inner_text()
            assert "budget openai full (2 of 2 units)" in held, (name, held)
        tab.goto(base + "/")
        for name in ("summaries", "embeddings"):
            state = tab.locator(f'tr[data-queue="{name}"] td.state').inner_text()
            assert "held by budget openai full (2 of 2 units)" in state, (name, state)
        assert "held by" not in tab.locator(
            'tr[data-queue="partner-sync"] td.state').inner_text()
        assert active("budget = 'openai'") == 2  # still: the pages read a steady state
        assert tab.errors == []
        tab.close()
    except BaseException:
        print("--- worker ---\n" + worker.output() + "\n--- dashboard ---\n" + dashboard.output())
        raise
    finally:
        worker.stop()
        dashboard.stop()
        conn.close()
