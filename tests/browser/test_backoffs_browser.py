"""Back-pressure on the dashboard in headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright) against a real database and a running `workhorse dashboard` (docs/design.md
"Back-pressure"):

- a backoff a handler raises while the overview is open appears in its backed-off banner by the
  live refresh, without a reload: "backed off until T by job N";
- the queue page lists the queue's backed-off keys (a markup key shown as text); its "Clear"
  button ends one key's backoff, "Clear backoff" the rest, each after a confirm that names the
  queue and key, and the notice says what ended;
- the budgets page's "Clear backoff" ends the budget's, and its state column then says "room";
- the banners fit a 390 px wide screen;
- the checker of the banner fails on broken variants of the page (the job or the end left out,
  the key's markup run).

The backoffs are made as a handler's Backoff makes them: a job is claimed and backed off under
its fence (the job goes back to ready); no worker runs, so the queues also read `stalled`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
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

from workhorse import BudgetDefinition, EnqueueOptions, Queue, _ops
from workhorse.types import BackoffState

pytestmark = [pytest.mark.slow, pytest.mark.browser]
EVIL = "<script>window.pwned = 3</script>"


@pytest.fixture(scope="module", autouse=True)
def _browser_available() -> None:
    missing = _missing()
    if missing:
        skip_or_fail(missing)


def back_off(q: Queue, queue: str, scope: str, seconds: float = 600) -> BackoffState:
    """Claim one of `queue`'s ready jobs and back off `scope` from it, as a handler's Backoff."""
    [job] = q.claim(queue, 1, 30)
    _, state = q._run(_ops.backoff(job.id, job.fence, seconds, scope, None, True),
                      transaction=True)
    assert state is not None
    return state


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fill(conn: psycopg.Connection[Any]) -> dict[str, BackoffState]:
    """Keys `acme` and a markup key of `crawl` backed off (key `free` not); `embeddings` names
    budget `openai` (declared, not yet backed off: the test backs it off with the page open)."""
    q = Queue(conn)
    q.sync_budgets("ai", [BudgetDefinition("openai", max_active=4)])
    q.enqueue_many([("t", {}, EnqueueOptions(queue="crawl", concurrency_key=key))
                    for key in ("acme", EVIL, "free")])
    q.enqueue_many([("t", {}, EnqueueOptions(queue="embeddings", budget="openai"))
                    for _ in range(3)])
    held = {"acme": back_off(q, "crawl", "key"), "evil": back_off(q, "crawl", "key")}
    assert (held["acme"].key, held["evil"].key) == ("acme", EVIL)
    return held


@pytest.fixture
def dashboard(database_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    conn = psycopg.connect(database_url, autocommit=True)
    held = _fill(conn)
    port = _free_port()
    process = Process(database_url, tmp_path / "dashboard.log", "dashboard", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _responds(base), 30, "the dashboard to listen")
        yield {"conn": conn, "base": base, "held": held}
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


def _tab(browser: Any) -> Any:
    """A tab that accepts the confirms (and keeps their text) and records page errors."""
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.errors = []
    tab.confirms = []

    def on_dialog(dialog: Any) -> None:
        tab.confirms.append(dialog.message)
        if dialog.type == "confirm":
            dialog.accept()
        else:  # an alert would mean that markup from the database ran
            dialog.dismiss()

    tab.on("dialog", on_dialog)
    tab.on("pageerror", lambda error: tab.errors.append(str(error)))
    tab.set_default_timeout(15_000)
    return tab


def check_queue_banner(tab: Any, held: dict[str, BackoffState]) -> None:
    """What the crawl queue page's banner must say for _fill's keys (the checker; each variant
    in BROKEN must fail it)."""
    banner = tab.locator("#backed-off")
    assert "2 keys backed off" in banner.inner_text(), banner.inner_text()
    rows = tab.locator("#backed-off table.backed-off-keys tbody tr")
    assert rows.count() == 2
    for name, key in (("acme", "acme"), ("evil", EVIL)):
        b = held[name]
        row = rows.filter(has_text=key)
        assert row.locator("td.key").inner_text() == key
        said = row.inner_text()
        assert f"backed off until {stamp(b.until)} by job {b.by_job}" in said, said
        assert row.locator("button").inner_text() == "Clear"
    assert tab.locator("#backed-off #clear-backoff").inner_text() == "Clear backoff"


BROKEN = {
    "the job left out": (" by job <a href=", " <a hidden href="),
    "the end left out": ('<span class="until"', '<span hidden class="until"'),
    "the markup key run": ("&lt;script&gt;window.pwned = 3&lt;/script&gt;",
                           "<script>window.pwned = 3</script>"),
}


def check_fails_on_broken_pages(browser: Any, html: str, held: dict[str, BackoffState]) -> None:
    from playwright.sync_api import Error as PlaywrightError

    scratch = _tab(browser)
    scratch.set_default_timeout(2_000)
    try:
        for what, (good, bad) in BROKEN.items():
            assert good in html, what
            scratch.set_content(html.replace(good, bad))
            try:
                check_queue_banner(scratch, held)
            except (AssertionError, PlaywrightError) as exc:
                print("BROKEN", what, "->", type(exc).__name__, str(exc).splitlines()[0][:150])
                continue
            raise AssertionError(f"check_queue_banner passed a page with {what}")
    finally:
        scratch.close()


def test_backoffs_appear_live_and_clear_backoff_ends_them(dashboard, browser):
    conn, base, held = dashboard["conn"], dashboard["base"], dashboard["held"]
    q = Queue(conn)
    tab = _tab(browser)
    try:
        # ---- the overview: a backoff raised while it is open appears without a reload -----
        tab.goto(base + "/")
        tab.evaluate("() => { window.__mark = 1; }")
        crawl = tab.locator('#backed-off li[data-queue="crawl"]')
        assert "2 keys backed off" in crawl.inner_text()
        assert tab.locator('#backed-off li[data-budget="openai"]').count() == 0
        openai = back_off(q, "embeddings", "budget")
        item = tab.locator('#backed-off li[data-budget="openai"]')
        item.wait_for()
        said = item.inner_text()
        assert f"backed off until {stamp(openai.until)} by job {openai.by_job}" in said, said
        assert tab.evaluate("() => window.__mark") == 1  # no reload
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(ARTEFACTS / "backoffs-overview.png"), full_page=True)

        # The banners fit a phone, as every page does.
        phone = browser.new_page(viewport={"width": 390, "height": 844})
        try:
            for path in ("/", "/queue?name=crawl", "/queue?name=embeddings", "/budgets"):
                phone.goto(base + path)
                phone.locator("#backed-off").wait_for()
                width = phone.evaluate("() => document.documentElement.scrollWidth")
                assert width <= 390, (path, width)
        finally:
            phone.close()

        # ---- the queue page: its keys; clear one, then the rest -------------------------------
        crawl.locator("a").first.click()
        tab.wait_for_url("**/queue?name=crawl")
        check_queue_banner(tab, held)
        tab.screenshot(path=str(ARTEFACTS / "backoffs-queue.png"), full_page=True)
        check_fails_on_broken_pages(browser, tab.content(), held)

        tab.locator("#backed-off tr", has_text="acme").locator("button").click()
        tab.locator(".notice").wait_for()
        notice = tab.locator(".notice").inner_text()
        assert notice.startswith("backoff cleared: key 'acme' of queue 'crawl'"), notice
        assert tab.confirms[-1] == ('Clear the backoff of key "acme" of queue "crawl"? Its ready '
                                    "jobs may start at once.")
        assert {b.key for b in q.backoffs() if b.scope == "key"} == {EVIL}
        assert tab.locator("#backed-off table.backed-off-keys tbody tr").count() == 1

        tab.click("#clear-backoff")
        tab.locator(".notice").wait_for()
        assert EVIL in tab.locator(".notice").inner_text()
        assert 'queue "crawl"' in tab.confirms[-1]
        tab.locator("#backed-off").wait_for(state="detached")
        assert [b.scope for b in q.backoffs()] == ["budget"]

        # ---- the budgets page: clear the budget's ---------------------------------------------
        tab.goto(base + "/budgets")
        state = tab.locator('tr[data-budget="openai"] td.state')
        assert f"by job {openai.by_job}" in state.inner_text()
        tab.locator('#backed-off li[data-budget="openai"] button').click()
        tab.locator(".notice").wait_for()
        assert tab.locator(".notice").inner_text().startswith(
            "backoff cleared: budget 'openai'")
        assert tab.confirms[-1].startswith('Clear the backoff of budget "openai"?')
        assert q.backoffs() == []
        assert state.inner_text() == "room"
        assert tab.locator("#backed-off").count() == 0
        assert len(q.claim("embeddings", 3, 30)) == 3  # the budget admits again

        assert tab.errors == []
        assert not tab.evaluate("window.pwned")
    finally:
        tab.close()
