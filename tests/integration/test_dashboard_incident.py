"""The dashboard in an incident (docs/design.md "The dashboard in an incident"), without a browser:
stalled queues and why (health() and the pages, from one function), the limit that holds a
budget-blocked queue back, unknown queues refused (dashboard 404, `queues pause` without
--force), notices only from the server's own results, substring filters with counts and pages
both ways, bulk actions on everything matching, and actions offered only where they apply.

Each of these fails on the dashboard before issue #32 (checked by running this file against
main's workhorse/dashboard: no `stalled`, `?done=` shown, exact filters, no count, no newer link,
Retry on a succeeded job, a typo queue's pause answered 303 and creating the queue)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient
from test_cli import cli

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _incident, _ops
from workhorse.dashboard import _queries, create_app
from workhorse.types import WorkerInfo


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


def _csrf(client: TestClient, path: str = "/") -> str:
    found = re.search(r'<body data-csrf="([^"]+)"', client.get(path).text)
    assert found
    return found.group(1)


def _worker(conn: psycopg.Connection[Any], queues: list[str], *, seen: str = "0 s") -> None:
    conn.execute("INSERT INTO workhorse.workers (app, host, pid, slots, queues, last_seen)"
                 " VALUES ('shop', 'h', 1, 1, %s, now() - %s::interval)", (queues, seen))


def _status(conn: psycopg.Connection[Any], job_id: int) -> str:
    row = conn.execute("SELECT status FROM workhorse.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


# ---- stalled ----------------------------------------------------------------------------------


def _info(queues: list[str], alive: bool = True) -> WorkerInfo:
    now = datetime.now(UTC)
    return WorkerInfo(1, "shop", "h", 1, 1, queues, now, now - timedelta(minutes=3), {}, alive)


def test_the_reasons_of_a_stall():
    reasons = _incident.stall_reasons
    assert reasons("q", paused=False, limits=(None,), workers=[]) == [
        "no live supervisor: none is registered"]
    assert reasons("q", paused=False, limits=(None,), workers=[_info(["q"], alive=False)]) == [
        "no live supervisor: the last one was seen 3 min ago"]
    assert reasons("q", paused=False, limits=(None,), workers=[_info(["a", "b"])]) == [
        "no live supervisor serves it: none has it in --queues (a, b)"]
    assert reasons("q", paused=False, limits=(5, None), workers=[_info(["q"])]) == []
    assert reasons("q", paused=True, limits=(0,), workers=[_info(["q"])]) == [
        "paused: nothing starts until it is resumed", "a limit in force is 0: nothing can start"]


def test_health_says_which_queues_are_stalled_and_why(conn, queue):
    queue.enqueue("t", {}, EnqueueOptions(queue="mail"))
    queue.enqueue("t", {}, EnqueueOptions(queue="later", delay=3600))  # not due: not stalled
    due = queue.enqueue("t", {}, EnqueueOptions(queue="due", delay=3600))
    conn.execute("UPDATE workhorse.jobs SET run_at = now() - interval '1 s' WHERE id = %s",
                 (due,))
    assert queue.health().stalled == {"due": "no live supervisor: none is registered",
                                      "mail": "no live supervisor: none is registered"}
    _worker(conn, ["mail", "due"])
    assert queue.health().stalled == {}
    queue.pause("mail")
    assert queue.health().stalled == {"mail": "paused: nothing starts until it is resumed"}
    conn.execute("UPDATE workhorse.workers SET queues = ARRAY['other']")
    stalled = queue.health().stalled
    assert stalled["due"] == "no live supervisor serves it: none has it in --queues (other)"
    assert stalled["mail"].startswith("no live supervisor serves it") and "paused" in stalled[
        "mail"]
    conn.execute("UPDATE workhorse.workers SET last_seen = now() - interval '5 min'")
    assert queue.health().stalled["due"] == "no live supervisor: the last one was seen 5 min ago"


def test_a_stopped_fleet_is_a_banner_on_the_overview_and_the_queue_page(client, conn, queue):
    queue.sync_concurrency_policies("shop", [ConcurrencyPolicyDefinition("mail", max_active=2)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="mail")) for _ in range(52)])
    overview = client.get("/").text
    banner = re.search(r'<div class="stalled" role="alert" id="stalled">(.*?)</div>', overview,
                       re.S)
    assert banner and 'data-stalled="mail"' in banner.group(1)
    assert "no live supervisor: none is registered" in banner.group(1)
    row = re.search(r'<tr data-queue="mail".*?</tr>', overview, re.S)
    assert row and "stalled" in row.group(0) and "running" not in row.group(0)
    page = client.get("/queue?name=mail").text
    assert re.search(r'id="stalled"><strong>Stalled</strong>: no live supervisor', page)
    _worker(conn, ["mail"])
    assert 'id="stalled"' not in client.get("/").text


def test_the_reason_codes_are_badges_on_the_overview_and_the_queue_page(client, conn, queue):
    _worker(conn, ["mail"])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="mail")) for _ in range(3)])
    queue.pause("mail")
    badge = re.compile(r'<span class="badge reason" data-reason="paused"[^>]*>paused( 3)?</span>')
    assert badge.search(client.get("/").text)
    page = client.get("/queue?name=mail").text
    assert re.search(r'id="reasons">.*data-reason="paused" title="paused: nothing starts until '
                     r'it is resumed">paused 3</span>', page, re.S)
    queue.resume("mail")
    assert 'data-reason=' not in client.get("/").text
    assert 'id="reasons"' not in client.get("/queue?name=mail").text


def test_the_limit_that_holds_a_queue_back_and_when_it_starts_again(client, conn, queue):
    queue.sync_concurrency_policies("shop", [
        ConcurrencyPolicyDefinition("api", max_active=2),
        ConcurrencyPolicyDefinition("mail", max_active=None, rate_limit="3/h",
                                    rate_limit_per_key="1/h"),
    ])
    _worker(conn, ["api", "mail"])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="api")) for _ in range(5)])
    assert len(queue.claim("api", 5, 60)) == 2
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="mail", concurrency_key=f"k{i % 2}"))
                        for i in range(6)])
    while queue.claim("mail", 5, 60):
        pass
    api = client.get("/queue?name=api").text
    held = re.search(r'id="held-by">(.*?)</div>', api, re.S)
    assert held and "queue limit: 2 of 2 active" in held.group(1)
    mail = client.get("/queue?name=mail").text
    held = re.search(r'id="held-by">(.*?)</div>', mail, re.S)
    assert held is not None, mail
    assert re.search(r"key rate: 2 key\(s\) out of 1/h; the soonest may start in (60|61) min",
                     held.group(1)), held.group(1)
    assert re.search(r'id="rate-window">.*?<span class="n">2 / 3</span>', mail, re.S)
    overview = client.get("/").text
    assert "held by queue limit: 2 of 2 active" in overview


# ---- unknown queues -----------------------------------------------------------------------------


def test_a_typo_queue_is_a_404_and_its_actions_are_refused(client, conn, queue):
    queue.enqueue("t", {}, EnqueueOptions(queue="mail"))
    page = client.get("/queue?name=mial")
    assert page.status_code == 404
    assert "no queue &#39;mial&#39;" in page.text and "did you mean &#39;mail&#39;" in page.text
    assert 'id="pause"' not in page.text
    csrf = _csrf(client)
    for verb in ("pause", "resume", "override", "clear-override"):
        response = client.post(f"/queue/{verb}", data={"queue": "mial", "csrf": csrf,
                                                       "max_active": "1"},
                               follow_redirects=False)
        assert response.status_code == 404, verb
    assert conn.execute("SELECT count(*) FROM workhorse.queue_controls").fetchone() == (0,)
    assert client.get("/queue?name=mail").status_code == 200


def test_queues_pause_refuses_an_unknown_queue_unless_forced(database_url, conn, queue):
    queue.enqueue("t", {}, EnqueueOptions(queue="mail"))
    refused = cli(database_url, "queues", "pause", "mial")
    assert refused.exit_code == 1
    assert "no queue 'mial'" in refused.stderr and "--force" in refused.stderr
    assert conn.execute("SELECT count(*) FROM workhorse.queue_controls").fetchone() == (0,)
    assert cli(database_url, "queues", "pause", "mail").exit_code == 0
    forced = cli(database_url, "queues", "pause", "mial", "--force", "--json")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["paused"] is True


def test_a_queue_is_known_by_its_policy_control_schedule_worker_or_jobs(conn):
    def known(name: str) -> bool:
        return _ops.execute(conn, _incident.queue_known(name))

    assert not known("q")
    _worker(conn, ["served"])
    Queue(conn).sync_concurrency_policies("shop", [ConcurrencyPolicyDefinition("governed", 1)])
    conn.execute("INSERT INTO workhorse.jobs (task, queue, payload, status) VALUES"
                 " ('t', 'done', '{}', 'succeeded'), ('t', 'failed', '{}', 'failed')")
    assert all(known(q) for q in ("served", "governed", "done", "failed"))
    assert not known("q")


# ---- notices ------------------------------------------------------------------------------------


def test_a_notice_comes_from_the_server_never_from_the_url(client, conn, queue):
    job = queue.enqueue("t", {}, EnqueueOptions(queue="mail"))
    spoofed = client.get("/jobs?done=All+jobs+were+deleted+by+admin&error=boom").text
    assert "All jobs were deleted" not in spoofed and "boom" not in spoofed
    response = client.post("/jobs/cancel", data={"csrf": _csrf(client), "id": str(job),
                                                 "back": "/jobs"}, follow_redirects=False)
    assert response.headers["location"] == "/jobs"
    page = client.get("/jobs").text
    assert re.search(r'<p class="notice" role="status">canceled \(or asked to cancel\) 1 of 1',
                     page)
    assert 'class="notice"' not in client.get("/jobs").text  # shown once
    # A notice cookie that the server did not sign shows nothing.
    client.cookies.set("workhorse_notice", "W1wibm90aWNlXCIsIFwiaGlcIiwgOTk5OTk5OTk5OV0.x")
    assert 'class="notice"' not in client.get("/jobs").text


def test_an_action_that_changed_nothing_says_why(client, conn, queue):
    job = queue.enqueue("t", {}, EnqueueOptions(queue="mail"))
    (claimed,) = queue.claim("mail", 1, 60)
    queue.complete(claimed.id, claimed.fence, {"ok": True})
    csrf = _csrf(client)
    page = client.post("/jobs/retry", data={"csrf": csrf, "id": str(job),
                                            "back": f"/jobs/{job}"}).text
    problem = re.search(r'<p class="problem" role="alert">(.*?)</p>', page, re.S)
    assert problem and problem.group(1) == (
        "nothing changed: retried 0 of 1; not retried: 1 succeeded (retry applies to failed, "
        "held or canceled jobs)")
    page = client.post("/jobs/cancel", data={"csrf": csrf, "id": ["999999"], "back": "/jobs"})
    assert "1 no longer exist(s)" in page.text


def test_only_the_actions_that_apply_are_offered(client, conn, queue):
    ready = queue.enqueue("t", {}, EnqueueOptions(queue="mail"))
    done = queue.enqueue("t", {}, EnqueueOptions(queue="mail"))
    conn.execute("UPDATE workhorse.jobs SET status = 'succeeded', finished_at = now()"
                 " WHERE id = %s", (done,))
    page = client.get(f"/jobs/{ready}").text
    assert 'id="cancel"' in page and 'id="retry"' not in page
    assert f'data-confirm="Cancel job {ready} in queue &quot;mail&quot;?"' in page
    assert 'data-live="on"' in page
    finished = client.get(f"/jobs/{done}").text
    assert 'id="cancel"' not in finished and 'id="retry"' not in finished
    assert "No action applies to a succeeded job" in finished
    assert 'data-live="off"' in finished and "hx-get" not in finished  # no polling


def test_the_override_form_keeps_its_entries_after_a_refusal(client, conn, queue):
    queue.sync_concurrency_policies("shop", [ConcurrencyPolicyDefinition("api", max_active=3)])
    response = client.post("/queue/override", data={
        "csrf": _csrf(client), "queue": "api", "max_active": "2", "rate_limit": "fast",
        "for": "2h"})
    assert response.status_code == 400
    html = response.text
    assert 'id="override-problem">Nothing changed:' in html
    assert ('name="max_active" inputmode="numeric" size="6" placeholder="unchanged" value="2"'
            in html)
    assert 'name="rate_limit" size="8" placeholder="unchanged" value="fast"' in html
    assert 'name="for" size="8" placeholder="until cleared" value="2h"' in html
    assert "blank: until cleared" in html
    assert conn.execute("SELECT count(*) FROM workhorse.queue_controls").fetchone() == (0,)


# ---- find ---------------------------------------------------------------------------------------


@pytest.fixture
def history(conn) -> dict[str, list[int]]:
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status) SELECT"
        " CASE WHEN g % 2 = 0 THEN 'app.send_mail' ELSE 'app.resize' END,"
        " CASE WHEN g % 3 = 0 THEN 'Mail-EU' ELSE 'images' END, 'k' || (g % 4), '{}',"
        " CASE WHEN g % 10 = 0 THEN 'failed' WHEN g % 10 = 1 THEN 'ready' ELSE 'succeeded' END"
        " FROM generate_series(1, 250) g")
    rows = conn.execute("SELECT id, task, queue, status FROM workhorse.jobs ORDER BY id DESC"
                        ).fetchall()
    return {"mail": [r[0] for r in rows if r[1] == "app.send_mail"],
            "eu": [r[0] for r in rows if r[2] == "Mail-EU"],
            "eu_failed": [r[0] for r in rows if r[2] == "Mail-EU" and r[3] == "failed"],
            "all": [r[0] for r in rows]}


def _ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-job="(\d+)"', html)]


def test_filters_match_a_trimmed_case_insensitive_substring_with_a_count(client, history):
    page = client.get("/jobs?task=+send_MAIL+").text
    assert _ids(page) == history["mail"][:100]
    assert re.search(r'id="match-count"><strong>125</strong> jobs match', page)
    page = client.get("/jobs?queue=mail-eu&status=failed").text
    assert _ids(page) == history["eu_failed"]
    assert 'id="queue-matches">queue contains "mail-eu": Mail-EU' in page
    page = client.get("/jobs?queue=+eu").text
    assert _ids(page) == history["eu"][:100]
    assert f"<strong>{len(history['eu'])}</strong>" in page
    nothing = client.get("/jobs?queue=nope").text
    assert _ids(nothing) == [] and 'No known queue contains "nope"' in nothing
    assert '<option value="app.send_mail">' in page and '<option value="Mail-EU">' in page
    assert _ids(client.get("/jobs?key=k1").text) and _ids(client.get("/jobs?key=K1").text) == []


def test_the_substring_search_agrees_with_a_model_across_the_window(conn, history):
    """The window part (substring in SQL) and the older part (known names, IN-list) together
    find exactly what a substring search of every row finds, for statuses but succeeded."""
    rows = conn.execute("SELECT id, task, queue, status FROM workhorse.jobs ORDER BY id DESC"
                        ).fetchall()
    for queue_sub in (None, "mail", "IMAG", "x"):
        for task_sub in (None, "RESIZE", "send"):
            search = _queries.Search(queue=queue_sub, task=task_sub)
            found = _ops.execute(conn, _queries.find_jobs(search, limit=300, window=40))
            expected = [r[0] for r in rows
                        if (queue_sub is None or queue_sub.lower() in r[2].lower())
                        and (task_sub is None or task_sub.lower() in r[1].lower())
                        and (r[0] > rows[0][0] - 40 or r[3] != "succeeded")]
            assert [j.id for j in found.jobs] == expected, (queue_sub, task_sub)


def test_pages_link_newer_and_older(client, history):
    first = client.get("/jobs").text
    assert 'id="newer"' not in first
    older = re.search(r'<a href="([^"]+)" rel="next" id="older">', first)
    assert older
    second = client.get(older.group(1).replace("&amp;", "&")).text
    assert _ids(second) == history["all"][100:200]
    newer = re.search(r'<a href="([^"]+)" rel="prev" id="newer">', second)
    assert newer
    back = client.get(newer.group(1).replace("&amp;", "&")).text
    assert _ids(back) == history["all"][:100]
    third = client.get(f"/jobs?before={history['all'][199]}").text
    newer = re.search(r'<a href="([^"]+)" rel="prev" id="newer">', third)
    assert newer and _ids(client.get(newer.group(1).replace("&amp;", "&")).text) == history[
        "all"][100:200]


def test_bulk_actions_act_on_everything_matching_with_the_count_in_the_confirm(
        client, conn, history):
    page = client.get("/jobs?queue=eu").text
    failed = len(history["eu_failed"])
    assert f'data-confirm="Retry all {failed} failed, held or canceled jobs matching queue ~ ' \
           in page.replace("&#39;", "'")
    response = client.post("/jobs/retry", data={"csrf": _csrf(client), "match": "all",
                                                "queue": "eu", "back": "/jobs?queue=eu"})
    assert response.status_code == 200
    assert all(_status(conn, i) == "ready" for i in history["eu_failed"])
    assert f"retried {failed} of {failed}" in response.text
    others = conn.execute("SELECT count(*) FROM workhorse.jobs WHERE status = 'failed'"
                          ).fetchone()
    assert others is not None and others[0] > 0  # the other queue's failures are untouched


def test_a_queue_action_that_changes_nothing_says_why(client, conn, queue):
    queue.sync_concurrency_policies("shop", [ConcurrencyPolicyDefinition("api", max_active=3)])
    csrf = _csrf(client)
    for verb, why in (("resume", "it was not paused"), ("clear-override", "it had no override")):
        page = client.post(f"/queue/{verb}", data={"csrf": csrf, "queue": "api"}).text
        assert f"nothing changed: queue &#39;api&#39;: {why}" in page, verb
    client.post("/queue/pause", data={"csrf": csrf, "queue": "api"})
    page = client.post("/queue/pause", data={"csrf": csrf, "queue": "api"}).text
    assert "nothing changed: queue &#39;api&#39;: it was already paused" in page
    assert "paused: queue &#39;api&#39;" not in page
