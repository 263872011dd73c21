"""The dashboard in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) against
a real database, a running `workhorse worker` and a running `workhorse dashboard`: every page
opens, numbers refresh without a reload, and retry, cancel, pause and override change the
database. A screenshot of each page is saved under tmp/artefacts/dashboard/ (or
$WORKHORSE_ARTEFACTS/dashboard/); with WORKHORSE_DOCS_SCREENSHOTS=1 the overview and queue
shots are also copied into docs/images/ for docs/dashboard.md."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from ci_guard import skip_or_fail

from workhorse import Queue

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHROMIUM = Path("/usr/bin/chromium")
ARTEFACTS = Path(os.environ.get("WORKHORSE_ARTEFACTS", REPO / "tmp" / "artefacts")) / "dashboard"
T = TypeVar("T")

pytestmark = [pytest.mark.slow, pytest.mark.browser]

def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is missing (pip install -e '.[browser]')"
    return None


@pytest.fixture(scope="module", autouse=True)
def _browser_available() -> None:
    missing = _missing()
    if missing:
        skip_or_fail(missing)  # CI installs both: a skip there would hide a broken setup


def wait_for(check: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def scalar(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Process:
    """A `python -m workhorse ...` process; its output goes to a file shown on failure."""

    def __init__(self, database_url: str, log: Path, *args: str) -> None:
        env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
        env.pop("WORKHORSE_DASHBOARD_TOKEN", None)
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "workhorse", *args], cwd=HERE,
                                     env=env, stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self._out.close()


@pytest.fixture
def fleet(database_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Queues with saturated keys, failed jobs and a rate-limited key, a worker serving them,
    and the dashboard on a free loopback port."""
    import dashapp

    conn = psycopg.connect(database_url, autocommit=True)
    worker = Process(database_url, tmp_path / "worker.log", "worker", "dashapp:app", "--sync",
                     "--slots", "1", "--concurrency", "8", "--grace", "1s")
    port = _free_port()
    dashboard = Process(database_url, tmp_path / "dashboard.log", "dashboard", "--port",
                        str(port))
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.policies") == 2, 30,
                 "the worker's sync")
        with dashapp.app.using(conn):
            tenants = [dashapp.EVIL_KEY, "acme", "globex", "initech", "umbrella"]
            api = [h.id for h in dashapp.app.enqueue_many(
                [dashapp.call_api.call((tenant, n)) for n in range(3) for tenant in tenants])]
            failed = [h.id for h in dashapp.app.enqueue_many(
                [dashapp.explode.call((n,)) for n in range(3)])]
            dashapp.app.enqueue_many([dashapp.send_mail.call(("ops@example.com",))
                                      for _ in range(4)])
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = 'api' "
                                      "AND status = 'active'") == 3, 30, "3 active api jobs")
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = "
                                      "'flaky' AND status = 'failed'") == 3, 30, "3 failures")
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = 'mail' "
                                      "AND status = 'succeeded'") == 1, 30, "one mail sent")
        # The registry tick (every 5 s) has written the worker's counters into the history.
        wait_for(lambda: scalar(conn, "SELECT sum(claimed) FROM workhorse.throughput"), 20,
                 "throughput history")
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _responds(base), 30, "the dashboard to listen")
        yield {"conn": conn, "base": base, "api": api, "failed": failed, "worker": worker,
               "dashboard": dashboard}
    except BaseException:
        print("--- worker ---\n" + worker.output() + "\n--- dashboard ---\n" + dashboard.output())
        raise
    finally:
        worker.stop()
        dashboard.stop()
        conn.close()


def _responds(base: str) -> bool:
    import httpx

    try:
        return httpx.get(base + "/", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def launch_chromium() -> Iterator[Any]:
    """Debian's chromium under Playwright (its own download is not available here), closed
    afterwards: the browser of every test in this folder."""
    from playwright.sync_api import sync_playwright

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(fleet: dict[str, Any]) -> Iterator[Any]:
    with launch_chromium() as browser:
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.alerts = []  # any alert() would mean that markup from the database ran
        tab.errors = []

        def on_dialog(dialog: Any) -> None:
            if dialog.type == "confirm":
                dialog.accept()  # the dashboard asks before pause and cancel
            else:
                tab.alerts.append(dialog.message)
                dialog.dismiss()

        tab.on("dialog", on_dialog)
        tab.on("pageerror", lambda error: tab.errors.append(str(error)))
        tab.set_default_timeout(15_000)
        yield tab


def shot(page: Any, name: str) -> Path:
    path = ARTEFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_every_page_and_every_action_in_a_real_browser(fleet, page):
    conn, base = fleet["conn"], fleet["base"]

    # ---- overview: server-rendered, then live --------------------------------------------
    page.goto(base + "/")
    api_row = page.locator('tr[data-queue="api"]')
    assert "3 / 3" in api_row.inner_text()
    assert page.locator('tr[data-queue="mail"]').count() == 1
    assert page.locator('tr[data-queue="flaky"]').count() == 0  # not governed
    # A pause made elsewhere (the CLI, another operator) shows up without a reload.
    Queue(conn).pause("mail")
    page.locator('tr[data-queue="mail"] .badge.paused').wait_for()
    Queue(conn).resume("mail")
    page.locator('tr[data-queue="mail"] .badge.paused').wait_for(state="detached")
    assert page.locator(".chart figcaption").inner_text().count("/s") >= 3
    assert "no counts recorded yet" not in page.locator(".chart").inner_text()
    overview_shot = shot(page, "overview")

    # ---- queue: saturated keys, then pause, resume, override, clear -----------------------
    page.locator('tr[data-queue="api"] a').first.click()
    page.wait_for_url("**/queue?name=api")
    keys = page.locator("table.saturated td.key").all_inner_texts()
    assert dashapp_key() in keys and len(keys) == 3  # the markup key, shown as text
    queue_shot = shot(page, "queue")

    page.click("#pause")
    page.locator(".notice").wait_for()
    assert scalar(conn, "SELECT paused FROM workhorse.queue_controls WHERE queue = 'api'")
    page.click("#resume")
    page.locator("#pause").wait_for()
    assert scalar(conn, "SELECT count(*) FROM workhorse.queue_controls WHERE queue = 'api'") == 0
    page.fill('input[name="max_active"]', "2")
    page.fill('input[name="for"]', "1h")
    page.click("#override")
    page.locator("tr.override").wait_for()
    assert scalar(conn, "SELECT max_active FROM workhorse.queue_controls WHERE queue = 'api'") == 2
    assert "2" in page.locator("tr.inforce").inner_text()
    shot(page, "queue-override")
    page.click("#clear-override")
    page.locator("tr.override").wait_for(state="detached")
    assert scalar(conn, "SELECT count(*) FROM workhorse.queue_controls WHERE queue = 'api'") == 0

    # ---- jobs: filter the failures, retry one, cancel it -----------------------------------
    # Pause flaky first, so that a retried job stays ready (it would fail again at once).
    Queue(conn).pause("flaky")
    first, second, third = fleet["failed"]
    page.goto(base + "/jobs")
    page.select_option('select[name="status"]', "failed")
    page.fill('input[name="queue"]', "flaky")
    page.click('form.filters button[type="submit"]')
    page.wait_for_url("**/jobs?*status=failed*")
    assert page.locator("tr[data-job]").count() == 3
    assert "upstream said no" in page.locator(f'tr[data-job="{first}"] td.error').inner_text()
    shot(page, "jobs")
    page.check(f'tr[data-job="{first}"] input.pick')
    page.check(f'tr[data-job="{second}"] input.pick')
    page.click("#retry-selected")
    page.locator(".notice").wait_for()
    assert "retried 2 of 2" in page.locator(".notice").inner_text()
    statuses = {scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s", i)
                for i in (first, second)}
    assert statuses == {"ready"}
    assert page.locator("tr[data-job]").count() == 1  # the filter (failed) still applies

    page.goto(base + "/jobs?queue=flaky&status=ready")
    page.check(".pick-all")
    page.click("#cancel-selected")
    page.locator(".notice").wait_for()
    assert {scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s", i)
            for i in (first, second)} == {"canceled"}

    # ---- a job's detail: error and traceback as text, retry and cancel ---------------------
    page.goto(f"{base}/jobs/{third}")
    assert "ValueError" in page.locator(".problem").inner_text()
    traceback = page.locator("pre.traceback").inner_text()
    assert "<script>window.pwned = 2</script>" in traceback and "Traceback" in traceback
    shot(page, "job")
    page.click("#retry")
    page.locator(".notice").wait_for()
    assert scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s", third) == "ready"
    page.click("#cancel")
    page.locator(".notice").wait_for()
    assert scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s", third) == "canceled"
    # A ready api job, canceled from its page (held back by the budget: not yet started).
    waiting = next(i for i in fleet["api"] if scalar(
        conn, "SELECT status FROM workhorse.jobs WHERE id = %s", i) == "ready")
    page.goto(f"{base}/jobs/{waiting}")
    page.click("#cancel")
    page.locator(".notice").wait_for()
    assert scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s", waiting) == "canceled"

    # ---- workers and schedules -------------------------------------------------------------
    page.goto(base + "/workers")
    row = page.locator("tr[data-worker]")
    assert row.count() == 1
    assert str(fleet["worker"].proc.pid) in row.inner_text()
    assert "dashapp" in row.inner_text()
    shot(page, "workers")
    page.goto(base + "/schedules")
    schedule = page.locator("tr[data-schedule]")
    assert schedule.count() == 1, page.locator("main").inner_text()
    text = schedule.inner_text()
    assert "dashapp.nightly_report" in text or "nightly_report" in text, text
    assert "30 3 * * *" in text and "Europe/Oslo" in text and "nightly" in text, text
    assert "missed" not in text and "due now" not in text, text  # its next run is ahead
    shot(page, "schedules")

    assert page.alerts == [] and page.errors == []
    assert not page.evaluate("window.pwned")
    if os.environ.get("WORKHORSE_DOCS_SCREENSHOTS") == "1":
        images = REPO / "docs" / "images"
        images.mkdir(exist_ok=True)
        shutil.copy(overview_shot, images / "dashboard-overview.png")
        shutil.copy(queue_shot, images / "dashboard-queue.png")


def dashapp_key() -> str:
    import dashapp

    return dashapp.EVIL_KEY
