"""Back-pressure on the dashboard (docs/design.md "Back-pressure"), without a browser, against a
real PostgreSQL: the overview, the queue page and the budgets page say "backed off until T by
job N" (a queue's keys listed on its page, their names escaped); "Clear backoff" (a CSRF-checked
POST, like pause and resume) ends a queue's, a key's or a budget's backoff and says what it
ended, or that nothing was in force; --read-only shows the banners without a button and refuses
the POST; bad input is a 400 (an unknown queue a 404) that clears nothing.

The backoffs are made as a handler's Backoff makes them (test_cli_backoffs.back_off)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from markupsafe import escape

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient
from test_cli_backoffs import back_off
from test_dashboard import TOKEN, _csrf

from workhorse import BudgetDefinition, ConcurrencyPolicyDefinition, EnqueueOptions, Queue
from workhorse.dashboard import create_app

EVIL = "<script>alert('key')</script>"
ESCAPED = "&lt;script&gt;alert(&#39;key&#39;)&lt;/script&gt;"


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def said(b: Any) -> str:
    """What a page says of backoff `b`, tags stripped: "backed off until T by job N"."""
    return f"backed off until {stamp(b.until)} by job {b.by_job}"


def text(html: str) -> str:
    """`html` without its tags, blanks folded: what a reader sees."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace(" :", ":")


def element(html: str, tag: str, attrs: str) -> str:
    """The inside of the first `<tag attrs...>...</tag>` of `html`, the same tag nested in it
    included."""
    start = re.search(rf"<{tag} {attrs}[^>]*>", html)
    assert start, (attrs, html[:3000])
    depth = 1
    for found in re.finditer(rf"<{tag}\b|</{tag}>", html[start.end():]):
        depth += -1 if found.group().startswith("</") else 1
        if depth == 0:
            return html[start.end():start.end() + found.start()]
    raise AssertionError(f"<{tag} {attrs}> is not closed")


@pytest.fixture
def held(queue: Queue) -> dict[str, Any]:
    """Queue `partner` backed off whole; keys `a` and a markup key of `crawl` (a governed
    queue) backed off, key `c` free; budget `openai` (queue `embeddings` names it) backed
    off."""
    queue.sync_concurrency_policies("shop", [
        ConcurrencyPolicyDefinition("crawl", max_active=10, max_active_per_key=1)])
    queue.sync_budgets("ai", [BudgetDefinition("openai", max_active=5)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="partner")) for _ in range(2)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="crawl", concurrency_key=key))
                        for key in ("a", EVIL, "c")])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="embeddings", budget="openai"))
                        for _ in range(2)])
    found = {"partner": back_off(queue, "partner", "queue"),
             "a": back_off(queue, "crawl", "key"), "evil": back_off(queue, "crawl", "key"),
             "openai": back_off(queue, "embeddings", "budget")}
    assert (found["a"].key, found["evil"].key) == ("a", EVIL)
    return found


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


def _kept(queue: Queue) -> set[tuple[str, str, str | None]]:
    return {(b.scope, b.name, b.key) for b in queue.backoffs()}


ALL = {("queue", "partner", None), ("key", "crawl", "a"), ("key", "crawl", EVIL),
       ("budget", "openai", None)}


def test_the_pages_say_what_is_backed_off_until_when_and_by_which_job(client, held, queue):
    p, a, evil, o = held["partner"], held["a"], held["evil"], held["openai"]
    for path in ("/", "/?live=1"):
        html = client.get(path).text
        banner = element(html, "div", 'class="held-by backed-off"')
        assert said(o) in text(element(banner, "li", 'data-backoff="budget" data-budget="openai"'))
        assert said(p) in text(element(banner, "li", 'data-backoff="queue" data-queue="partner"'))
        crawl = text(element(banner, "li", 'data-backoff="queue" data-queue="crawl"'))
        assert "2 keys backed off" in crawl
        assert f"until {stamp(max(a.until, evil.until))} at the latest" in crawl
        assert 'data-backed-off="partner"' in html and 'data-backed-off="embeddings"' in html
        # The governed queue's row says so (it has no other state to show).
        row = element(html, "tr", 'data-queue="crawl"')
        assert 'class="badge paused backed-off"' in row and "running" not in row
        assert EVIL not in html
        assert html.count('action="/queue/clear-backoff"') == 2      # partner, crawl
        assert html.count('action="/budgets/clear-backoff"') == 1

    for path in ("/queue?name=partner", "/queue?name=partner&live=1"):
        banner = element(client.get(path).text, "div", 'class="held-by backed-off"')
        assert said(p) in text(element(banner, "li", 'data-backoff="queue"'))
        assert 'id="clear-backoff"' in banner and 'name="key"' not in banner

    html = client.get("/queue?name=crawl").text
    assert EVIL not in html
    banner = element(html, "div", 'class="held-by backed-off"')
    assert "2 keys backed off" in text(banner)
    keys = dict(re.findall(r'<tr data-key="([^"]*)">(.*?)</tr>', banner, re.S))
    assert set(keys) == {"a", ESCAPED}
    assert said(a) in text(keys["a"]) and said(evil) in text(keys[ESCAPED])
    assert f'<input type="hidden" name="key" value="{ESCAPED}">' in keys[ESCAPED]
    assert 'id="clear-backoff"' in banner  # the queue's own is not in force: its keys' are

    html = client.get("/queue?name=embeddings").text
    banner = element(html, "div", 'class="held-by backed-off"')
    assert said(o) in text(element(banner, "li", 'data-backoff="budget" data-budget="openai"'))
    assert 'action="/budgets/clear-backoff"' in banner and 'id="clear-backoff"' not in banner
    budget_row = element(html, "tr", 'data-budget="openai"')
    assert said(o) in text(budget_row)

    for path in ("/budgets", "/budgets?live=1"):
        html = client.get(path).text
        banner = element(html, "div", 'class="held-by backed-off"')
        assert said(o) in text(element(banner, "li", 'data-backoff="budget" data-budget="openai"'))
        assert 'action="/budgets/clear-backoff"' in banner
        state = element(element(html, "tr", 'id="budget-1" data-budget="openai"'), "td",
                        'class="state"')
        assert said(o) in text(state) and "room" not in state

    assert _kept(queue) == ALL  # reading changed nothing


def test_no_banner_while_nothing_is_backed_off(client, queue):
    queue.enqueue("t", {}, EnqueueOptions(queue="quiet"))
    for path in ("/", "/queue?name=quiet", "/budgets"):
        html = client.get(path).text
        assert "backed-off" not in html and "Backed off" not in html, path


def test_clear_a_key_the_queue_and_the_budget(client, held, queue):
    csrf = _csrf(client)
    response = client.post("/queue/clear-backoff",
                           data={"queue": "crawl", "key": EVIL, "csrf": csrf},
                           follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/queue?name=crawl"
    assert _kept(queue) == ALL - {("key", "crawl", EVIL)}
    page = client.get("/queue?name=crawl").text
    notice = element(page, "p", 'class="notice"')
    assert escape(f"backoff cleared: key {EVIL!r} of queue 'crawl'") in notice
    assert f"by job {held['evil'].by_job}" in notice and EVIL not in page
    # Its key starts again; key a is still backed off.
    assert sorted(j.concurrency_key for j in queue.claim("crawl", 3, 30)) == sorted([EVIL, "c"])

    # From the overview's banner: back to the overview; the queue's keys too.
    response = client.post("/queue/clear-backoff",
                           data={"queue": "crawl", "back": "/", "csrf": csrf},
                           follow_redirects=False)
    assert response.headers["location"] == "/"
    assert "backoff cleared: key &#39;a&#39; of queue &#39;crawl&#39;" in client.get("/").text
    response = client.post("/queue/clear-backoff", data={"queue": "partner", "csrf": csrf})
    assert response.status_code == 200
    assert "backoff cleared: queue &#39;partner&#39;" in response.text
    assert len(queue.claim("partner", 2, 30)) == 2

    # Nothing in force: said, not an error.
    response = client.post("/queue/clear-backoff", data={"queue": "partner", "csrf": csrf})
    assert ("nothing changed: queue &#39;partner&#39; had no backoff in force"
            in element(response.text, "p", 'class="problem"'))

    assert queue.claim("embeddings", 1, 30) == []
    response = client.post("/budgets/clear-backoff", data={"budget": "openai", "csrf": csrf},
                           follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/budgets"
    notice = element(client.get("/budgets").text, "p", 'class="notice"')
    assert f"backoff cleared: budget &#39;openai&#39; (until {stamp(held['openai'].until)}" \
        in notice
    assert _kept(queue) == set()
    assert len(queue.claim("embeddings", 2, 30)) == 2
    response = client.post("/budgets/clear-backoff",
                           data={"budget": "openai", "csrf": csrf, "back": "//evil.example/"},
                           follow_redirects=False)
    assert response.headers["location"] == "/budgets"  # this site only
    assert ("nothing changed: budget &#39;openai&#39; had no backoff in force"
            in client.get("/budgets").text)


def test_clear_backoff_needs_the_csrf_token_and_a_same_origin_request(client, held, queue):
    csrf = _csrf(client)
    for path, form in [("/queue/clear-backoff", {"queue": "partner"}),
                       ("/queue/clear-backoff", {"queue": "crawl", "key": "a"}),
                       ("/budgets/clear-backoff", {"budget": "openai"})]:
        for token in (None, "wrong", csrf[:-1]):
            sent = dict(form, **({"csrf": token} if token else {}))
            response = client.post(path, data=sent, follow_redirects=False)
            assert response.status_code == 403, (path, token)
        response = client.post(path, data={**form, "csrf": csrf},
                               headers={"Sec-Fetch-Site": "cross-site"}, follow_redirects=False)
        assert response.status_code == 403, path
    assert _kept(queue) == ALL


def test_read_only_shows_the_backoffs_and_refuses_to_clear_them(database_url, held, queue):
    with TestClient(create_app(database_url, read_only=True)) as client:
        for path in ("/", "/queue?name=crawl", "/queue?name=partner", "/queue?name=embeddings",
                     "/budgets", "/?live=1", "/budgets?live=1"):
            html = client.get(path).text
            assert "backed off until" in html, path
            assert 'action="/queue/clear-backoff"' not in html, path
            assert 'action="/budgets/clear-backoff"' not in html, path
            assert 'method="post"' not in html and "Clear backoff" not in html, path
        csrf = _csrf(client)
        for path, form in [("/queue/clear-backoff", {"queue": "partner"}),
                           ("/queue/clear-backoff", {"queue": "crawl", "key": "a"}),
                           ("/budgets/clear-backoff", {"budget": "openai"})]:
            response = client.post(path, data={**form, "csrf": csrf})
            assert response.status_code == 403, path
            assert "read-only" in response.text
    assert _kept(queue) == ALL


def test_a_bearer_token_clears_without_a_csrf_token(database_url, held, queue):
    with TestClient(create_app(database_url, token=TOKEN)) as client:
        assert client.post("/budgets/clear-backoff",
                           data={"budget": "openai"}).status_code == 401  # no token
        response = client.post("/budgets/clear-backoff", data={"budget": "openai"},
                               headers={"Authorization": f"Bearer {TOKEN}"},
                               follow_redirects=False)
        assert response.status_code == 303
    assert _kept(queue) == ALL - {("budget", "openai", None)}


@pytest.mark.parametrize(("path", "form", "status", "message"), [
    ("/queue/clear-backoff", {"queue": "crawl", "key": ""}, 400, "which key?"),
    ("/queue/clear-backoff", {"queue": "crawl", "key": "  "}, 400, "which key?"),
    ("/queue/clear-backoff", {"queue": "crawl", "key": "a\x00b"}, 400,
     "key must not contain NUL"),
    ("/queue/clear-backoff", {"queue": "crawl", "key": "k" * 256}, 400,
     "key must be a string of 1-255"),
    ("/queue/clear-backoff", {"queue": ""}, 400, "which queue?"),
    ("/queue/clear-backoff", {"queue": "q\x00"}, 400, "queue must not contain NUL"),
    ("/queue/clear-backoff", {"queue": "crawll"}, 404, "no queue &#39;crawll&#39;"),
    ("/budgets/clear-backoff", {}, 400, "which budget?"),
    ("/budgets/clear-backoff", {"budget": " "}, 400, "which budget?"),
    ("/budgets/clear-backoff", {"budget": "b" * 256}, 400, "budget must be a string of 1-255"),
    ("/budgets/override", {"budget": "openai"}, 404, "no action"),
])
def test_bad_input_is_refused_and_clears_nothing(client, held, queue, path, form, status,
                                                 message):
    response = client.post(path, data={**form, "csrf": _csrf(client)}, follow_redirects=False)
    assert response.status_code == status, response.text
    assert message in response.text
    assert _kept(queue) == ALL
