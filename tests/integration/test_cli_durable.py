"""Durable execution from the shell (docs/operations.md "Durable jobs"): `workhorse jobs
signal` delivers a signal (a suspended waiter becomes ready; a keyed repeat is a duplicate,
exit 0) and refuses a bad payload, an unknown and a finished job in one line (exit 1, nothing
written); `jobs show` prints a job's steps (recorded or pending, what each waits for, results
cut short), what a suspended job waits for, and a parent's children, and `--json` has them
whole; `jobs list --status suspended` lists them; `health` shows the suspended counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from _durable_world import EVIL, LONG, QUEUE, World, suspended_world
from click.testing import CliRunner, Result

from workhorse import EnqueueOptions, Queue
from workhorse.cli import main


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    found = suspended_world(database_url)
    try:
        yield found
    finally:
        found.app.close()


def _cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--database-url", url, *args])


def _signals(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT count(*) FROM workhorse.job_signals").fetchone()[0]


def test_signal_delivers_and_a_keyed_repeat_is_a_duplicate(
        world: World, database_url: str, queue: Queue) -> None:
    sent = _cli(database_url, "jobs", "signal", str(world.waiter), "approval",
                "--payload", '{"by": "ana"}', "--key", "ticket-7")
    assert sent.exit_code == 0, sent.output
    assert sent.output.strip() == f"delivered: signal 'approval' to job {world.waiter}"
    assert queue.get_job(world.waiter).status.value == "ready"  # its wait was waiting for it
    again = _cli(database_url, "jobs", "signal", str(world.waiter), "approval",
                 "--payload", '{"by": "bob"}', "--key", "ticket-7", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output) == {"job": world.waiter, "signal": "approval",
                                        "delivered": False}
    plain = _cli(database_url, "jobs", "signal", str(world.sleeper), "later")
    assert plain.exit_code == 0 and "delivered" in plain.output  # kept for a later wait
    assert queue.get_job(world.sleeper).status.value == "suspended"  # it sleeps on


@pytest.mark.parametrize("args, says", [
    (["--payload", "{not json"], "--payload is not JSON"),
    (["--payload", "NaN"], "payload"),
    (["--payload", '"a\\u0000b"'], "NUL"),
    (["--key", "k" * 256], "key"),
], ids=["bad JSON", "NaN", "NUL in the payload", "key of 256"])
def test_signal_refuses_bad_input_in_one_line_and_writes_nothing(
        world: World, database_url: str, conn: psycopg.Connection[Any], args: list[str],
        says: str) -> None:
    before = _signals(conn)
    result = _cli(database_url, "jobs", "signal", str(world.waiter), "approval", *args)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert _signals(conn) == before
    assert Queue(conn).get_job(world.waiter).status.value == "suspended"


def test_signal_refuses_an_unknown_and_a_finished_job(
        world: World, database_url: str, conn: psycopg.Connection[Any], queue: Queue) -> None:
    done = queue.enqueue("t", {}, EnqueueOptions(queue="other"))
    (claimed,) = queue.claim("other", 1, 60)
    queue.complete(claimed.id, claimed.fence)
    before = _signals(conn)
    for job_id, says in ((10**12, "does not exist"), (done, "has finished")):
        result = _cli(database_url, "jobs", "signal", str(job_id), "approval")
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], lines
    assert _signals(conn) == before


def test_show_prints_the_steps_and_what_a_sleeping_job_waits_for(
        world: World, database_url: str) -> None:
    result = _cli(database_url, "jobs", "show", str(world.sleeper))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "suspended: sleeping at step 'cool-off' until " in out
    [charge] = [line for line in out.splitlines() if line.strip().startswith("charge")]
    assert " run " in charge and "-> {" in charge and "\"charged\"" not in charge  # jsonb order
    assert "chars)" in charge and LONG not in out  # cut short, with its length
    [cool] = [line for line in out.splitlines() if line.strip().startswith("cool-off")]
    assert " sleep " in cool and "pending" in cool and "wakes " in cool


def test_show_prints_a_waits_signal_and_a_parents_children(
        world: World, database_url: str) -> None:
    waiter = _cli(database_url, "jobs", "show", str(world.waiter)).output
    assert "suspended: waiting for signal 'approval' at step 'approve' (times out " in waiter
    [approve] = [line for line in waiter.splitlines() if line.strip().startswith("approve")]
    assert "pending" in approve and "signal approval" in approve and "times out" in approve
    patient = _cli(database_url, "jobs", "show", str(world.patient)).output
    assert f"waiting for signal {EVIL!r} at step {EVIL!r} (no timeout)" in patient
    parent = _cli(database_url, "jobs", "show", str(world.parent)).output
    assert "suspended: waiting for its children at step 'kids'" in parent
    for kid in world.kids:
        assert f"  {kid}  suspended  ops.kid  (step kids)" in parent
    kid = _cli(database_url, "jobs", "show", str(world.kids[0])).output
    assert "parent_id" in kid and str(world.parent) in kid


def test_show_json_has_the_steps_whole_and_the_children(
        world: World, database_url: str) -> None:
    result = _cli(database_url, "jobs", "show", str(world.sleeper), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["status"] == "suspended" and document["suspended_on"] == "sleep"
    assert [(s["name"], s["kind"], s["recorded_at"] is None) for s in document["steps"]] == [
        ("charge", "run", False), ("cool-off", "sleep", True)]
    assert document["steps"][0]["result"] == {"charged": 12, "note": LONG}
    assert document["steps"][1]["wake_at"] == document["wake_at"]
    parent = json.loads(_cli(database_url, "jobs", "show", str(world.parent), "--json").output)
    assert [(c["id"], c["step"], c["status"]) for c in parent["children"]] == [
        (kid, "kids", "suspended") for kid in world.kids]
    plain = json.loads(_cli(database_url, "jobs", "show", str(world.kids[0]), "--json").output)
    assert plain["parent_id"] == world.parent and plain["children"] == []


def test_list_status_suspended(world: World, database_url: str) -> None:
    result = _cli(database_url, "jobs", "list", "--status", "suspended", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert sorted(j["id"] for j in listed) == sorted(
        [world.sleeper, world.waiter, world.patient, world.parent, *world.kids])
    assert {j["suspended_on"] for j in listed} == {"sleep", "signal", "children"}
    table = _cli(database_url, "jobs", "list", "--status", "suspended")
    assert table.exit_code == 0 and table.output.count("suspended") >= 6


def test_health_shows_the_suspended_counts(world: World, database_url: str) -> None:
    document = json.loads(_cli(database_url, "health", "--json").output)
    assert document["suspended"] == {QUEUE: {"sleep": 3, "signal": 2, "children": 1}}
    assert document["depth"]["suspended"] == 6
    [reason] = [r for r in document["reasons"] if r["code"] == "suspended"]
    assert reason == {"code": "suspended", "count": 6, "queue": QUEUE, "detail":
                      "6 suspended: 3 sleeping, 2 waiting for a signal, "
                      "1 waiting for their children"}
    text = _cli(database_url, "health")
    assert text.exit_code == 0, text.output
    [row] = [line for line in text.output.splitlines()
             if QUEUE in line and line.count("│") >= 5 and "suspended" not in line]
    assert [cell.strip() for cell in row.split("│")[1:5]] == [QUEUE, "3", "2", "1"]
    assert "6 suspended: 3 sleeping" in text.output
    # Informational: it fails a probe only when asked for.
    assert _cli(database_url, "health", "--fail-on", "stalled").exit_code == 0
    assert _cli(database_url, "health", "--fail-on", "suspended").exit_code == 1
    queues = _cli(database_url, "queues", "--json")
    [row_json] = [q for q in json.loads(queues.output) if q["queue"] == QUEUE]
    assert row_json["depth"]["suspended"] == 6
