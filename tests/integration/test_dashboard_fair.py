"""The queue page of a fair queue (docs/design.md "Fair share and job cost", issue #26 item 5 and
#32 item 8): its keys by active units beside their fair share (max_active by weight among the
keys with active or ready work), from the real claim on a real PostgreSQL; a FIFO queue's page
has no such table."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue
from workhorse.dashboard import create_app


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


def _rows(html: str) -> dict[str, list[str]]:
    table = re.search(r'<table class="keys shares">(.*?)</table>', html, re.S)
    assert table, "the page has a key-shares table"
    rows = {}
    for row in re.findall(r"<tr><td class=\"key\">(.*?)</tr>", table.group(1), re.S):
        key = re.sub(r"<[^>]+>", "", row.split("</td>")[0])
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in row.split("</td>")[1:-1]]
        rows[key] = cells
    return rows


def test_a_fair_queue_page_shows_each_keys_units_beside_its_share(
        client: TestClient, queue: Queue) -> None:
    queue.sync_concurrency_policies("fair-app", [
        ConcurrencyPolicyDefinition("llm", max_active=8, fairness="key")])
    for key, weight, cost in (("t-heavy", 3, 2), ("t-light", 1, 1)):
        queue.enqueue_many([("llm.run", {}, EnqueueOptions(queue="llm", concurrency_key=key,
                                                           weight=weight, cost=cost))
                            for _ in range(6)])
    claimed = queue.claim("llm", 8, 60)
    assert claimed, "the fair claim admitted jobs"
    units: dict[str, int] = {}
    for job in claimed:
        stored = queue.get_job(job.id)
        assert stored is not None
        units[job.concurrency_key or ""] = units.get(job.concurrency_key or "", 0) + stored.cost
    rows = _rows(client.get("/queue", params={"name": "llm"}).text)
    assert set(rows) == {"t-heavy", "t-light"}
    for key, (active, _jobs, weight, share, ready) in rows.items():
        assert int(active) == units.get(key, 0)
        assert ready == "yes"  # both still have ready work
        assert float(share) == pytest.approx(8 * int(weight) / 4, abs=0.05)
    assert rows["t-heavy"][2] == "3" and rows["t-light"][2] == "1"


def test_a_fifo_queue_page_has_no_share_table(client: TestClient, queue: Queue) -> None:
    queue.sync_concurrency_policies("fifo-app", [ConcurrencyPolicyDefinition("mail", 4)])
    queue.enqueue("mail.send", {}, EnqueueOptions(queue="mail", concurrency_key="t"))
    html = client.get("/queue", params={"name": "mail"}).text
    assert "keys shares" not in html and "Keys by active units" not in html
