"""Back-pressure where operators look and act (docs/design.md "Back-pressure"), against a real
database: `workhorse queues` and `workhorse budgets` say "backed off until T by job N" (and how
many keys), `workhorse top` has a line per backoff, `queues clear-backoff QUEUE [--key K]` and
`budgets clear-backoff NAME` end one and say what they ended (exit 0 also when none was in
force), in text and --json, and bad input is one error line (exit 1) or a usage error (exit 2)
that clears nothing.

Every backoff is made the way a handler's Backoff makes one: a job is claimed, and the backoff
operation (`_ops.backoff`) runs under its fence with release (the job goes back to ready)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from test_cli import cli, ok_json

from workhorse import BudgetDefinition, EnqueueOptions, Queue, _ops
from workhorse.cli import _base as cli_base
from workhorse.types import BackoffState

MINUTE = 60.0


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's tables one row a line, as off a terminal, whatever width the test runner's
    environment gave the console when it was made (COLUMNS)."""
    monkeypatch.setattr(cli_base.console, "width", 1000)


def back_off(queue: Queue, name: str, scope: str, seconds: float = MINUTE) -> BackoffState:
    """Claim one of `name`'s ready jobs (the claim passes over a backed-off key) and back off
    `scope` from it, releasing it, as a handler that raised Backoff does."""
    [job] = queue.claim(name, 1, 30)
    _, state = queue._run(_ops.backoff(job.id, job.fence, seconds, scope, None, True),
                          transaction=True)
    assert state is not None and state.by_job == job.id
    return state


def clock(moment: datetime) -> str:
    """HH:MM:SS on this machine's clock (what the CLI prints; with the date on another day)."""
    return moment.astimezone().strftime("%H:%M:%S")


@pytest.fixture
def held(queue: Queue) -> dict[str, Any]:
    """Queue `partner` backed off as a whole, two keys of `crawl` backed off (a third key
    free), and budget `openai` (declared; queue `embeddings` names it) backed off."""
    queue.sync_budgets("ai", [BudgetDefinition("openai", max_active=5)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="partner")) for _ in range(2)])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="crawl", concurrency_key=key))
                        for key in ("a", "b", "c")])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="embeddings", budget="openai"))
                        for _ in range(2)])
    found = {"partner": back_off(queue, "partner", "queue"),
             "a": back_off(queue, "crawl", "key"), "b": back_off(queue, "crawl", "key"),
             "openai": back_off(queue, "embeddings", "budget")}
    assert (found["a"].key, found["b"].key) == ("a", "b")
    assert len(queue.backoffs()) == 4
    return found


def test_queues_say_what_is_backed_off_in_text_and_json(database_url: str, queue: Queue,
                                                        held: dict[str, Any]) -> None:
    rows = {row["queue"]: row for row in ok_json(database_url, "queues")}
    partner = rows["partner"]["backoffs"]
    assert [(b["scope"], b["name"], b["by_job"]) for b in partner] == [
        ("queue", "partner", held["partner"].by_job)]
    assert datetime.fromisoformat(partner[0]["until"]) == held["partner"].until
    assert sorted((b["scope"], b["key"]) for b in rows["crawl"]["backoffs"]) == [
        ("key", "a"), ("key", "b")]
    assert [(b["scope"], b["name"]) for b in rows["embeddings"]["backoffs"]] == [
        ("budget", "openai")]

    table = cli(database_url, "queues")
    assert table.exit_code == 0, table.output
    lines = {line.split()[1]: line for line in table.stdout.splitlines()
             if line.strip().startswith("│") and len(line.split()) > 1}
    p = held["partner"]
    assert f"backed off until {clock(p.until)} by job {p.by_job}" in lines["partner"]
    latest = max(held["a"].until, held["b"].until)
    assert f"2 keys backed off (until {clock(latest)} at the latest)" in lines["crawl"]
    o = held["openai"]
    assert (f"budget openai backed off until {clock(o.until)} by job {o.by_job}"
            in lines["embeddings"])


def test_budgets_say_what_is_backed_off_in_text_and_json(database_url: str, queue: Queue,
                                                         held: dict[str, Any]) -> None:
    [row] = ok_json(database_url, "budgets")
    o = held["openai"]
    assert row["name"] == "openai"
    assert (row["backoff"]["scope"], row["backoff"]["by_job"]) == ("budget", o.by_job)
    assert datetime.fromisoformat(row["backoff"]["until"]) == o.until
    table = cli(database_url, "budgets")
    assert table.exit_code == 0, table.output
    assert "backoff" in table.stdout.splitlines()[2]  # the column, in the header
    assert f"backed off until {clock(o.until)} by job {o.by_job}" in table.stdout

    queue.clear_budget_backoff("openai")
    [row] = ok_json(database_url, "budgets")
    assert row["backoff"] is None
    assert "backed off" not in cli(database_url, "budgets").stdout


def test_top_has_a_line_per_backoff(database_url: str, queue: Queue,
                                    held: dict[str, Any]) -> None:
    result = cli(database_url, "top", "--iterations", "1")
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.stdout.splitlines()
             if line.strip().startswith("backed off:")]
    p, a, b, o = held["partner"], held["a"], held["b"], held["openai"]
    assert sorted(lines) == sorted([
        f"backed off: queue partner until {clock(p.until)} by job {p.by_job}",
        f"backed off: queue crawl key a until {clock(a.until)} by job {a.by_job}",
        f"backed off: queue crawl key b until {clock(b.until)} by job {b.by_job}",
        f"backed off: budget openai until {clock(o.until)} by job {o.by_job}",
    ])
    snapshot = json.loads(cli(database_url, "top", "--iterations", "1", "--json").stdout)
    assert sorted((b["scope"], b["name"], b["key"]) for b in snapshot["backoffs"]) == [
        ("budget", "openai", None), ("key", "crawl", "a"), ("key", "crawl", "b"),
        ("queue", "partner", None)]


def test_clear_backoff_of_a_key_then_the_queue_then_nothing(
        database_url: str, queue: Queue, held: dict[str, Any]) -> None:
    a = held["a"]
    result = cli(database_url, "queues", "clear-backoff", "crawl", "--key", "a")
    assert result.exit_code == 0, result.output
    assert (f"cleared: key 'a' of queue 'crawl' backed off until {clock(a.until)} "
            f"by job {a.by_job}") in result.stdout
    assert "no namespace owns queue crawl" in result.stdout  # whose queue it is, as pause says
    assert {(b.scope, b.key) for b in queue.backoffs() if b.name == "crawl"} == {("key", "b")}
    [job] = queue.claim("crawl", 1, 30)  # key a starts again; b is still backed off
    assert job.concurrency_key == "a"

    cleared = ok_json(database_url, "queues", "clear-backoff", "crawl")
    assert [(b["scope"], b["key"], b["by_job"]) for b in cleared["cleared"]] == [
        ("key", "b", held["b"].by_job)]
    again = cli(database_url, "queues", "clear-backoff", "crawl")
    assert again.exit_code == 0
    assert "no backoff in force on queue 'crawl'" in again.stdout
    assert ok_json(database_url, "queues", "clear-backoff", "crawl") == {"cleared": []}
    key_gone = cli(database_url, "queues", "clear-backoff", "crawl", "--key", "a")
    assert key_gone.exit_code == 0
    assert "no backoff in force on key 'a' of queue 'crawl'" in key_gone.stdout

    p = held["partner"]
    assert queue.claim("partner", 1, 30) == []
    result = cli(database_url, "queues", "clear-backoff", "partner")
    assert result.exit_code == 0, result.output
    assert (f"cleared: queue 'partner' backed off until {clock(p.until)} by job {p.by_job}"
            in result.stdout)
    assert len(queue.claim("partner", 2, 30)) == 2
    assert [b.scope for b in queue.backoffs()] == ["budget"]


def test_clear_backoff_of_a_budget(database_url: str, queue: Queue,
                                   held: dict[str, Any]) -> None:
    o = held["openai"]
    assert queue.claim("embeddings", 1, 30) == []
    result = cli(database_url, "budgets", "clear-backoff", "openai")
    assert result.exit_code == 0, result.output
    assert (f"cleared: budget 'openai' backed off until {clock(o.until)} by job {o.by_job}"
            in result.stdout)
    assert len(queue.claim("embeddings", 2, 30)) == 2
    assert "budget" not in {b.scope for b in queue.backoffs()}
    again = cli(database_url, "budgets", "clear-backoff", "openai")
    assert again.exit_code == 0 and "no backoff in force on budget 'openai'" in again.stdout
    assert ok_json(database_url, "budgets", "clear-backoff", "openai") == {"cleared": []}


def test_a_backoff_that_had_ended_is_said_to_have_ended(database_url: str,
                                                        queue: Queue) -> None:
    """The clear also deletes a row whose end has passed and that housekeeping has not
    deleted yet: the verb does not pass it off as an early end."""
    queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    back_off(queue, "q", "queue", seconds=0.05)
    queue.conn.execute("SELECT pg_sleep(0.1)")
    assert queue.backoffs() == []
    result = cli(database_url, "queues", "clear-backoff", "q")
    assert result.exit_code == 0, result.output
    assert "cleared: queue 'q' backed off until" in result.stdout
    assert "(it had already ended)" in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["queues", "clear-backoff", ""], "queue must be a string of 1-255 characters"),
    (["queues", "clear-backoff", "crawl", "--key", ""], "key must be a string of 1-255"),
    (["queues", "clear-backoff", "crawl\x00x"], "queue must not contain NUL"),
    (["queues", "clear-backoff", "x" * 256], "queue must be a string of 1-255 characters"),
    (["budgets", "clear-backoff", ""], "budget must be a string of 1-255 characters"),
    (["budgets", "clear-backoff", "open\x00ai"], "budget must not contain NUL"),
])
def test_bad_names_are_one_error_line_and_clear_nothing(
        database_url: str, queue: Queue, held: dict[str, Any], args: list[str],
        message: str) -> None:
    for as_json in ((), ("--json",)):
        result = cli(database_url, *args, *as_json)
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
        assert result.stdout == ""
    assert len(queue.backoffs()) == 4


@pytest.mark.parametrize("args", [
    ["queues", "clear-backoff"],
    ["budgets", "clear-backoff"],
    ["queues", "clear-backoff", "crawl", "--key"],
    ["budgets", "clear-backoff", "openai", "--key", "a"],   # a budget has no keys
])
def test_usage_errors_exit_2_and_clear_nothing(database_url: str, queue: Queue,
                                               held: dict[str, Any], args: list[str]) -> None:
    result = cli(database_url, *args)
    assert result.exit_code == 2, result.output
    assert len(queue.backoffs()) == 4
