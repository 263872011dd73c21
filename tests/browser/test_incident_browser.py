"""The dashboard in an incident (issue #32; docs/design.md "The dashboard in an incident"), in
headless Chromium against a real fleet: a `workhorse worker` on tests/browser/dashapp.py and a
`workhorse dashboard`, as in test_dashboard_browser.py.

- a stopped fleet reads `stalled`, with the reason, on the overview and the queue page;
- a budget-blocked queue says which limit holds it and when the next start is allowed;
- a live refresh keeps focus, a text selection and a form being typed in across three refresh
  periods, and the header's control pauses it; a finished job's page does not poll;
- a typo queue is refused (404, nothing created); confirms name the queue or the count; only the
  actions that apply are offered; an action that changed nothing says why;
- substring filters with a count, and suggestions;
- a job that failed then succeeded lists both attempts, and shows no error of its own (with
  main's _job.html in place: no #attempts rows);
- a notice spoofed through the URL is not shown;
- every page fits 390 px (`document.documentElement.scrollWidth <= 390`), and the charts have
  labelled axes, per queue and fleet-wide.

Each test fails on the dashboard as it was before #32 (checked by running this file with main's
workhorse/dashboard/ in place of this branch's: no #stalled or #held-by, the selection cleared by
the first refresh, /queue?name=mial answered 200 with a Pause button, the spoofed text shown as a
notice, /jobs 1,146 px wide at 390 px).

Marked `slow` (and `browser`), like the other browser tests: they run in CI's first pass only.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from ci_guard import skip_or_fail
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from test_dashboard_browser import (
    ARTEFACTS,
    Process,
    _free_port,
    _missing,
    _responds,
    launch_chromium,
    scalar,
    wait_for,
)

from workhorse import Queue

pytestmark = [pytest.mark.slow, pytest.mark.browser]
LIVE = 2  # the dashboard's default refresh period, seconds


@pytest.fixture(scope="module", autouse=True)
def _browser_available() -> None:
    missing = _missing()
    if missing:
        skip_or_fail(missing)


def _with_dbname(url: str, dbname: str) -> str:
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="module")
def module_db(server_url: str, template_name: str) -> Iterator[str]:
    """One database for the module's fleet (the tests below share one worker and dashboard)."""
    name = f"wh_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')
    try:
        yield _with_dbname(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _start(database_url: str, logs: Path) -> tuple[Process, Process, str]:
    worker = Process(database_url, logs / "worker.log", "worker", "dashapp:app", "--sync",
                     "--slots", "1", "--concurrency", "8", "--grace", "1s")
    port = _free_port()
    dashboard = Process(database_url, logs / "dashboard.log", "dashboard", "--port", str(port))
    return worker, dashboard, f"http://127.0.0.1:{port}"


def _fill(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The browser tests' usual fleet (see test_dashboard_browser.fleet): saturated api keys,
    three failures, a rate-limited mail key."""
    import dashapp

    with dashapp.app.using(conn):
        tenants = ["acme", "globex", "initech", "umbrella", "hooli"]
        api = [h.id for h in dashapp.app.enqueue_many(
            [dashapp.call_api.call((tenant, n)) for n in range(3) for tenant in tenants])]
        failed = [h.id for h in dashapp.app.enqueue_many(
            [dashapp.explode.call((n,)) for n in range(3)])]
        mail = [h.id for h in dashapp.app.enqueue_many(
            [dashapp.send_mail.call(("ops@example.com",)) for _ in range(4)])]
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = 'api' "
                                  "AND status = 'active'") == 3, 30, "3 active api jobs")
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = 'flaky' "
                                  "AND status = 'failed'") == 3, 30, "3 failures")
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = 'mail' "
                                  "AND status = 'succeeded'") == 1, 30, "one mail sent")
    return {"api": api, "failed": failed, "mail": mail}


@pytest.fixture(scope="module")
def fleet(module_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("incident")
    conn = psycopg.connect(module_db, autocommit=True)
    worker, dashboard, base = _start(module_db, logs)
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.policies") == 2, 30,
                 "the worker's sync")
        jobs = _fill(conn)
        wait_for(lambda: _responds(base), 30, "the dashboard to listen")
        yield {"conn": conn, "base": base, "worker": worker, **jobs}
    except BaseException:
        print("--- worker ---\n" + worker.output() + "\n--- dashboard ---\n" + dashboard.output())
        raise
    finally:
        worker.stop()
        dashboard.stop()
        conn.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launch_chromium() as chromium:
        yield chromium


def _tab(browser: Any, width: int = 1280, height: int = 900) -> Any:
    tab = browser.new_page(viewport={"width": width, "height": height})
    tab.dialogs = []
    tab.errors = []

    def on_dialog(dialog: Any) -> None:
        tab.dialogs.append(dialog.message)
        if getattr(tab, "refuse_confirms", False):
            dialog.dismiss()
        else:
            dialog.accept()

    tab.on("dialog", on_dialog)
    tab.on("pageerror", lambda error: tab.errors.append(str(error)))
    tab.set_default_timeout(15_000)
    return tab


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    tab = _tab(browser)
    try:
        yield tab
    finally:
        assert tab.errors == []
        tab.close()


# ---- 1. stalled and blocked, explained ----------------------------------------------------------


def test_a_stopped_fleet_reads_stalled_with_the_reason(database_url, tmp_path, browser):
    conn = psycopg.connect(database_url, autocommit=True)
    worker, dashboard, base = _start(database_url, tmp_path)
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.policies") == 2, 30,
                 "the worker's sync")
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.workers") == 1, 30,
                 "the worker's registry row")
        wait_for(lambda: _responds(base), 30, "the dashboard to listen")
        tab = _tab(browser)
        tab.goto(base + "/")
        assert tab.locator("#stalled").count() == 0
        assert worker.stop() == 0  # the whole fleet stops (a clean exit unregisters it)
        import dashapp

        with dashapp.app.using(conn):
            dashapp.app.enqueue_many([dashapp.send_mail.call((f"u{n}@example.com",))
                                      for n in range(52)])
        # The live refresh brings the banner, without a reload.
        item = tab.locator('#stalled li[data-stalled="mail"]')
        item.wait_for()
        assert "no live supervisor: none is registered" in item.inner_text()
        row = tab.locator('tr[data-queue="mail"] td.state')
        assert "stalled" in row.inner_text() and "running" not in row.inner_text()
        tab.goto(base + "/queue?name=mail")
        banner = tab.locator("#stalled")
        assert "Stalled" in banner.inner_text()
        assert "no live supervisor" in banner.inner_text()
        # The chart's caption is the latest minute, zero included: nothing runs now.
        tab.screenshot(path=str(ARTEFACTS / "stalled.png"), full_page=True)
        assert tab.errors == []
        tab.close()
    except BaseException:
        print("--- worker ---\n" + worker.output() + "\n--- dashboard ---\n" + dashboard.output())
        raise
    finally:
        worker.stop()
        dashboard.stop()
        conn.close()


def test_a_budget_blocked_queue_says_which_limit_holds_it(fleet, page):
    base = fleet["base"]
    page.goto(base + "/queue?name=api")
    held = page.locator("#held-by").inner_text()
    assert "queue limit: 3 of 3 active" in held
    page.goto(base + "/queue?name=mail")
    held = page.locator("#held-by").inner_text()
    assert re.search(r"key rate: 1 key\(s\) out of 1/m; the soonest may start (in \d+ s|now)",
                     held), held
    window = page.locator("#rate-window").inner_text()
    assert "rate window (600/m)" in window and re.search(r"\b\d+ / 600\b", window)
    page.goto(base + "/")
    assert "held by queue limit: 3 of 3 active" in page.locator(
        'tr[data-queue="api"] td.state').inner_text()


# ---- 5. refresh that keeps the operator's place -------------------------------------------------


def _live_stamp(page: Any) -> int:
    """A mark on the current live region: it is gone once htmx has replaced the region."""
    return int(page.evaluate("""() => {
        const live = document.getElementById('live');
        if (!live.dataset.mark) { live.dataset.mark = String(Date.now()); }
        return Number(live.dataset.mark);
    }"""))


def _replaced(page: Any) -> bool:
    return bool(page.evaluate("() => !document.getElementById('live').dataset.mark"))


def test_refresh_keeps_focus_selection_and_typing_and_can_be_paused(fleet, page):
    base, conn = fleet["base"], fleet["conn"]
    page.goto(base + "/jobs?queue=flaky")
    error_cell = page.locator(f'tr[data-job="{fleet["failed"][0]}"] td.error')
    # Select the error text (to copy it), as a user dragging over it would.
    page.evaluate("""(id) => {
        const cell = document.querySelector(`tr[data-job="${id}"] td.error`);
        const range = document.createRange();
        range.selectNodeContents(cell);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
    }""", str(fleet["failed"][0]))
    selected = page.evaluate("() => window.getSelection().toString()")
    assert "upstream said no" in selected
    _live_stamp(page)
    time.sleep(3 * LIVE + 1)
    assert page.evaluate("() => window.getSelection().toString()") == selected
    assert error_cell.inner_text() and not _replaced(page)
    assert "held while text is selected" in page.locator("#refresh-state").inner_text()
    page.evaluate("() => window.getSelection().removeAllRanges()")
    wait_for(lambda: _replaced(page), 10, "the refresh to resume once the selection is gone")

    # Focus on a link in the live region stays where it is.
    link = page.locator(f'tr[data-job="{fleet["failed"][1]}"] td.num a')
    link.focus()
    _live_stamp(page)
    time.sleep(3 * LIVE + 1)
    assert page.evaluate("() => document.activeElement.textContent") == str(fleet["failed"][1])
    assert not _replaced(page)
    page.evaluate("() => document.activeElement.blur()")

    # Typing into the override form while the numbers refresh: the entry and the focus stay.
    page.goto(base + "/queue?name=api")
    field = page.locator('input[name="max_active"]')
    field.click()
    page.keyboard.type("4")
    for _ in range(3):
        _live_stamp(page)
        wait_for(lambda: _replaced(page), 10, "a refresh")
    assert field.input_value() == "4"
    assert page.evaluate("() => document.activeElement.name") == "max_active"

    # The header's control pauses the refresh (kept in this browser), and resumes it.
    page.select_option("#refresh-control", "0")
    _live_stamp(page)
    Queue(conn).pause("api")
    time.sleep(2 * LIVE + 1)
    assert not _replaced(page) and page.locator(".stalled").count() == 0
    page.reload()
    assert page.locator("#refresh-control").input_value() == "0"
    page.select_option("#refresh-control", str(LIVE))
    Queue(conn).resume("api")
    _live_stamp(page)
    wait_for(lambda: _replaced(page), 10, "the refresh to resume")


def test_a_finished_job_s_page_does_not_poll(fleet, page):
    base = fleet["base"]
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "live=1" in r.url else None)
    page.goto(f"{base}/jobs/{fleet['failed'][0]}")
    page.wait_for_timeout((2 * LIVE + 1) * 1000)  # (Playwright's own wait: events arrive)
    assert requests == []
    page.goto(f"{base}/jobs/{fleet['api'][0]}")  # active: polled
    page.wait_for_timeout((2 * LIVE + 1) * 1000)
    assert requests


def test_a_job_that_failed_then_succeeded_lists_both_attempts_and_no_error_of_its_own(
        fleet, page):
    """Issue #32 item 2: before it, the page showed the first attempt's error in an Error box
    beside the result, and no attempts."""
    import dashapp

    conn, base = fleet["conn"], fleet["base"]
    with dashapp.app.using(conn):
        job_id = dashapp.second_time_lucky.delay(7).id
    wait_for(lambda: scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s",
                            job_id) == "succeeded", 30, "the second attempt's success")
    page.goto(f"{base}/jobs/{job_id}")
    rows = page.locator("#attempts tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).get_attribute("data-outcome") == "retried"
    assert rows.nth(1).get_attribute("data-outcome") == "succeeded"
    assert "ValueError" in rows.nth(0).inner_text()
    assert "first attempt of 7 fails" in rows.nth(0).inner_text()
    assert page.locator("#job-error").count() == 0
    assert page.get_by_role("heading", name="Error", exact=True).count() == 0
    assert page.locator("#result").is_visible()
    # The traceback of the failed attempt opens under it.
    rows.nth(0).locator("summary").click()
    assert "Traceback" in rows.nth(0).locator("pre.attempt-traceback").inner_text()
    # In the Jobs list, the succeeded job shows no error in red.
    page.goto(f"{base}/jobs?queue=lucky&status=succeeded")
    row = page.locator(f"tr:has(a[href='/jobs/{job_id}'])")
    assert row.count() == 1 and row.locator("td.error").inner_text().strip() == ""


# ---- 3. safe actions ----------------------------------------------------------------------------


def test_a_typo_queue_is_refused_and_creates_nothing(fleet, page):
    base, conn = fleet["base"], fleet["conn"]
    response = page.goto(base + "/queue?name=mial")
    assert response is not None and response.status == 404
    text = page.locator("main").inner_text()
    assert "no queue 'mial'" in text and "did you mean 'mail'" in text
    assert page.locator("#pause").count() == 0
    csrf = page.evaluate("() => document.body.dataset.csrf")
    answer = page.request.post(base + "/queue/pause", form={"queue": "mial", "csrf": csrf})
    assert answer.status == 404
    assert scalar(conn, "SELECT count(*) FROM workhorse.queue_controls WHERE queue = 'mial'") == 0
    assert scalar(conn, "SELECT count(*) FROM workhorse.policies WHERE queue = 'mial'") == 0


def test_confirms_name_the_queue_or_count_and_only_applicable_actions_show(fleet, page):
    base, conn = fleet["base"], fleet["conn"]
    page.refuse_confirms = True
    page.goto(base + "/queue?name=api")
    page.click("#pause")
    assert page.dialogs[-1].startswith('Pause queue "api"?')
    assert scalar(conn, "SELECT count(*) FROM workhorse.queue_controls WHERE queue = 'api'") == 0

    page.goto(f"{base}/jobs/{fleet['failed'][0]}")
    assert page.locator("#retry").count() == 1 and page.locator("#cancel").count() == 0
    sent = next(i for i in fleet["mail"] if scalar(
        conn, "SELECT status FROM workhorse.jobs WHERE id = %s", i) == "succeeded")
    page.goto(f"{base}/jobs/{sent}")
    assert page.locator("#retry").count() == 0 and page.locator("#cancel").count() == 0
    assert "No action applies to a succeeded job" in page.locator("#no-action").inner_text()

    # Bulk on everything matching a substring filter, with the count in the confirm.
    page.goto(base + "/jobs?queue=FLAK")
    assert "3 jobs match" in page.locator("#match-count").inner_text()
    page.click("#retry-all")
    assert page.dialogs[-1].startswith("Retry all 3 failed, held or canceled jobs matching "
                                       "queue ~ 'FLAK'")
    page.check(f'tr[data-job="{fleet["failed"][0]}"] input.pick')
    page.click("#cancel-selected")
    assert page.dialogs[-1] == "Cancel the 1 selected job(s)?"
    page.refuse_confirms = False
    page.click("#cancel-selected")  # a failed job: nothing to cancel, and it says why
    problem = page.locator(".problem").inner_text()
    assert problem == ("nothing changed: canceled (or asked to cancel) 0 of 1; not canceled: "
                       "1 failed (cancel applies to waiting, scheduled, ready, active, held or "
                       "suspended jobs)")


def test_the_override_form_keeps_its_entries_and_says_until_cleared(fleet, page):
    page.goto(fleet["base"] + "/queue?name=api")
    form = page.locator("#override-form")
    assert "blank: until cleared" in form.inner_text()
    assert page.locator('input[name="for"]').get_attribute("placeholder") == "until cleared"
    assert page.locator('input[name="max_active"]').get_attribute("placeholder") == "unchanged"
    page.fill('input[name="max_active"]', "2")
    page.fill('input[name="rate_limit"]', "fast")
    page.fill('input[name="for"]', "30m")
    page.click("#override")
    assert "Nothing changed" in page.locator("#override-problem").inner_text()
    assert page.locator('input[name="max_active"]').input_value() == "2"
    assert page.locator('input[name="rate_limit"]').input_value() == "fast"
    assert page.locator('input[name="for"]').input_value() == "30m"


# ---- 4. find ------------------------------------------------------------------------------------


def test_filters_match_a_trimmed_substring_with_a_count_and_suggestions(fleet, page):
    page.goto(fleet["base"] + "/jobs")
    page.fill('input[name="task"]', "  EXPLODE ")
    page.click('form.filters button[type="submit"]')
    page.wait_for_url("**/jobs?*task=*")
    assert page.locator("tr[data-job]").count() == 3
    assert page.locator("#match-count").inner_text().startswith("3 jobs match")
    options = page.locator("#known-tasks option").evaluate_all(
        "(os) => os.map((o) => o.value)")
    assert "dashapp.explode" in options and "dashapp.send_mail" in options
    queues = page.locator("#known-queues option").evaluate_all("(os) => os.map((o) => o.value)")
    assert {"api", "flaky", "mail"} <= set(queues)


# ---- 6. notices ---------------------------------------------------------------------------------


def test_a_notice_in_the_url_is_not_shown_and_an_action_s_own_result_is(fleet, page):
    base, conn = fleet["base"], fleet["conn"]
    page.goto(base + "/jobs?done=All+jobs+were+deleted+by+admin")
    assert page.locator(".notice").count() == 0
    assert "All jobs were deleted" not in page.content()
    waiting = next(i for i in fleet["api"] if scalar(
        conn, "SELECT status FROM workhorse.jobs WHERE id = %s", i) == "ready")
    page.goto(f"{base}/jobs/{waiting}")
    page.click("#cancel")
    assert page.locator(".notice").inner_text() == "canceled (or asked to cancel) 1 of 1"
    assert "done=" not in page.url
    page.reload()
    assert page.locator(".notice").count() == 0  # shown once


# ---- 7. phone layout and charts -----------------------------------------------------------------


def test_every_page_fits_390_px_and_the_charts_have_labelled_axes(fleet, browser):
    base = fleet["base"]
    tab = _tab(browser, 390, 844)
    try:
        pages = ["/", "/queue?name=api", "/queue?name=mail", "/queue?name=flaky", "/jobs",
                 "/jobs?status=failed", "/jobs?queue=api", f"/jobs/{fleet['failed'][0]}",
                 f"/jobs/{fleet['api'][0]}", "/workers", "/schedules", "/queue?name=mial",
                 "/jobs/999999999"]
        wide = {}
        for path in pages:
            tab.goto(base + path)
            width = tab.evaluate("() => document.documentElement.scrollWidth")
            if width > 390:
                wide[path] = width
            name = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "overview"
            tab.screenshot(path=str(ARTEFACTS / f"phone-{name}.png"), full_page=True)
        assert wide == {}
        tab.goto(base + "/")
        chart = tab.locator("#chart")
        assert chart.locator(".yaxis span").count() == 3
        assert chart.locator(".yaxis span").last.inner_text() == "0"
        assert chart.locator(".ticks span").last.inner_text() == "now"
        assert "y: jobs per second" in chart.inner_text()
        assert "fleet-wide, latest minute:" in chart.locator("figcaption").inner_text()
        tab.goto(base + "/queue?name=mail")
        chart = tab.locator("#queue-chart")
        assert "queue mail, latest minute:" in chart.locator("figcaption").inner_text()
        assert chart.locator(".yaxis span").count() == 3
        assert tab.errors == []
    finally:
        tab.close()
