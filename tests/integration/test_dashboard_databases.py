"""The dashboard of several databases (docs/design.md "Several databases"), without a browser,
against real PostgreSQL databases: `default` (the test's database) and `eu` (a second fresh copy
of the template on the same server). One table lists both databases' queues with a database
column; `database=NAME` filters every list and addresses a job, a queue or an action in one
database; a database that cannot be reached is said so while the other's rows show; read-only
refuses actions in both; and `workhorse dashboard` serves every database WORKHORSE_DATABASES
names (`--database` one).

The URL scheme: every page and action takes a `database` query parameter or form field. A list
page without it shows every database; a job (or workflow) without it is `default`'s, as
`app.get_job(id)` reads it; a queue without it is the one database's that knows it (a 409 with
links when several do). With one database nothing changes: no column, no parameter needed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient
from test_cli_backoffs import back_off
from test_dashboard import TOKEN, _csrf, _free_port

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue
from workhorse.dashboard import _sources, create_app
from workhorse.worker._registry import Registry

EVIL = "<script>alert('db')</script>"
# Nothing listens on port 1 of the loopback address: a database that cannot be reached.
NOWHERE = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"


@pytest.fixture
def eu(eu_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(eu_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def seeded(queue: Queue, eu: psycopg.Connection[Any]) -> dict[str, Any]:
    """`default`: governed queue `api` (a failed job among ready ones) and `shared`; `eu`:
    governed queue `billing` (a markup key), `shared` too, and one more job than `default`
    (an id only `eu` has). Job ids start at 1 in each database: id 1 is in both."""
    queue.sync_concurrency_policies("shop", [
        ConcurrencyPolicyDefinition("api", max_active=4)])
    default_ids = queue.enqueue_many([("shop.call", {"n": i}, EnqueueOptions(queue="api"))
                                      for i in range(3)])
    default_ids.append(queue.enqueue("shop.shared", {}, EnqueueOptions(queue="shared")))
    claimed = queue.claim("api", 1, 60)
    queue.fail(claimed[0].id, claimed[0].fence, {"type": "ValueError", "message": "boom"},
               None)
    other = Queue(eu)
    other.sync_concurrency_policies("ledger", [
        ConcurrencyPolicyDefinition("billing", max_active=7, max_active_per_key=1)])
    eu_ids = other.enqueue_many([("ledger.invoice", {"n": i},
                                  EnqueueOptions(queue="billing", concurrency_key=EVIL))
                                 for i in range(4)])
    eu_ids.append(other.enqueue("ledger.shared", {}, EnqueueOptions(queue="shared")))
    return {"default": default_ids, "eu": eu_ids, "failed": claimed[0].id}


@pytest.fixture
def client(database_url: str, eu_url: str) -> Iterator[TestClient]:
    with TestClient(create_app({"default": database_url, "eu": eu_url})) as test_client:
        yield test_client


def _rows(html: str, table: str) -> list[tuple[str, str]]:
    """(database, queue) of each row of `<table class="{table}">`, in order."""
    body = re.search(rf'<table class="{table}">(.*?)</table>', html, re.S)
    assert body, html[:3000]
    found = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body.group(1), re.S):
        cells = re.findall(r'<td class="database">([^<]*)</td>\s*<td><a href="([^"]+)">([^<]*)'
                           r"</a>", row)
        if cells:
            found.append((cells[0][0], cells[0][2]))
    return found


def _paused(conn: psycopg.Connection[Any], queue: str) -> bool:
    row = conn.execute("SELECT paused FROM workhorse.queue_controls WHERE queue = %s",
                       (queue,)).fetchone()
    return bool(row and row[0])


def _status(conn: psycopg.Connection[Any], job_id: int) -> str:
    row = conn.execute("SELECT status FROM workhorse.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_the_overview_lists_both_databases_queues_in_one_table_with_the_column(client, seeded):
    html = client.get("/").text
    # One table of queues, a database column, each database's queues in it.
    assert html.count('<table class="queues">') == 1
    assert "<th>database</th><th>queue</th>" in html
    assert set(_rows(html, "queues")) == {("default", "api"), ("default", "shared"),
                                          ("eu", "billing"), ("eu", "shared")}
    # The governed queues too: each row says its database, its link addresses it.
    assert set(_rows(html, "governed")) == {("default", "api"), ("eu", "billing")}
    assert re.search(r'<tr data-queue="billing" data-max-active="7"[^>]* data-database="eu">',
                     html)
    assert 'href="/queue?name=billing&amp;database=eu"' in html
    assert 'href="/jobs?queue=api&amp;status=failed&amp;database=default"' in html
    # Depths add up over both databases; the chart says it is every database's.
    cards = dict((label, int(n)) for n, label in re.findall(
        r'<span class="n">(\d+)</span><span class="label">([a-z ]+)</span>', html))
    assert cards["ready"] == 2 + 1 + 4 + 1 and cards["failed"] == 1
    assert "fleet-wide, every database" in html
    # Incident: stalled queues per database (no worker runs).
    stalled = re.findall(r'<li data-stalled="([^"]+)" data-database="([^"]+)">', html)
    assert {("billing", "eu"), ("shared", "eu"), ("api", "default"),
            ("shared", "default")} <= set(stalled)
    # The key is markup in eu: escaped wherever it shows.
    assert EVIL not in client.get("/queue?name=billing&database=eu").text


def test_the_database_filter_limits_every_list_to_one_database(client, seeded):
    html = client.get("/?database=eu").text
    assert set(_rows(html, "queues")) == {("eu", "billing"), ("eu", "shared")}
    # The control in the page, outside the live region; the live region keeps the filter.
    assert re.search(r'<form method="get" action="/" class="filters database-filter" '
                     r'id="database-filter">', html)
    assert '<option value="eu" selected>eu</option>' in html
    assert 'hx-get="/?database=eu&amp;live=1"' in html
    live = client.get("/?database=eu&live=1").text
    assert set(_rows(live, "queues")) == {("eu", "billing"), ("eu", "shared")}

    jobs = client.get("/jobs?database=eu").text
    listed = re.findall(r'<tr data-job="(\d+)" class="[^"]*" data-database="([^"]+)">', jobs)
    assert sorted(listed) == sorted((str(i), "eu") for i in seeded["eu"])
    assert '<option value="eu" selected>eu</option>' in jobs
    # ... and every link and hidden field of the page keeps it.
    assert 'name="database" value="eu"' in jobs  # the "all matching" form
    assert "&amp;database=eu" in jobs or "database=eu" in jobs

    every = client.get("/jobs").text
    listed = re.findall(r'<tr data-job="(\d+)" class="[^"]*" data-database="([^"]+)">', every)
    assert sorted(listed) == sorted([(str(i), "default") for i in seeded["default"]]
                                    + [(str(i), "eu") for i in seeded["eu"]])
    assert 'value="eu:1"' in every and 'value="default:1"' in every
    assert re.search(r"<strong>9</strong> jobs match", every)
    assert re.search(r'by database: <span data-database="default">default 4</span>, '
                     r'<span data-database="eu">eu 5</span>', every)
    # An action on every match needs one database: offered only once one is chosen.
    assert 'id="retry-all"' not in every and 'id="all-needs-database"' in every
    # Unknown database: refused, its name escaped.
    for path in ("/?database=" + EVIL, "/jobs?database=nope", "/workers?database=nope",
                 "/budgets?database=x", "/schedules?database=x", "/jobs/1?database=nope"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert EVIL not in response.text and "the databases: default, eu" in response.text
    assert client.get("/jobs?before=3").status_code == 400  # an id of which database?
    assert client.get("/jobs?before=3&database=eu").status_code == 200


def test_a_job_page_in_the_second_database(client, seeded):
    eu_page = client.get("/jobs/1?database=eu")
    assert eu_page.status_code == 200
    assert "ledger.invoice" in eu_page.text and "shop.call" not in eu_page.text
    assert 'id="page-database"' in eu_page.text
    # Its live region, its actions and its links stay in eu.
    assert 'hx-get="/jobs/1?database=eu&amp;live=1"' in eu_page.text
    assert '<input type="hidden" name="database" value="eu">' in eu_page.text
    assert 'href="/queue?name=billing&amp;database=eu"' in eu_page.text
    live = client.get("/jobs/1?database=eu&live=1")
    assert live.status_code == 200 and 'href="/queue?name=billing&amp;database=eu"' in live.text
    # Without the parameter, a job id is default's (as app.get_job reads it).
    assert "shop.call" in client.get("/jobs/1").text
    # An id only eu has: default's 404 says that eu has one, with the link.
    only_eu = seeded["eu"][-1]
    missing = client.get(f"/jobs/{only_eu}")
    assert missing.status_code == 404
    assert f"no job {only_eu} in database default" in missing.text
    assert f'href="/jobs/{only_eu}?database=eu"' in missing.text
    assert client.get(f"/jobs/{only_eu}?database=eu").status_code == 200
    # A queue page: the database that knows it, else which one?
    assert "billing" in client.get("/queue?name=billing").text
    ambiguous = client.get("/queue?name=shared")
    assert ambiguous.status_code == 409
    assert 'href="/queue?name=shared&amp;database=eu"' in ambiguous.text
    assert client.get("/queue?name=shared&database=eu").status_code == 200
    nowhere = client.get("/queue?name=billing&database=default")
    assert nowhere.status_code == 404 and "database eu has it" in nowhere.text


def test_an_action_on_the_second_database_changes_only_it(client, seeded, conn, eu):
    csrf = _csrf(client)
    # Pause `shared` in eu: default's `shared` runs on.
    response = client.post("/queue/pause", data={"csrf": csrf, "queue": "shared",
                                                   "database": "eu"}, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/queue?name=shared&database=eu"
    assert _paused(eu, "shared") and not _paused(conn, "shared")
    page = client.get(response.headers["location"]).text
    assert "paused: queue &#39;shared&#39; in database eu" in page
    # Without a database, a queue both databases know is refused, nothing paused.
    refused = client.post("/queue/pause", data={"csrf": csrf, "queue": "shared"})
    assert refused.status_code == 409 and not _paused(conn, "shared")
    # A bad override is refused on eu's queue page, the entries kept, nothing written.
    bad = client.post("/queue/override", data={"csrf": csrf, "queue": "billing",
                                                "database": "eu", "max_active": "many"})
    assert bad.status_code == 400 and 'id="page-database"' in bad.text
    assert '<input type="hidden" name="database" value="eu">' in bad.text
    assert 'value="many"' in bad.text
    # Override a queue only eu has, found there without the parameter.
    client.post("/queue/override", data={"csrf": csrf, "queue": "billing",
                                          "max_active": "2"})
    assert eu.execute("SELECT max_active FROM workhorse.queue_controls WHERE queue = "
                      "'billing'").fetchone() == (2,)
    assert conn.execute("SELECT count(*) FROM workhorse.queue_controls WHERE queue = "
                        "'billing'").fetchone() == (0,)

    # Cancel job 2 of eu (default has a ready job 2 too): only eu's is canceled.
    response = client.post("/jobs/cancel", data={"csrf": csrf, "id": "2", "database": "eu",
                                                  "back": "/jobs/2?database=eu"},
                           follow_redirects=False)
    assert response.headers["location"] == "/jobs/2?database=eu"
    assert _status(eu, 2) == "canceled" and _status(conn, 2) == "ready"
    notice = client.get("/jobs/2?database=eu").text
    assert "canceled (or asked to cancel) 1 of 1 in database eu" in notice
    # The jobs page's picks say their database: one POST acts in each.
    client.post("/jobs/cancel", data={"csrf": csrf, "id": ["eu:3", "default:3"]})
    assert _status(eu, 3) == "canceled" and _status(conn, 3) == "canceled"
    assert _status(eu, 4) == "ready" and _status(conn, 4) == "ready"
    # Retry every match in one database: the other's failed job is left alone.
    eu_claimed = Queue(eu).claim("billing", 1, 60)[0]
    Queue(eu).fail(eu_claimed.id, eu_claimed.fence, {"type": "E", "message": "x"}, None)
    client.post("/jobs/retry", data={"csrf": csrf, "match": "all", "status": "failed",
                                      "database": "eu"})
    assert _status(eu, eu_claimed.id) == "ready"
    assert _status(conn, seeded["failed"]) == "failed"
    all_without = client.post("/jobs/retry", data={"csrf": csrf, "match": "all",
                                                    "status": "failed"})
    assert all_without.status_code == 400
    assert _status(conn, seeded["failed"]) == "failed"
    # An action still needs the CSRF token, in any database.
    assert client.post("/queue/resume", data={"queue": "shared", "database": "eu"}
                       ).status_code == 403
    assert _paused(eu, "shared")


def test_a_backoff_and_a_worker_show_their_database(client, seeded, conn, eu):
    held = back_off(Queue(eu), "billing", "queue")
    registry = Registry(app="ledger", host="eu-host", pid=7, slots=2, queues=["billing"],
                        stats=dict)
    registry.connected(eu)
    try:
        html = client.get("/").text
        assert re.search(r'<li data-backoff="queue" data-queue="billing" '
                         r'data-database="eu">', html)
        assert f'href="/jobs/{held.by_job}?database=eu"' in html
        workers = client.get("/workers").text
        assert re.search(r'<tr data-worker="\d+" class="alive" data-database="eu">\s*'
                         r'<td class="database">eu</td>', workers)
        assert "eu-host" not in client.get("/workers?database=default").text
        csrf = _csrf(client)
        client.post("/queue/clear-backoff", data={"csrf": csrf, "queue": "billing",
                                                   "database": "eu"})
        assert Queue(eu).backoffs() == []
    finally:
        registry.unregister(eu)


def test_an_unreachable_database_is_shown_as_such_while_the_other_shows(database_url, seeded,
                                                                          conn):
    with TestClient(create_app({"default": database_url, "far": NOWHERE})) as client:
        for path in ("/", "/jobs", "/workers", "/budgets", "/schedules", "/?live=1"):
            response = client.get(path)
            assert response.status_code == 200, path
            banner = re.search(r'<li data-database-down="far">(.*?)</li>', response.text, re.S)
            assert banner and "cannot be reached" in banner.group(1), path
        html = client.get("/").text
        assert set(_rows(html, "queues")) == {("default", "api"), ("default", "shared")}
        jobs = client.get("/jobs").text
        assert len(re.findall(r'<tr data-job="\d+" class="[^"]*" data-database="default">',
                              jobs)) == len(seeded["default"])
        after_banner = jobs.split('id="databases-down"')[1].split("</div>", 1)[1]
        assert 'data-database="far"' not in after_banner  # no row of it, of course
        # A page or an action of that database: 503 naming it; nothing else changes.
        page = client.get("/jobs/1?database=far")
        assert page.status_code == 503 and "database &#39;far&#39; cannot be reached" in page.text
        csrf = _csrf(client)
        response = client.post("/queue/pause", data={"csrf": csrf, "queue": "api",
                                                      "database": "far"})
        assert response.status_code == 503 and not _paused(conn, "api")
        # Default's actions go on.
        client.post("/queue/pause", data={"csrf": csrf, "queue": "api", "database": "default"})
        assert _paused(conn, "api")


def test_a_database_lost_while_serving_is_shown_so_and_again_once_it_answers(
        database_url, eu_url, seeded, eu, monkeypatch):
    monkeypatch.setattr(_sources, "RETRY_SECONDS", 0.0)
    name = conninfo_to_dict(eu_url)["dbname"]
    with TestClient(create_app({"default": database_url, "eu": eu_url})) as client:
        assert ("eu", "billing") in _rows(client.get("/").text, "queues")
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
            try:
                html = client.get("/").text
                assert re.search(r'<li data-database-down="eu">', html)
                assert set(_rows(html, "queues")) == {("default", "api"),
                                                      ("default", "shared")}
            finally:
                admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        deadline = time.monotonic() + 10
        while 'data-database-down="eu"' in (html := client.get("/").text):
            assert time.monotonic() < deadline, "eu never came back"
            time.sleep(0.1)
        assert ("eu", "billing") in _rows(html, "queues")


def test_read_only_refuses_actions_for_both_databases(database_url, eu_url, seeded, conn, eu):
    databases = {"default": database_url, "eu": eu_url}
    with TestClient(create_app(databases, read_only=True)) as client:
        for path in ("/", "/jobs", "/jobs/1?database=eu", "/jobs/1", "/queue?name=billing",
                     "/queue?name=api", "/budgets"):
            html = client.get(path).text
            assert 'method="post"' not in html, path
            assert "read-only" in html
        csrf = _csrf(client)
        for db in ("default", "eu"):
            for path, form in [("/queue/pause", {"queue": "shared"}),
                               ("/queue/override", {"queue": "shared", "max_active": "1"}),
                               ("/jobs/cancel", {"id": "2"}),
                               ("/jobs/cancel", {"id": f"{db}:3"}),
                               ("/jobs/retry", {"match": "all", "status": "failed"}),
                               ("/budgets/clear-backoff", {"budget": "b"})]:
                response = client.post(path, data={**form, "csrf": csrf, "database": db})
                assert response.status_code == 403, (db, path)
    for c in (conn, eu):
        assert not _paused(c, "shared")
        assert _status(c, 2) == "ready" and _status(c, 3) == "ready"
    assert _status(conn, seeded["failed"]) == "failed"


def test_a_token_guards_every_database(database_url, eu_url, seeded, eu):
    with TestClient(create_app({"default": database_url, "eu": eu_url}, token=TOKEN,
                               redact=True)) as client:
        assert client.get("/jobs/1?database=eu", follow_redirects=False).status_code == 303
        assert client.post("/queue/pause", data={"queue": "shared", "database": "eu"}
                           ).status_code == 401
        assert not _paused(eu, "shared")
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/jobs/1?database=eu", headers=bearer).status_code == 200
        client.post("/queue/pause", data={"queue": "shared", "database": "eu"}, headers=bearer)
        assert _paused(eu, "shared")
        # --redact: eu's payload stays hidden, and is shown to the token, from eu.
        page = client.get("/jobs/1?database=eu", headers=bearer).text
        assert 'id="payload-hidden"' in page
        assert '<input type="hidden" name="database" value="eu">' in page  # the reveal form
        shown = client.post("/jobs/1/reveal", data={"database": "eu"}, headers=bearer).text
        assert re.search(r'<pre class="json" id="payload">\{\s*&#34;n&#34;: 0\s*\}</pre>',
                         shown)
        assert "ledger.invoice" in shown and 'id="revealed"' in shown


@pytest.mark.slow  # its own processes
def test_cli_serves_every_database_and_one_with_database(database_url, eu_url, seeded):
    import httpx

    env = {**os.environ, "WORKHORSE_DATABASES": f"default={database_url},eu={eu_url},"
                                                f"far={NOWHERE}"}
    for name in ("WORKHORSE_DASHBOARD_TOKEN", "WORKHORSE_DATABASE_URL"):
        env.pop(name, None)
    for extra, expect in (([], {"default", "eu"}), (["--database", "eu"], None)):
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "workhorse", "dashboard", "--port",
                                 str(port), *extra], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    response = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
                    break
                except httpx.TransportError:
                    assert proc.poll() is None and time.monotonic() < deadline
                    time.sleep(0.1)
            assert response.status_code == 200
            if expect is None:  # one database: the page of one database, no column
                assert "<th>database</th>" not in response.text
                assert "billing" in response.text and ">api<" not in response.text
            else:
                assert {db for db, _ in _rows(response.text, "queues")} == expect
                assert 'data-database-down="far"' in response.text
        finally:
            proc.terminate()
            output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output
        if expect is None:
            assert "database eu:" in output and "far" not in output
        else:
            assert "warning: database far" in output and "databases default (" in output
    refused = subprocess.run([sys.executable, "-m", "workhorse", "dashboard", "--database",
                              "nope"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "the databases: default, eu, far" in refused.stderr
