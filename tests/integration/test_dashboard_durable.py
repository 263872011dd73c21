"""Durable execution on the dashboard (docs/dashboard.md), server-rendered, without a browser:
a job's page shows its steps (name, kind, recorded or pending, what each waits for, its result
cut short, or its error), what a suspended job waits for, its parent and its children as links,
and offers Cancel; under --redact step results are hidden; the queue page shows the suspended
counts; every stored value (a step's name, a signal's name) is escaped."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from markupsafe import escape

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from _durable_world import EVIL, LONG, QUEUE, World, suspended_world
from starlette.testclient import TestClient

from workhorse import Queue
from workhorse.dashboard import create_app
from workhorse.testing import drain


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    found = suspended_world(database_url)
    try:
        yield found
    finally:
        found.app.close()


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


def _rows(html: str) -> dict[str, list[str]]:
    """The steps table: step name (as in data-step) -> its cells' text."""
    table = re.search(r'<table class="steps" id="steps">(.*?)</table>', html, re.S)
    assert table, "no steps table"
    found = {}
    for name, row in re.findall(r'<tr data-step="([^"]*)"[^>]*>(.*?)</tr>', table.group(1), re.S):
        found[name] = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", cell)).strip()
                       for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    return found


def test_a_sleeping_jobs_page_shows_its_steps_and_what_it_waits_for(
        world: World, client: TestClient) -> None:
    page = client.get(f"/jobs/{world.sleeper}")
    assert page.status_code == 200
    html = page.text
    assert '<span class="status suspended">suspended</span>' in html
    waiting = re.search(r'<td id="job-waiting" data-suspended-on="sleep">(.*?)</td>', html, re.S)
    assert waiting and "sleeping at step &#39;cool-off&#39; until " in waiting.group(1)
    rows = _rows(html)
    assert list(rows) == ["charge", "cool-off"]
    name, kind, recorded, waits, outcome = rows["charge"]
    assert (name, kind, waits) == ("charge", "run", "-") and recorded[:2] == "20"
    assert outcome.startswith("{&#34;note&#34;: &#34;xxx") and "characters)" in outcome
    assert LONG not in html  # cut to its first 500 characters
    name, kind, recorded, waits, outcome = rows["cool-off"]
    assert (kind, recorded, outcome) == ("sleep", "pending", "-") and waits.startswith("wakes ")
    assert 'id="cancel"' in html  # a suspended job can be canceled
    assert 'id="job-parent"' not in html and 'id="children"' not in html


def test_a_waiting_job_names_its_signal_escaped(world: World, client: TestClient) -> None:
    html = client.get(f"/jobs/{world.patient}").text
    assert EVIL not in html
    rows = _rows(html)
    [(name, cells)] = rows.items()
    assert name == str(escape(EVIL))
    assert cells[1] == "wait" and cells[2] == "pending"
    assert cells[3] == f"signal {escape(EVIL)}"
    waiting = re.search(r'<td id="job-waiting" data-suspended-on="signal">(.*?)</td>', html, re.S)
    assert waiting and "(no timeout)" in waiting.group(1)
    assert str(escape(repr(EVIL))) in waiting.group(1)
    timed = client.get(f"/jobs/{world.waiter}").text
    assert "times out " in _rows(timed)["approve"][3]


def test_a_parent_links_its_children_and_a_child_its_parent(
        world: World, client: TestClient) -> None:
    html = client.get(f"/jobs/{world.parent}").text
    assert "waiting for its children at step &#39;kids&#39;" in html
    children = re.search(r'<ul class="children" id="children">(.*?)</ul>', html, re.S)
    assert children
    for kid in world.kids:
        assert f'<a href="/jobs/{kid}">job {kid}</a>' in children.group(1)
    assert _rows(html)["kids"][1:3] == ["children", "pending"]
    kid = client.get(f"/jobs/{world.kids[0]}").text
    assert (f'<td id="job-parent"><a href="/jobs/{world.parent}">job {world.parent}</a></td>'
            in kid)


def test_a_recorded_wait_shows_the_payload_and_redact_hides_it(
        world: World, client: TestClient, database_url: str, queue: Queue) -> None:
    queue.signal(world.waiter, "approval", {"by": "<b>ana</b>"})

    drain(world.app, [QUEUE])
    assert queue.get_job(world.waiter).status.value == "succeeded"
    html = client.get(f"/jobs/{world.waiter}").text
    _, kind, recorded, _, outcome = _rows(html)["approve"]
    assert kind == "wait" and recorded != "pending"
    assert outcome == "{&#34;by&#34;: &#34;&lt;b&gt;ana&lt;/b&gt;&#34;}"
    with TestClient(create_app(database_url, redact=True)) as redacted:
        hidden = redacted.get(f"/jobs/{world.waiter}").text
    assert "ana" not in hidden and "hidden" in _rows(hidden)["approve"][4]


def test_the_queue_page_and_the_overview_show_the_suspended_counts(
        world: World, client: TestClient) -> None:
    html = client.get(f"/queue?name={QUEUE}").text
    section = re.search(r'<div class="suspended" id="suspended">(.*?)</div>', html, re.S)
    assert section, "no suspended section"
    counts = dict((reason, int(n)) for reason, n in re.findall(
        r'data-suspended="(\w+)">(\d+) ', section.group(1)))
    assert counts == {"sleep": 3, "signal": 2, "children": 1}
    assert 'id="next-wake"' in section.group(1)
    assert 'data-reason="suspended"' in html and "suspended 6" in html
    assert '<span class="label">suspended</span>' in html
    overview = client.get("/").text
    assert re.search(r'<span class="n">6</span><span class="label">suspended</span>', overview)
    listed = client.get(f"/jobs?queue={QUEUE}&status=suspended").text
    for job_id in (world.sleeper, world.waiter, world.patient, world.parent, *world.kids):
        assert f'href="/jobs/{job_id}"' in listed
