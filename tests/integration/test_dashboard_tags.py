"""Tags on the dashboard (issue #43, docs/design.md "Tags") against a real PostgreSQL: the Jobs
page's `tag=` filter lists exactly the tag's jobs, newest first, with the other filters; every
job's tags show on the list and on its own page, each a link to that tag's list; a tag no job
can have is the page's 400, not a 500; markup in a tag renders as text; "retry all" and "cancel
all" on a tag's list act on the tag's jobs only.

Each checker is shown to fail on a broken variant in the test itself: a list that ignores the
tag, a page that ignores a bad tag, templates without autoescape, and a bulk action that ignores
the tag."""

from __future__ import annotations

import dataclasses
import html as htmllib
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient

from workhorse import EnqueueOptions, Queue
from workhorse.dashboard import _data, _queries, _web, create_app

EVIL = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
QUOTED = 'q"uote&amp'
PAYLOAD: dict[str, Any] = {"args": [], "kwargs": {}}


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


@pytest.fixture
def jobs(queue: Queue) -> dict[str, int]:
    """Jobs of two tags and none, in three queues, enqueued in this order (ids ascending):
    a1 (api, order-1234) ends failed, m1 (mail, order-1234 and tenant:acme) stays ready, other
    (api, order-9) stays active, plain (api, no tag) ends failed, a2 (api, tenant:acme and
    order-1234, task shop.refund) succeeds, evil (misc, a markup tag and one with a quote)."""
    def put(task: str, queue_name: str, tags: list[str]) -> int:
        return queue.enqueue(task, PAYLOAD, EnqueueOptions(queue=queue_name, tags=tags,
                                                           max_attempts=1))

    ids = {"a1": put("shop.pay", "api", ["order-1234"]),
           "m1": put("mail.send", "mail", ["order-1234", "tenant:acme"]),
           "other": put("shop.pay", "api", ["order-9"]),
           "plain": put("shop.pay", "api", []),
           "a2": put("shop.refund", "api", ["tenant:acme", "order-1234"]),
           "evil": put("misc.x", "misc", [EVIL, QUOTED])}
    claimed = {job.id: job for job in queue.claim("api", 10, 60)}
    assert set(claimed) == {ids["a1"], ids["other"], ids["plain"], ids["a2"]}
    for name in ("a1", "plain"):
        job = claimed[ids[name]]
        queue.fail(job.id, job.fence, {"type": "ValueError", "message": "no", "traceback": None})
    queue.complete_many([(ids["a2"], claimed[ids["a2"]].fence, None)])
    return ids


def _status(conn: psycopg.Connection[Any], job_id: int) -> str:
    row = conn.execute("SELECT status FROM workhorse.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def _csrf(client: TestClient, path: str = "/") -> str:
    found = re.search(r'<body data-csrf="([^"]+)"', client.get(path).text)
    assert found
    return found.group(1)


def _listed(client: TestClient, query: dict[str, str]) -> list[int]:
    """The ids the Jobs page lists for `query`, in its order (the live region lists the
    same)."""
    response = client.get("/jobs?" + urlencode(query))
    assert response.status_code == 200, response.text[:2000]
    ids = [int(i) for i in re.findall(r'<tr data-job="(\d+)"', response.text)]
    live = client.get("/jobs?" + urlencode({**query, "live": "1"})).text
    assert [int(i) for i in re.findall(r'<tr data-job="(\d+)"', live)] == ids
    return ids


def _tag_links(html: str) -> list[tuple[str, str]]:
    """(href, text) of each tag link in `html`, unescaped."""
    return [(htmllib.unescape(href), htmllib.unescape(text)) for href, text in
            re.findall(r'<a class="tag" href="([^"]*)"[^>]*>([^<]*)</a>', html)]


def _row(html: str, job_id: int) -> str:
    found = re.search(rf'<tr data-job="{job_id}".*?</tr>', html, re.S)
    assert found, job_id
    return found.group(0)


# ---- the filter --------------------------------------------------------------------------------


def _filter_holds(client: TestClient, ids: dict[str, int]) -> bool:
    """The tag filter lists exactly each tag's jobs, newest first, with the other filters."""
    expected = [
        ({"tag": "order-1234"}, ["a2", "m1", "a1"]),
        ({"tag": "tenant:acme"}, ["a2", "m1"]),
        ({"tag": "order-9"}, ["other"]),
        ({"tag": "order-1234", "queue": "MAI"}, ["m1"]),      # a substring, any case
        ({"tag": "order-1234", "status": "failed"}, ["a1"]),
        ({"tag": "order-1234", "task": "refund"}, ["a2"]),
        ({"tag": "order-1234", "key": "nope"}, []),
        ({"tag": "nobody-has-it"}, []),
        ({"tag": EVIL}, ["evil"]),
        ({"tag": QUOTED}, ["evil"]),
        ({"tag": "order"}, []),                               # exact, not a substring
    ]
    return all(_listed(client, query) == [ids[name] for name in names]
               for query, names in expected)


def test_the_tag_filter_lists_exactly_the_tags_jobs(client, jobs, monkeypatch):
    assert _filter_holds(client, jobs)
    page = client.get("/jobs?tag=order-1234").text
    assert 'name="tag" value="order-1234"' in page                  # kept in the form
    assert ("<strong>3</strong> jobs match <span class=\"quiet\">(tag &#39;order-1234&#39;)"
            "</span>") in page
    assert re.findall(r'<span class="by-status">([^<]*)</span>', page) == [
        "failed 1", "ready 1", "succeeded 1"]
    assert 'id="older"' not in page and 'id="tag-newest"' not in page  # one short page
    assert "No job matches." in client.get("/jobs?tag=nobody-has-it").text
    assert jobs["plain"] in _listed(client, {})                       # unfiltered: every job

    # The checker fails on a list that ignores the tag (the other filters still apply).
    def untagged(search: _queries.Search, **options: Any) -> Any:
        return _queries.find_jobs(dataclasses.replace(search, tag=None), **options)

    monkeypatch.setattr(_queries, "find_tagged", untagged)
    assert not _filter_holds(client, jobs)


def test_a_tags_list_is_its_newest_page_and_says_so(client, jobs, monkeypatch):
    """Beyond a page, or beyond the jobs of the tag it reads, the list says what it shows: no
    older page (the tag's statement cannot start below an id yet)."""
    monkeypatch.setattr(_data, "JOBS_PAGE", 2)
    page = client.get("/jobs?tag=order-1234").text
    assert [int(i) for i in re.findall(r'<tr data-job="(\d+)"', page)] == [jobs["a2"],
                                                                         jobs["m1"]]
    assert 'id="tag-newest"' in page and "The newest 2 jobs of this tag shown" in page
    assert 'id="older"' not in page and 'id="tag-scanned"' not in page
    assert "<strong>3</strong> jobs match" in page                   # counted beyond the page
    monkeypatch.setattr(_queries, "TAG_SCAN", 2)
    page = client.get("/jobs?tag=order-1234").text
    assert "<strong>2+</strong> jobs match" in page and 'id="tag-scanned"' in page
    assert "only its newest 2 jobs are searched" in page
    # a1 is api's, but older than the two jobs read: not found, and the page says why.
    assert _listed(client, {"tag": "order-1234", "queue": "api"}) == [jobs["a2"]]


# ---- where tags show --------------------------------------------------------------------------


def test_tags_show_on_the_list_and_the_job_page_as_links_to_their_list(client, jobs):
    everything = client.get("/jobs").text
    assert "<th>tags</th>" in everything
    assert _tag_links(_row(everything, jobs["m1"])) == [
        ("/jobs?tag=order-1234", "order-1234"), ("/jobs?tag=tenant%3Aacme", "tenant:acme")]
    assert _tag_links(_row(everything, jobs["a2"])) == [
        ("/jobs?tag=tenant%3Aacme", "tenant:acme"), ("/jobs?tag=order-1234", "order-1234")]
    assert _tag_links(_row(everything, jobs["plain"])) == []
    # The tag-filtered list shows them too (read by the tag's own statement).
    assert _tag_links(_row(client.get("/jobs?tag=tenant:acme").text, jobs["m1"])) == [
        ("/jobs?tag=order-1234", "order-1234"), ("/jobs?tag=tenant%3Aacme", "tenant:acme")]

    detail = client.get(f"/jobs/{jobs['m1']}").text
    cell = re.search(r'<td id="job-tags">(.*?)</td>', detail, re.S)
    assert cell is not None
    assert _tag_links(cell.group(1)) == [("/jobs?tag=order-1234", "order-1234"),
                                         ("/jobs?tag=tenant%3Aacme", "tenant:acme")]
    assert '<td id="job-tags">-</td>' in client.get(f"/jobs/{jobs['plain']}").text
    # Each link lists its tag's jobs.
    href = _tag_links(cell.group(1))[1][0]
    assert [int(i) for i in re.findall(r'<tr data-job="(\d+)"', client.get(href).text)] == [
        jobs["a2"], jobs["m1"]]


# ---- bad tags -----------------------------------------------------------------------------------


def _refused(client: TestClient, query: dict[str, str], says: str) -> bool:
    response = client.get("/jobs?" + urlencode(query))
    return (response.status_code == 400 and 'class="problem"' in response.text
            and says in response.text)


BAD = [({"tag": "x" * 101}, "1-100 characters"), ({"tag": "a\x00b"}, "NUL"),
       ({"tag": "order-1234", "before": "5"}, "before= does not apply with tag="),
       ({"tag": "x" * 101, "status": "failed"}, "1-100 characters")]


def test_a_tag_no_job_can_have_is_the_pages_clear_400(client, jobs, conn, monkeypatch):
    for query, says in BAD:
        assert _refused(client, query, says), query
    assert _listed(client, {"tag": "x" * 100}) == []                  # 100 is a tag's limit
    # A bulk action refuses it too, and changes nothing.
    csrf = _csrf(client)
    response = client.post("/jobs/retry", data={"csrf": csrf, "match": "all",
                                                "tag": "x" * 101}, follow_redirects=False)
    assert response.status_code == 400 and "1-100 characters" in response.text
    assert _status(conn, jobs["a1"]) == _status(conn, jobs["plain"]) == "failed"

    # The checker fails on a page that ignores a bad tag (and lists every job).
    monkeypatch.setattr(_web, "_tag", lambda value: None)
    assert not _refused(client, BAD[0][0], BAD[0][1])


# ---- escaping -----------------------------------------------------------------------------------


def _escaped(client: TestClient, ids: dict[str, int]) -> bool:
    """Markup in tags is text on every page that shows them: the list, filtered or not, the
    job page, the filter form and a notice that names the filter."""
    csrf = _csrf(client)
    client.post("/jobs/retry", data={"csrf": csrf, "match": "all", "tag": EVIL,
                                     "back": "/jobs?" + urlencode({"tag": EVIL})},
                follow_redirects=False)
    pages = [client.get("/jobs?" + urlencode({"tag": EVIL})).text, client.get("/jobs").text,
             client.get(f"/jobs/{ids['evil']}").text,
             client.get(f"/jobs/{ids['evil']}?live=1").text]
    notice = pages[0]  # the next full page shows the action's notice
    return (all(EVIL not in page and ESCAPED in page and 'q"uote' not in page
                and "q&#34;uote&amp;amp" in page for page in pages)
            and f"nothing changed: no job matching tag &#39;{ESCAPED}&#39;" in notice
            and f'name="tag" value="{ESCAPED}"' in notice
            and ("/jobs?tag=%3Cscript%3Ealert%281%29%3C%2Fscript%3E", EVIL)
            in _tag_links(pages[2]))


def test_markup_in_a_tag_renders_as_text(client, jobs, database_url):
    assert _escaped(client, jobs)
    # The checker fails on templates that do not escape.
    with TestClient(create_app(database_url)) as raw:
        raw.app.state.dashboard.templates.autoescape = False
        assert not _escaped(raw, jobs)


# ---- bulk actions -------------------------------------------------------------------------------


def _all_form(html: str) -> dict[str, str]:
    """The hidden fields of the page's "retry all" / "cancel all" form."""
    form = re.search(r'<form [^>]*id="all-form">(.*?)</form>', html, re.S)
    assert form is not None, html[:3000]
    return {name: htmllib.unescape(value) for name, value in
            re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(1))}


def _acts_on_the_tag_only(client: TestClient, conn: psycopg.Connection[Any],
                          ids: dict[str, int]) -> bool:
    """"Retry all" on tag order-1234's list retries its failed job and not the untagged one;
    "cancel all" on its list of queue ~ "AP" cancels the (now ready) api job only, not the
    newer ready mail job."""
    page = client.get("/jobs?tag=order-1234").text
    fields = _all_form(page)
    if fields.get("tag") != "order-1234" or 'id="retry-all"' not in page:
        return False
    response = client.post("/jobs/retry", data=fields, follow_redirects=False)
    retried = (response.status_code == 303
               and "retried 1 of 1" in client.get(response.headers["location"]).text)
    after_retry = {name: _status(conn, ids[name]) for name in ids}
    fields = _all_form(client.get("/jobs?" + urlencode({"tag": "order-1234",
                                                        "queue": "AP"})).text)
    client.post("/jobs/cancel", data=fields)
    after_cancel = {name: _status(conn, ids[name]) for name in ids}
    return retried and after_retry == {
        "a1": "ready", "m1": "ready", "other": "active", "plain": "failed",
        "a2": "succeeded", "evil": "ready"} and after_cancel == {
        **after_retry, "a1": "canceled"}


def test_retry_and_cancel_all_act_on_the_tags_jobs_only(client, jobs, conn, monkeypatch):
    # Rows read one at a time for the queue substring: the match is in the second chunk.
    monkeypatch.setattr(_queries, "TAG_SCAN", 1)
    assert _acts_on_the_tag_only(client, conn, jobs)
    # Nothing left to retry: said, and nothing changes.
    csrf = _csrf(client)
    shown = client.post("/jobs/retry", data={"csrf": csrf, "match": "all", "tag": "order-1234",
                                             "status": "failed"}).text  # the redirect's page
    assert "nothing changed: no job matching status failed, tag &#39;order-1234&#39;" in shown
    assert _status(conn, jobs["plain"]) == "failed"


def test_the_bulk_checker_fails_when_the_action_ignores_the_tag(client, jobs, conn,
                                                                monkeypatch):
    matching_ids = _queries.matching_ids

    def untagged(search: _queries.Search, statuses: tuple[str, ...], limit: int) -> Any:
        return matching_ids(dataclasses.replace(search, tag=None), statuses, limit)

    monkeypatch.setattr(_queries, "matching_ids", untagged)
    assert not _acts_on_the_tag_only(client, conn, jobs)
    # The untagged failed job was retried (then canceled by the queue ~ "AP" cancel).
    assert _status(conn, jobs["plain"]) == "canceled"
