"""Per-key limits on the dashboard's queue page (docs/design.md "Per-key limits"), without a
browser, against a real PostgreSQL: a queue with key limits shows its default and its first 50
keys by name with their limits (names escaped), and how many more there are ("950+" past the
health sample's count); its saturated keys are those at their own limit, each with that limit,
and "held back by" says so; a queue without key limits has no such section, and clearing them
removes it. Server-rendered: the first response and the live fragment have it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from markupsafe import escape

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, KeyLimit, Queue
from workhorse.dashboard import create_app

EVIL = "<script>alert('key')</script>"
ESCAPED = "&lt;script&gt;alert(&#39;key&#39;)&lt;/script&gt;"


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


@pytest.fixture
def limited(queue: Queue) -> Queue:
    """Queue `api` (namespace `shop`: 50 active, 1 per key) with key limits: a default of 1
    active and 10 starts a minute; EVIL 3 active; acme weight 2 only (so the default's 1
    applies to it); k00..k59 2 active each: 62 keys. EVIL has 5 jobs, acme 2, k00 2, and queue
    `plain` (no key limits) 2 jobs of one key."""
    queue.sync_concurrency_policies("shop", [
        ConcurrencyPolicyDefinition("api", max_active=50, max_active_per_key=1),
        ConcurrencyPolicyDefinition("plain", max_active=5, max_active_per_key=1)])
    queue.set_key_limits("shop", "api", {
        EVIL: KeyLimit(max_active=3), "acme": KeyLimit(weight=2),
        **{f"k{i:02}": KeyLimit(max_active=2, rate_limit="5/10s") for i in range(60)}},
        default=KeyLimit(max_active=1, rate_limit="10/m"))
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="api", concurrency_key=key))
                        for key, n in ((EVIL, 5), ("acme", 2), ("k00", 2)) for _ in range(n)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="plain", concurrency_key="p"))] * 2)
    while queue.claim("api", 10, 600):
        pass
    assert queue.claim("plain", 10, 600)
    return queue


def _table(html: str, css: str) -> list[list[str]]:
    """The rows of `<table class="css">`, each as its cells' text (tags stripped)."""
    table = re.search(rf'<table class="{css}">(.*?)</table>', html, re.S)
    assert table, css
    return [[re.sub(r"<[^>]+>", "", cell).strip()
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)
            if "<td" in row]


def test_the_queue_page_shows_the_default_and_the_first_50_keys(
        client: TestClient, limited: Queue, conn: psycopg.Connection[Any]) -> None:
    # The first 50 in the database's key order (its collation decides where EVIL goes).
    first = [escape(key) for (key,) in conn.execute(
        "SELECT ckey FROM workhorse.key_limits WHERE queue = 'api' ORDER BY ckey LIMIT 50")]
    for path in ("/queue?name=api", "/queue?name=api&live=1"):
        html = client.get(path).text
        assert '<h2 id="key-limits">Key limits' in html
        assert "owned by shop" in html
        default = re.search(r'<p class="key-limit-default">(.*?)</p>', html, re.S)
        assert default and "max active 1, rate 10/m" in default.group(1)
        rows = _table(html, "keys key-limits")
        # In key order, escaped; 50 of 62.
        assert [row[0] for row in rows] == first
        by_key = {row[0]: row[1:] for row in rows}
        assert by_key.get(ESCAPED, ["3", "-", "-"]) == ["3", "-", "-"]
        assert by_key["acme"] == ["-", "2", "-"]
        assert by_key["k00"] == ["2", "-", "5/10s"]
        assert EVIL not in html
        more = re.search(r'<p class="quiet" id="key-limits-more">(.*?)</p>', html, re.S)
        assert more and "The first 50 keys by name; 12 more" in more.group(1)


def test_saturated_keys_are_those_at_their_own_limit_with_it(client: TestClient,
                                                            limited: Queue) -> None:
    html = client.get("/queue?name=api").text
    # key, active, ready backlog, its limit: EVIL at its own 3, acme at the default's 1, k00
    # at its own 2 (no backlog left).
    assert sorted(_table(html, "keys saturated")) == sorted([
        [ESCAPED, "3", "2", "3"], ["acme", "1", "1", "1"], ["k00", "2", "0", "2"]])
    cards = re.search(r'<span class="n">(\d+)</span><span class="label">saturated keys', html)
    assert cards and cards.group(1) == "3"
    held = re.search(r'<div class="held-by" id="held-by">(.*?)</div>', html, re.S)
    assert held and "3 key(s) at their own limit" in held.group(1)


def test_a_queue_without_key_limits_has_no_such_section(client: TestClient,
                                                        limited: Queue) -> None:
    html = client.get("/queue?name=plain").text
    assert 'id="key-limits"' not in html
    # Its saturated key is at the policy's per-key limit, said as before.
    assert _table(html, "keys saturated") == [["p", "1", "1", "1"]]
    held = re.search(r'<div class="held-by" id="held-by">(.*?)</div>', html, re.S)
    assert held and "1 key(s) at 1 active each" in held.group(1)
    limited.clear_key_limits("api")
    assert 'id="key-limits"' not in client.get("/queue?name=api").text


def test_a_set_with_only_a_default_and_one_past_the_health_sample(client: TestClient,
                                                                  queue: Queue) -> None:
    queue.sync_concurrency_policies("shop", [
        ConcurrencyPolicyDefinition("api", max_active=50),
        ConcurrencyPolicyDefinition("wide", max_active=50)])
    queue.set_key_limits(None, "api", {}, default=KeyLimit(max_active=4))
    html = client.get("/queue?name=api").text
    default = re.search(r'<p class="key-limit-default">(.*?)</p>', html, re.S)
    assert default and "max active 4" in default.group(1)
    assert "No key has limits of its own." in html
    queue.set_key_limits(None, "wide", {f"w{i:04}": KeyLimit(max_active=2) for i in range(1100)})
    html = client.get("/queue?name=wide").text
    default = re.search(r'<p class="key-limit-default">(.*?)</p>', html, re.S)
    assert default and "none: the policy's per-key limits apply" in default.group(1)
    assert len(_table(html, "keys key-limits")) == 50
    more = re.search(r'<p class="quiet" id="key-limits-more">(.*?)</p>', html, re.S)
    assert more and "950+ more" in more.group(1)
