"""The dashboard's routes without a browser, against a real PostgreSQL: every page renders from
the database, values are escaped, actions need CSRF tokens and change the database, read-only
and token modes refuse what they must, and the CLI refuses an unsafe bind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient

from workhorse import App, ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _ops, _sql
from workhorse.dashboard import _data as data
from workhorse.dashboard import create_app, is_loopback
from workhorse.types import ThroughputMinute
from workhorse.worker._registry import Registry
from workhorse.worker.scheduler import Scheduler

EVIL = "<script>alert(1)</script>"
TOKEN = "s3cret-token-of-at-least-32-characters"


@pytest.fixture
def seeded(queue: Queue) -> dict[str, Any]:
    """A governed queue with a saturated key whose name is markup, a failed job whose error
    message is markup, an ungoverned queue and a rate-limited one."""
    queue.sync_concurrency_policies("shop", [
        ConcurrencyPolicyDefinition("api", max_active=4, max_active_per_key=1),
        ConcurrencyPolicyDefinition("mail", max_active=None, rate_limit="100/m",
                                    rate_limit_per_key="2/m"),
    ])
    ids = queue.enqueue_many(
        [("shop.call", {"args": [i], "kwargs": {}},
          EnqueueOptions(queue="api", concurrency_key=EVIL if i % 2 else "tenant-b"))
         for i in range(8)]
    )
    claimed = queue.claim("api", 2, 60)  # one per key: both keys are now saturated
    failing = next(j for j in claimed if j.concurrency_key == "tenant-b")
    queue.fail(failing.id, failing.fence,
               {"type": "ValueError", "message": EVIL, "traceback": f"Traceback...\n{EVIL}"},
               None)
    plain = queue.enqueue("misc.noop", {"args": [], "kwargs": {}}, EnqueueOptions(queue="misc"))
    return {"ids": ids, "failed": failing.id, "active": [j.id for j in claimed],
            "plain": plain}


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


def _csrf(client: TestClient, path: str = "/") -> str:
    """The CSRF token the pages give this client's session (signed by the server: not the
    value of any cookie)."""
    html = client.get(path).text
    found = re.search(r'<body data-csrf="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


def _control(conn: Any, queue: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT paused, max_active, override_expires_at FROM workhorse.queue_controls "
        "WHERE queue = %s", (queue,)).fetchone()


def _status(conn: Any, job_id: int) -> str:
    return conn.execute("SELECT status FROM workhorse.jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_every_page_renders_from_the_database(client, seeded):
    pages = ["/", "/?live=1", "/queue?name=api", "/queue?name=mail", "/queue?name=misc",
             "/jobs", "/jobs?status=failed", "/jobs?queue=api&key=tenant-b",
             f"/jobs?id={seeded['failed']}", f"/jobs/{seeded['failed']}", "/workers",
             "/schedules", "/schedules?live=1"]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        assert response.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in response.headers["content-security-policy"]
    assert client.get("/static/htmx.min.js").status_code == 200
    assert client.get("/static/dashboard.css").status_code == 200


def test_overview_is_server_rendered_with_every_governed_queue_and_its_limits(client, seeded):
    html = client.get("/").text
    rows = dict(re.findall(r'<tr data-queue="([^"]+)"[^>]*>(.*?)</tr>', html, re.S))
    assert 'data-queue="api" data-max-active="4" data-max-active-per-key="1"' in html
    assert 'data-rate-limit="100/m" data-rate-limit-per-key="2/m"' in html
    assert set(rows) == {"api", "mail"}
    assert "1 / 4" in rows["api"]           # active against max_active (one of two failed)
    assert "100/m" in rows["mail"] and "2/m per key" in rows["mail"]
    assert 'data-live="on"' in html and 'hx-trigger="refresh"' in html  # refreshed live
    assert 'data-live-seconds="2"' in html  # every 2 s unless the operator slows it
    assert "misc" in html                   # the ungoverned queue, in the depth table


def test_markup_in_keys_and_errors_renders_as_text(client, seeded):
    for path in ["/", "/queue?name=api", "/jobs", "/jobs?status=failed",
                 f"/jobs/{seeded['failed']}"]:
        html = client.get(path).text
        assert EVIL not in html, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get("/queue?name=api").text
    detail = client.get(f"/jobs/{seeded['failed']}").text
    assert detail.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 2  # message and traceback


def test_queue_page_lists_the_saturated_keys_by_backlog(client, seeded):
    html = client.get("/queue?name=api").text
    keys = re.findall(r'<td class="key"><a [^>]*>([^<]*)</a></td><td class="num">(\d+)</td>'
                      r'<td class="num">(\d+)\+?</td>', html)
    # EVIL keeps its active job; tenant-b's one failed, so only EVIL is at its limit.
    assert keys == [("&lt;script&gt;alert(1)&lt;/script&gt;", "1", "3")]
    running = re.findall(r'<tr data-job="(\d+)">', html)
    assert [int(i) for i in running] == [j for j in seeded["active"] if j != seeded["failed"]]


def test_actions_need_the_csrf_token(client, seeded, conn):
    for path, form in [("/queue/pause", {"queue": "api"}),
                       ("/jobs/retry", {"id": str(seeded["failed"])}),
                       ("/jobs/cancel", {"id": str(seeded["plain"])})]:
        for token in (None, "wrong"):
            sent = dict(form, **({"csrf": token} if token else {}))
            response = client.post(path, data=sent, follow_redirects=False)
            assert response.status_code == 403, (path, token)
    assert _control(conn, "api") is None
    assert _status(conn, seeded["failed"]) == "failed"
    assert _status(conn, seeded["plain"]) == "ready"


def test_pause_resume_override_and_clear_change_the_database(client, seeded, conn):
    csrf = _csrf(client)
    response = client.post("/queue/pause", data={"queue": "api", "csrf": csrf},
                           follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].startswith(
        "/queue?name=api")
    assert _control(conn, "api")[0] is True
    assert "paused" in client.get(response.headers["location"]).text
    client.post("/queue/resume", data={"queue": "api", "csrf": csrf})
    assert _control(conn, "api") is None
    client.post("/queue/override", data={"queue": "api", "csrf": csrf, "max_active": "1",
                                         "for": "1h"})
    paused, max_active, expires = _control(conn, "api")
    assert (paused, max_active) == (False, 1)
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)
    assert "override" in client.get("/queue?name=api").text
    client.post("/queue/clear-override", data={"queue": "api", "csrf": csrf})
    assert _control(conn, "api") is None


def test_a_bad_override_is_reported_and_writes_nothing(client, seeded, conn):
    csrf = _csrf(client)
    for form in ({"max_active": "lots"}, {"rate_limit": "fast"}, {}):
        response = client.post("/queue/override", data={"queue": "api", "csrf": csrf, **form})
        assert response.status_code == 400
        assert 'class="problem"' in response.text
    assert _control(conn, "api") is None


def test_retry_and_cancel_one_or_many(client, seeded, conn):
    csrf = _csrf(client)
    response = client.post("/jobs/retry", data={"csrf": csrf, "id": str(seeded["failed"]),
                                                "back": "/jobs?status=failed"},
                           follow_redirects=False)
    assert response.headers["location"] == "/jobs?status=failed"
    assert "retried 1 of 1" in client.get("/jobs?status=failed").text  # the server's notice
    assert _status(conn, seeded["failed"]) == "ready"
    ready = [i for i in seeded["ids"] if _status(conn, i) == "ready"][:3]
    client.post("/jobs/cancel", data={"csrf": csrf, "id": [str(i) for i in ready]})
    assert [_status(conn, i) for i in ready] == ["canceled"] * 3
    client.post("/jobs/retry", data={"csrf": csrf, "id": [str(i) for i in ready]})
    assert [_status(conn, i) for i in ready] == ["ready"] * 3
    # A redirect goes back to this site only.
    response = client.post("/jobs/retry", data={"csrf": csrf, "id": str(ready[0]),
                                                "back": "//evil.example/x"},
                           follow_redirects=False)
    assert response.headers["location"] == "/jobs"


def test_read_only_hides_and_refuses_every_action(database_url, seeded, conn):
    with TestClient(create_app(database_url, read_only=True)) as client:
        pages = {path: client.get(path).text for path in
                 ["/", "/queue?name=api", "/jobs", f"/jobs/{seeded['failed']}"]}
        for path, html in pages.items():
            assert 'method="post"' not in html, path
            assert "read-only" in html
        csrf = _csrf(client)
        for path, form in [("/queue/pause", {"queue": "api"}),
                           ("/queue/override", {"queue": "api", "max_active": "1"}),
                           ("/queue/clear-override", {"queue": "api"}),
                           ("/jobs/retry", {"id": str(seeded["failed"])}),
                           ("/jobs/cancel", {"id": str(seeded["plain"])})]:
            response = client.post(path, data={**form, "csrf": csrf})
            assert response.status_code == 403, path
    assert _control(conn, "api") is None
    assert _status(conn, seeded["failed"]) == "failed"
    assert _status(conn, seeded["plain"]) == "ready"


def test_a_token_is_required_by_cookie_or_bearer_header(database_url, seeded, conn):
    with TestClient(create_app(database_url, token=TOKEN)) as client:
        response = client.get("/queue?name=api", follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/login?next=")
        assert client.get("/?live=1", headers={"HX-Request": "true"}).status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.post("/queue/pause", data={"queue": "api"}).status_code == 401
        assert _control(conn, "api") is None
        assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        # An API client with the bearer header acts without a CSRF token (no cookie involved).
        response = client.post("/queue/pause", data={"queue": "api"},
                               headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200 and _control(conn, "api")[0] is True

        login = client.get("/login?next=/workers")
        assert login.status_code == 200 and TOKEN not in login.text
        csrf = _csrf(client, "/login?next=/workers")
        wrong = client.post("/login", data={"csrf": csrf, "token": "guess", "next": "/workers"})
        assert wrong.status_code == 401 and "workhorse_session" not in client.cookies
        right = client.post("/login", data={"csrf": csrf, "token": TOKEN, "next": "/workers"},
                            follow_redirects=False)
        assert right.status_code == 303 and right.headers["location"] == "/workers"
        assert TOKEN not in client.cookies.get("workhorse_session", "")
        assert client.get("/workers").status_code == 200
        client.post("/logout", data={"csrf": _csrf(client, "/workers")})
        assert client.get("/", follow_redirects=False).status_code == 303


def _schedule_cells(html: str) -> dict[str, dict[str, tuple[str, str]]]:
    """name -> {"next"/"last": (title, text), "next_class": ...} from the schedules table."""
    found = {}
    for name, row in re.findall(r'<tr data-schedule="([^"]+)">(.*?)</tr>', html, re.S):
        cells = {}
        for kind, extra, title, text in re.findall(
                r'<td class="(next|last)( missed)?" title="([^"]*)">(.*?)</td>', row, re.S):
            cells[kind] = (title, text.strip())
            cells[f"{kind}_class"] = (kind + extra, "")
        found[name] = cells
    return found


def test_schedules_page_shows_an_apps_schedules_with_their_next_and_last_runs(
        database_url, client, conn):
    """An app's @app.periodic schedules, synced and fired through the scheduler's real pass: the
    page gives each one's next occurrence (in the future, the stored instant in the tooltip),
    its latest firing once it has fired, and says when an occurrence was missed."""
    assert "No schedules." in client.get("/schedules").text
    app = App("clock", database_url)

    @app.periodic(every="30s", name="refresh", queue="refresh")
    def refresh() -> None: ...

    @app.periodic(cron="0 3 * * *", tz="Europe/Oslo", name="nightly")
    def nightly() -> None: ...

    app.schedule(refresh, cron="*/5 * * * *", name="five-minutely")
    try:
        app.sync()
        stored = {s.name: s for s in Queue(conn).list_schedules()}
        cells = _schedule_cells(client.get("/schedules").text)
        assert set(cells) == {"refresh", "nightly", "five-minutely"}
        for name, schedule in stored.items():
            title, text = cells[name]["next"]
            assert title == schedule.next_run_at.astimezone(UTC).strftime(
                "%Y-%m-%d %H:%M:%S UTC"), name
            assert text.startswith("in ") or text in ("now", "due now"), (name, text)
            assert cells[name]["last"] == ("", "never"), name
        assert "<code>every 30s</code>" in client.get("/schedules").text
        assert re.search(r"<code>0 3 \* \* \*</code> <small>Europe/Oslo</small>",
                         client.get("/schedules").text)
        assert stored["nightly"].next_run_at.astimezone(ZoneInfo("Europe/Oslo")).hour == 3

        # The refresh occurrence 30 s back is due: the pass fires it and moves on.
        conn.execute("UPDATE workhorse.schedules SET next_run_at = next_run_at - interval '30 s'"
                     " WHERE name = 'refresh'")
        due = Queue(conn).list_schedules("clock")
        fired_for = next(s.next_run_at for s in due if s.name == "refresh")
        assert [at for _, at, _ in Scheduler("clock").fire(conn).fired] == [fired_for]
        after = {s.name: s for s in Queue(conn).list_schedules()}
        assert after["refresh"].last_run_at == fired_for
        cells = _schedule_cells(client.get("/schedules").text)
        title, text = cells["refresh"]["last"]
        assert title == fired_for.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        assert text.endswith(" ago") or text == "now", text
        assert cells["refresh"]["next"][1].startswith("in ") or cells["refresh"]["next"][1] == "now"
        assert cells["nightly"]["last"] == ("", "never")

        # Every supervisor down for 10 minutes: that occurrence is missed, not "next".
        conn.execute("UPDATE workhorse.schedules SET next_run_at = now() - interval '10 min'"
                     " WHERE name = 'five-minutely'")
        cells = _schedule_cells(client.get("/schedules").text)
        assert cells["five-minutely"]["next"][1] == "missed: due 10m ago"
        assert cells["five-minutely"]["next_class"][0] == "next missed"
        assert "catch_up=latest" in cells["five-minutely"]["next"][0]
        assert cells["refresh"]["next_class"][0] == "next"
    finally:
        app.close()


# ---- the job list ---------------------------------------------------------------------------

STATUSES = ("scheduled", "ready", "active", "succeeded", "failed", "held", "canceled")


def _history(conn: Any, n: int = 400) -> list[tuple[int, str, str, str, str]]:
    """`n` jobs, mostly succeeded, with every other status scattered over the ids (old ones
    included), over two queues, five keys (and keyless) and three tasks; returns them as
    (id, queue, status, key, task)."""
    def status(i: int) -> str:
        for every, name in ((97, "active"), (71, "scheduled"), (61, "canceled"), (53, "held"),
                            (41, "ready"), (37, "failed")):
            if i % every == 0:
                return name
        return "succeeded"

    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status) VALUES"
            " (%s, %s, %s, '{}', %s)",
            [(f"t{i % 3}", "ab"[i % 2], "" if i % 7 == 0 else f"k{i % 5}", status(i))
             for i in range(1, n + 1)])
    return conn.execute("SELECT id, queue, status, ckey, task FROM workhorse.jobs"
                        " ORDER BY id DESC").fetchall()


def _expected(rows: list[Any], chosen: dict[str, Any], before: int | None, window: int,
              limit: int) -> tuple[list[int], int | None]:
    """What the job list promises (see JobPage), computed from every row."""
    def matches(row: Any) -> bool:
        return all(value is None or row[column] == value for column, value in (
            (1, chosen["queue"]), (2, chosen["status"]), (3, chosen["key"]),
            (4, chosen["task"])))

    ids = [row[0] for row in rows]
    hi = max(ids) + 1 if before is None else min(before, max(ids) + 1)
    lo = max(hi - window, min(ids))
    found = [row for row in rows if row[0] < hi and matches(row)]
    recent = [row[0] for row in found if row[0] >= lo]
    if len(recent) >= limit or lo <= min(ids):
        return recent[:limit], None
    older = [row[0] for row in found if row[0] < lo and row[2] != "succeeded"]
    return ((recent + older)[:limit],
            lo if chosen["status"] in (None, "succeeded") else None)


def test_the_job_list_reads_a_window_of_history_and_every_indexed_status_beyond_it(conn):
    """Under every combination of filters: the newest matches within the window of ids, then
    the older jobs of every status but succeeded, and the floor of the window when succeeded
    jobs below it were left unsearched; with a window over everything, what list_jobs says."""
    rows = _history(conn)
    conn.execute("ANALYZE workhorse.jobs")
    newest = rows[0][0]
    combinations = 0
    for queue in (None, "a", "b"):
        for status in (None, *STATUSES):
            for key in (None, "k1", "nope"):
                for task in (None, "t2"):
                    chosen = {"queue": queue, "status": status, "key": key, "task": task}
                    for before, window, limit in ((None, 60, 10), (newest - 100, 60, 10),
                                                  (None, 30, 100), (None, 10_000, 50)):
                        page = _ops.execute(conn, _ops.browse_jobs(
                            **chosen, before=before, window=window, limit=limit))
                        ids, unsearched = _expected(rows, chosen, before, window, limit)
                        assert ([j.id for j in page.jobs], page.unsearched_below) == (
                            ids, unsearched), (chosen, before, window, limit)
                    everything = _ops.execute(conn, _ops.list_jobs(**chosen, limit=50))
                    assert page.jobs == everything and page.unsearched_below is None
                    combinations += 1
    assert combinations == 3 * 8 * 3 * 2


def test_the_jobs_page_pages_and_offers_the_succeeded_jobs_it_did_not_search(
        conn, client, monkeypatch):
    rows = _history(conn, 300)
    monkeypatch.setattr(_ops, "BROWSE_WINDOW", 40)
    oldest_k1 = min(row[0] for row in rows if row[3] == "k1" and row[2] == "succeeded")
    html = client.get("/jobs?key=k1").text
    shown = [int(i) for i in re.findall(r'<tr data-job="(\d+)"', html)]
    assert shown and oldest_k1 not in shown
    link = re.search(r'<p class="quiet searched" id="unsearched">.*?<a href="([^"]+)">', html,
                     re.S)
    assert link is not None and 'id="older"' not in html  # not full: no next page
    # Following "search older succeeded jobs" window by window reaches the oldest one.
    seen = set(shown)
    target = link.group(1).replace("&amp;", "&")
    for _ in range(20):
        assert "status=succeeded" in target and "key=k1" in target
        page = client.get(target).text
        seen.update(int(i) for i in re.findall(r'<tr data-job="(\d+)"', page))
        more = re.search(r'id="unsearched">.*?<a href="([^"]+)">', page, re.S)
        if more is None:
            break
        target = more.group(1).replace("&amp;", "&")
    assert oldest_k1 in seen
    assert seen >= {row[0] for row in rows if row[3] == "k1" and row[2] == "succeeded"}
    # A full page links to the next one, which starts below its last job.
    monkeypatch.setattr(_ops, "BROWSE_WINDOW", 100_000)
    first = client.get("/jobs").text
    ids = [int(i) for i in re.findall(r'<tr data-job="(\d+)"', first)]
    assert len(ids) == data.JOBS_PAGE
    older = re.search(r'<a href="([^"]+)" rel="next" id="older">', first)
    assert older is not None and f"before={ids[-1]}" in older.group(1)
    second = client.get(older.group(1).replace("&amp;", "&")).text
    assert [int(i) for i in re.findall(r'<tr data-job="(\d+)"', second)] == [
        row[0] for row in rows][data.JOBS_PAGE:2 * data.JOBS_PAGE]
    assert client.get("/jobs?before=x").status_code == 400


def test_throughput_history_is_kept_per_minute_and_read_back(conn):
    _ops.execute(conn, _ops.record_throughput({"claimed": 5, "succeeded": 3, "failed": 1}))
    _ops.execute(conn, _ops.record_throughput({"claimed": 2, "succeeded": 2, "retried": 1}))
    old = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=2)
    conn.execute("INSERT INTO workhorse.throughput (minute, claimed) VALUES (%s, 9)", (old,))
    minutes = _ops.execute(conn, _ops.throughput(60))
    assert len(minutes) == 1
    (now,) = minutes
    assert (now.claimed, now.succeeded, now.failed, now.retried) == (7, 5, 1, 1)
    assert 1.0 <= now.seconds <= 60.0
    # The next write prunes what is older than a day.
    _ops.execute(conn, _ops.record_throughput({"claimed": 1}))
    assert conn.execute("SELECT count(*) FROM workhorse.throughput").fetchone()[0] == 1


def test_the_registry_adds_each_supervisor_s_deltas_once(conn):
    totals = {"claimed": 0, "succeeded": 0, "failed": 0}
    registry = Registry(app="a", host="h", pid=1, slots=1, queues=["q"],
                        stats=lambda: dict(totals))
    registry.connected(conn)
    totals.update(claimed=10, succeeded=8, failed=2)
    registry.tick(conn)
    registry.tick(conn)  # nothing new: nothing added
    totals.update(claimed=15, succeeded=12)
    registry.unregister(conn)  # a clean exit flushes what the last tick had not
    row = conn.execute("SELECT sum(claimed), sum(succeeded), sum(failed) "
                       "FROM workhorse.throughput").fetchone()
    assert tuple(int(v) for v in row) == (15, 12, 2)


def test_the_chart_turns_minutes_into_rates():
    now = datetime(2026, 1, 1, 12, 30, 20, tzinfo=UTC)
    minutes = [
        ThroughputMinute(datetime(2026, 1, 1, 12, 29, tzinfo=UTC), 120, 60, 6, 0, 0, 0),
        ThroughputMinute(datetime(2026, 1, 1, 12, 30, tzinfo=UTC), 40, 20, 0, 0, 0, 0,
                         seconds=20.0),
    ]
    chart = data.chart(minutes, now)
    claims, completions, failures = chart.series
    assert chart.peak == 2.0 and not chart.empty
    # The latest minute's rates, zero included (never an older minute's).
    assert (claims.latest, completions.latest, failures.latest) == (2.0, 1.0, 0.0)
    # The window fits the data (2 minutes, shown over the smallest span), and the y axis
    # tops at a round number at or above the peak.
    assert chart.span == data.CHART_MIN_SPAN and len(claims.points.split()) == chart.span
    assert chart.top == 2.0 and chart.y_ticks == ["2", "1", "0"]
    assert claims.points.split()[-1] == f"{data.CHART_WIDTH:.1f},0.0"  # the top: the peak


def test_loopback_addresses():
    assert all(is_loopback(h) for h in ["127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"])
    assert not any(is_loopback(h) for h in ["0.0.0.0", "::", "192.168.1.4", "example.com"])


@pytest.mark.slow  # its own processes; the server version does not matter: pass 1 only
@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_cli_refuses_a_non_loopback_bind_without_a_token(database_url, host):
    env = {k: v for k, v in os.environ.items() if k != "WORKHORSE_DASHBOARD_TOKEN"}
    # A process with a timeout: without the refusal it would serve (and never return).
    done = subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "dashboard",
         "--host", host, "--port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "WORKHORSE_DASHBOARD_TOKEN" in lines[0], done.stderr
    assert done.stdout == ""


@pytest.mark.slow  # its own processes; the server version does not matter: pass 1 only
def test_cli_names_the_extra_when_it_is_missing(database_url):
    code = ("import sys; sys.modules['starlette'] = None\n"
            "from workhorse.cli import main\n"
            "main(['--database-url', sys.argv[1], 'dashboard'])")
    done = subprocess.run([sys.executable, "-c", code, database_url], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'workhorse[dashboard]'" in lines[0], done.stderr


@pytest.mark.slow  # its own processes; the server version does not matter: pass 1 only
def test_cli_serves_on_loopback_and_stops_on_sigterm(database_url, tmp_path):
    import httpx

    port = _free_port()
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url}
    env.pop("WORKHORSE_DASHBOARD_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "workhorse", "dashboard", "--port", str(port),
                             "--read-only"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert response.status_code == 200 and "read-only" in response.text
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert f"on http://127.0.0.1:{port}" in output


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_overview_and_queue_reads_never_scan_the_job_history(database_url):
    """With a big finished history, no statement behind the overview or a queue page may read
    `jobs` sequentially (they go through the partial indexes of live jobs)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        q = Queue(conn)
        q.sync_concurrency_policies("plans", [
            ConcurrencyPolicyDefinition("api", max_active=5, max_active_per_key=1)])
        conn.execute("INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, "
                     "finished_at) SELECT 't', 'api', 'k' || (g % 100), '{}', 'succeeded', "
                     "now() FROM generate_series(1, 60000) g")
        q.enqueue_many([("t", {}, EnqueueOptions(queue="api", concurrency_key=f"k{i % 50}"))
                        for i in range(500)])
        q.claim("api", 5, 60)
        conn.execute("ANALYZE workhorse.jobs")
        notices: list[str] = []
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_level = 'notice'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        data.overview(conn)
        data.queue_page(conn, "api")
        conn.execute("SET auto_explain.log_min_duration = -1")
    plans = [text for text in notices if "Query Text" in text]
    assert len(plans) >= 7
    # depth.sql counts succeeded jobs exactly only while the table has < 100k rows (by design:
    # an estimate beyond), so its plan holds a scan that big tables never run.
    depth = str(_sql.statement("depth").as_string())[:60]
    plans = [text for text in plans if depth not in text]
    scans = [text for text in plans if re.search(r"Seq Scan on jobs", text)]
    assert scans == [], scans[0][:3000] if scans else ""


def test_the_chart_survives_a_dashboard_restart(database_url, conn):
    with TestClient(create_app(database_url)) as first:
        assert "no counts recorded yet" in first.get("/").text
    # A supervisor's tick writes the history; the dashboard keeps nothing of its own.
    _ops.execute(conn, _ops.record_throughput({"claimed": 600, "succeeded": 540, "failed": 60}))
    for _ in range(2):  # two dashboard processes' lifetimes: the same history
        with TestClient(create_app(database_url)) as client:
            caption = re.search(r"<figcaption>(.*?)</figcaption>", client.get("/").text, re.S)
            assert caption is not None and "no counts recorded yet" not in caption.group(1)
            assert "claims 0.00/s" not in caption.group(1)


def test_without_a_token_it_answers_loopback_host_names_only(database_url):
    with TestClient(create_app(database_url, local_only=True),
                    base_url="http://127.0.0.1:8642") as client:
        assert client.get("/").status_code == 200
        for host in ("localhost:8642", "[::1]:8642", "127.0.0.1"):
            assert client.get("/", headers={"host": host}).status_code == 200, host
        # DNS rebinding: another site's name pointed at 127.0.0.1.
        for host in ("evil.example", "evil.example:8642", "10.0.0.1:8642"):
            assert client.get("/", headers={"host": host}).status_code == 421, host
            assert client.post("/queue/pause", data={"queue": "q"},
                               headers={"host": host}).status_code == 421


def test_a_bearer_header_skips_csrf_only_when_it_is_the_token(client, seeded, conn):
    response = client.post("/queue/pause", data={"queue": "api"},
                           headers={"Authorization": "Bearer anything"})
    assert response.status_code == 403 and _control(conn, "api") is None
