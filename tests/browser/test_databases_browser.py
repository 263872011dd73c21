"""The dashboard of several databases (docs/design.md "Several databases"; issue #44) in headless
Chromium (Debian's /usr/bin/chromium under Playwright), served by `workhorse dashboard` with
WORKHORSE_DATABASES naming two real databases and one that cannot be reached:

- the overview lists both databases' queues in one table with a database column, and says that
  the third cannot be reached;
- the page's database control filters it to one, and a live refresh keeps the filter;
- a queue of the second database opens on its own page, and Pause there pauses it in that
  database only; the jobs page's picks of both databases cancel each in its own;
- the pages fit 390 px; no alert ran (names are markup) and no script error.

Screenshots go to tmp/artefacts/dashboard/ (or $WORKHORSE_ARTEFACTS/dashboard/).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from ci_guard import skip_or_fail
from test_dashboard_browser import (
    ARTEFACTS,
    _free_port,
    _missing,
    _responds,
    launch_chromium,
    scalar,
    wait_for,
)

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue

pytestmark = [pytest.mark.slow, pytest.mark.browser]
HERE = Path(__file__).resolve().parent
EVIL = "<img src=x onerror=alert(1)>"
NOWHERE = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"
LIVE = 2  # the dashboard's default refresh period, seconds


@pytest.fixture(scope="module", autouse=True)
def _browser_available() -> None:
    missing = _missing()
    if missing:
        skip_or_fail(missing)


@pytest.fixture
def served(database_url: str, eu_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """`default`: queue `api` (3 ready jobs) and `shared`; `eu`: queue `billing` (4 ready jobs,
    a markup key) and `shared`; `far` cannot be reached. `workhorse dashboard` serves them."""
    conns = {"default": psycopg.connect(database_url, autocommit=True),
             "eu": psycopg.connect(eu_url, autocommit=True)}
    for db, queue, n in (("default", "api", 3), ("eu", "billing", 4)):
        q = Queue(conns[db])
        q.sync_concurrency_policies(db, [ConcurrencyPolicyDefinition(queue, max_active=5)])
        q.enqueue_many([(f"{db}.task", {}, EnqueueOptions(queue=queue, concurrency_key=EVIL))
                        for _ in range(n)])
        q.enqueue("shared.task", {}, EnqueueOptions(queue="shared"))
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "WORKHORSE_DATABASES": f"default={database_url},eu={eu_url},far={NOWHERE}"}
    for name in ("WORKHORSE_DATABASE_URL", "WORKHORSE_DASHBOARD_TOKEN"):
        env.pop(name, None)
    log = tmp_path / "dashboard.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "workhorse", "dashboard", "--port",
                                 str(port)], cwd=HERE, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _responds(base), 30, "the dashboard to listen")
            yield {"base": base, "conns": conns}
        except BaseException:
            print("--- dashboard ---\n" + log.read_text(errors="replace"))
            raise
        finally:
            proc.terminate()
            proc.wait(30)
            for conn in conns.values():
                conn.close()


@pytest.fixture
def tab(served: dict[str, Any]) -> Iterator[Any]:
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.alerts = []
        page.errors = []

        def on_dialog(dialog: Any) -> None:
            if dialog.type == "confirm":
                dialog.accept()
            else:
                page.alerts.append(dialog.message)
                dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        page.set_default_timeout(15_000)
        yield page
        assert page.alerts == [] and page.errors == []


def _table(page: Any, css: str) -> set[tuple[str, str]]:
    """(database, queue) of each row of a table."""
    rows = page.locator(f"{css} tbody tr")
    found = set()
    for i in range(rows.count()):
        cells = rows.nth(i).locator("td")
        if cells.count() > 2 and "database" in (cells.nth(0).get_attribute("class") or ""):
            found.add((cells.nth(0).inner_text().strip(), cells.nth(1).inner_text().strip()))
    return found


def _paused(conn: psycopg.Connection[Any], queue: str) -> bool:
    return bool(scalar(conn, "SELECT paused FROM workhorse.queue_controls WHERE queue = %s",
                       queue))


def test_two_databases_in_one_dashboard(served, tab):
    base, conns = served["base"], served["conns"]
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    tab.goto(base + "/")
    assert tab.locator("table.queues thead th").first.inner_text() == "database"
    assert _table(tab, "table.queues") == {("default", "api"), ("default", "shared"),
                                           ("eu", "billing"), ("eu", "shared")}
    down = tab.locator('#databases-down li[data-database-down="far"]')
    assert "cannot be reached" in down.inner_text()
    tab.screenshot(path=str(ARTEFACTS / "databases-overview.png"), full_page=True)

    # The control filters to one database; the live refresh keeps the filter.
    tab.select_option("#database-filter select", "eu")
    tab.click("#database-filter button")
    tab.wait_for_url(re.compile(r"/\?database=eu$"))
    assert _table(tab, "table.queues") == {("eu", "billing"), ("eu", "shared")}
    tab.evaluate("() => document.getElementById('live').setAttribute('data-stamp', '1')")
    wait_for(lambda: tab.evaluate(
        "() => document.getElementById('live').getAttribute('data-stamp')") is None,
        LIVE * 5, "a live refresh")
    assert _table(tab, "table.queues") == {("eu", "billing"), ("eu", "shared")}

    # eu's `shared` on its own page; Pause there pauses it in eu only.
    tab.click('table.queues tr[data-database="eu"] a:text-is("shared")')
    tab.wait_for_url(re.compile(r"/queue\?name=shared&database=eu$"))
    assert "database eu" in tab.locator("h1").inner_text()
    tab.click("#pause")
    tab.wait_for_selector(".notice")
    assert "in database eu" in tab.locator(".notice").inner_text()
    assert _paused(conns["eu"], "shared") and not _paused(conns["default"], "shared")

    # The jobs page: both databases' jobs, with the column; picks cancel each in its own.
    tab.goto(base + "/jobs")
    assert tab.locator("table.jobs tbody tr").count() == 3 + 1 + 4 + 1
    tab.check('input.pick[value="eu:1"]')
    tab.check('input.pick[value="default:2"]')
    tab.click("#cancel-selected")
    tab.wait_for_selector(".notice")
    assert scalar(conns["eu"], "SELECT status FROM workhorse.jobs WHERE id = 1") == "canceled"
    assert scalar(conns["default"], "SELECT status FROM workhorse.jobs WHERE id = 1") == "ready"
    assert scalar(conns["default"], "SELECT status FROM workhorse.jobs WHERE id = 2") == (
        "canceled")
    assert scalar(conns["eu"], "SELECT status FROM workhorse.jobs WHERE id = 2") == "ready"
    tab.screenshot(path=str(ARTEFACTS / "databases-jobs.png"), full_page=True)

    # A job of eu on its page.
    tab.goto(base + "/jobs/1?database=eu")
    assert "eu.task" in tab.locator("h1").inner_text()

    # Phone width: no page is wider than the screen.
    tab.set_viewport_size({"width": 390, "height": 844})
    wide = {}
    for path in ("/", "/?database=eu", "/jobs", "/queue?name=billing", "/jobs/1?database=eu",
                 "/workers", "/budgets", "/schedules"):
        tab.goto(base + path)
        width = tab.evaluate("() => document.documentElement.scrollWidth")
        if width > 390:
            wide[path] = width
    assert wide == {}
