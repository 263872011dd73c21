"""The dashboard's task substring over a long history (issue #32, benchmarks/README.md "The
dashboard's pages"; migrations/0002_0.3.0.sql): the search turns the substring into the
succeeded task names it matches (a skip scan of jobs_succeeded_task_idx) and reads each window's
succeeded matches by (task, id), the other statuses through their own partial indexes.

Two guards, each shown to fail on a broken variant in the test itself:
- the same pages, counts and newer links as the search that reads each window row by row (the
  path taken when the names cannot be listed), over pages both ways and mixed statuses, names
  and cases; a variant that forgets one matching name differs;
- the plan: an older page of a rare task reads no window of the primary key (the old path reads
  three, so the same bound fails on it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from workhorse import Queue, _ops
from workhorse.dashboard import _queries

WINDOW = 2_000


def _history(conn: psycopg.Connection[Any]) -> None:
    """6,000 succeeded jobs over 7 tasks (one rare, one in capitals), and failed, held, canceled,
    ready and scheduled jobs interleaved, some of tasks no succeeded job has."""
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, finished_at)"
        " SELECT CASE WHEN g % 1500 = 0 THEN 'shop.Monthly' WHEN g % 7 = 0 THEN 'SHOP.Report'"
        "             ELSE 'shop.task' || (g % 5) END,"
        "        (ARRAY['api', 'history', 'mail'])[1 + g % 3], 't-' || (g % 10), '{}',"
        "        CASE WHEN g % 97 = 0 THEN 'failed' WHEN g % 101 = 0 THEN 'held'"
        "             WHEN g % 103 = 0 THEN 'canceled' ELSE 'succeeded' END, now()"
        " FROM generate_series(1, 6000) g")
    conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, run_at)"
        " SELECT CASE WHEN g % 3 = 0 THEN 'only.ready.monthly' ELSE 'shop.task1' END, 'api',"
        "        't-' || (g % 10), '{}', CASE WHEN g % 2 = 0 THEN 'ready' ELSE 'scheduled' END,"
        "        now() + CASE WHEN g % 2 = 0 THEN interval '0' ELSE interval '1 hour' END"
        " FROM generate_series(1, 300) g")
    conn.execute("ANALYZE workhorse.jobs")


def _page(conn: psycopg.Connection[Any], search: _queries.Search,
          before: int | None) -> tuple[Any, ...]:
    found = _ops.execute(conn, _queries.find_jobs(search, before=before, window=WINDOW))
    return ([j.id for j in found.jobs], found.newer, found.counts, found.capped,
            found.unsearched_below)


SEARCHES = [
    _queries.Search(task="monthly"), _queries.Search(task="MONTHLY", status="ready"),
    _queries.Search(task="report"), _queries.Search(task="task1"),
    _queries.Search(task="task1", queue="api"), _queries.Search(task="task", key="t-3"),
    _queries.Search(task="shop", status="failed"), _queries.Search(task="nothing"),
    _queries.Search(task="task2", status="succeeded"), _queries.Search(task="."),
    _queries.Search(task="TA", key="t-1"), _queries.Search(task="ly", queue="api"),
]


@pytest.fixture
def history(conn: psycopg.Connection[Any]) -> Iterator[tuple[psycopg.Connection[Any], list[int]]]:
    _history(conn)
    row = conn.execute("SELECT min(id), max(id) FROM workhorse.jobs").fetchone()
    assert row is not None
    oldest, newest = int(row[0]), int(row[1])
    yield conn, [0, newest - 100, (oldest + newest) // 2, oldest + 500, oldest + 3]


def _by_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search as it was: every window read row by row."""
    monkeypatch.setattr(_queries, "succeeded_task_names", lambda substring: _none())


def _none() -> Iterator[Any]:
    return None
    yield  # a generator, like every operation


def test_the_same_pages_as_reading_the_window_row_by_row(
        history: tuple[psycopg.Connection[Any], list[int]], queue: Queue) -> None:
    conn, befores = history
    fast = {(s, b): _page(conn, s, b or None) for s in SEARCHES for b in befores}
    assert any(page[0] for page in fast.values()) and any(page[1] for page in fast.values())
    with pytest.MonkeyPatch.context() as patch:
        _by_rows(patch)
        slow = {(s, b): _page(conn, s, b or None) for s in SEARCHES for b in befores}
    assert fast == slow

    # The checker fails on a variant that forgets one of the names the substring matches.
    names = _queries.succeeded_task_names

    def forgetful(substring: str) -> Any:
        found = yield from names(substring)
        return found[1:] if found else found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_queries, "succeeded_task_names", forgetful)
        broken = {(s, b): _page(conn, s, b or None) for s in SEARCHES for b in befores}
    assert broken != slow


def test_more_names_than_the_cap_or_every_name_fall_back_to_the_window(
        history: tuple[psycopg.Connection[Any], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, _ = history
    assert _ops.execute(conn, _queries.succeeded_task_names("task")) == [
        "shop.task0", "shop.task1", "shop.task2", "shop.task3", "shop.task4"]
    assert _ops.execute(conn, _queries.succeeded_task_names("nothing")) == []
    # A substring of every name selects nothing: the window, row by row, stops sooner.
    assert _ops.execute(conn, _queries.succeeded_task_names("SHOP")) is None
    monkeypatch.setattr(_queries, "TASK_NAMES_CAP", 3)
    assert _ops.execute(conn, _queries.succeeded_task_names("task")) is None
    assert _page(conn, _queries.Search(task="monthly"), None)[0]  # still found, row by row


# ---- the plan ---------------------------------------------------------------------------------


def _pkey_rows(texts: list[str]) -> int:
    """Rows read through jobs_pkey (returned plus removed by a filter, over every loop)."""
    total = 0
    for text in texts:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if not re.search(r"Scan( Backward)? using jobs_pkey on jobs", line) or (
                    "(never executed)" in line):
                continue
            actual = re.search(r"actual time=\S+ rows=([\d.]+) loops=(\d+)", line)
            assert actual, line
            removed = 0
            for detail in lines[i + 1:]:
                if "->" in detail:
                    break
                found = re.search(r"Rows Removed by Filter: (\d+)", detail)
                removed += int(found.group(1)) if found else 0
            total += round((float(actual.group(1)) + removed) * int(actual.group(2)))
    return total


def test_an_older_page_of_a_rare_task_reads_no_window_of_history(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        Queue(conn).install_schema()
        conn.execute(
            "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, finished_at)"
            " SELECT CASE WHEN g % 5000 = 0 THEN 'shop.monthly' ELSE 'shop.task' || (g % 20)"
            "        END, (ARRAY['api', 'history', 'mail'])[1 + g % 3], 't-' || (g % 100),"
            "        '{}', CASE WHEN g % 100 = 0 THEN 'failed' ELSE 'succeeded' END, now()"
            " FROM generate_series(1, 60000) g")
        conn.execute("VACUUM ANALYZE workhorse.jobs")
        notices: list[str] = []
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_level = 'notice'")
        conn.execute("SET auto_explain.log_analyze = on")
        conn.execute("SET enable_seqscan = off")
        window = 10_000
        searches = [(_queries.Search(task="monthly"), 30_000),
                    (_queries.Search(task="MONTH"), None),
                    (_queries.Search(task="monthly", queue="api"), 30_000),
                    (_queries.Search(task="task7"), 20_000)]

        def rows_read(search: _queries.Search, before: int | None) -> tuple[int, list[str]]:
            notices.clear()
            conn.execute("SET auto_explain.log_min_duration = 0")
            try:
                _ops.execute(conn, _queries.find_jobs(search, before=before, window=window))
            finally:
                conn.execute("SET auto_explain.log_min_duration = -1")
            texts = [t for t in notices if "Query Text" in t]
            assert texts, "auto_explain logged nothing: the guard would be vacuous"
            assert not [t for t in texts if "Seq Scan on jobs" in t]
            return _pkey_rows(texts), texts

        for search, before in searches:
            read, texts = rows_read(search, before)
            # The page's fetch by id and the two ends of the key; never a window.
            assert read <= 100 + 2, f"{search}: {read} rows through jobs_pkey:\n\n" + "\n\n".join(
                texts)
            assert "jobs_succeeded_task_idx" in "\n".join(texts)
        # The guard fails on the search as it was (each window read row by row): three windows.
        with pytest.MonkeyPatch.context() as patch:
            _by_rows(patch)
            read, _ = rows_read(_queries.Search(task="monthly"), 30_000)
            assert read >= 3 * window
