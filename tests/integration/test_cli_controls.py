"""`workhorse queues`, `queues pause|resume`, `policies override|clear-override`: against a real
database, with --json, and the exit codes (0, 1 for an error in one line, 2 for a usage error)."""

from __future__ import annotations

from typing import Any

import pytest
from test_cli import cli, ok_json

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue


def _policies_json(database_url: str) -> Any:
    return ok_json(database_url, "policies")


def test_queues_lists_every_queue_with_depth_and_limits(database_url: str, queue: Queue) -> None:
    queue.sync_concurrency_policies("billing", [
        ConcurrencyPolicyDefinition("mail", 20, 3, rate_limit="100/m", rate_limit_per_key="10/m")])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="mail")), ("t", {}, EnqueueOptions(
        queue="plain"))])
    rows = {row["queue"]: row for row in ok_json(database_url, "queues")}
    assert set(rows) == {"mail", "plain"}
    assert rows["mail"]["rate_limit"] == "100/m" and rows["mail"]["rate_limit_per_key"] == "10/m"
    assert rows["mail"]["depth"]["ready"] == 1 and rows["plain"]["max_active"] is None
    table = cli(database_url, "queues")
    assert table.exit_code == 0 and "mail" in table.stdout and "plain" in table.stdout


def test_pause_and_resume(database_url: str, queue: Queue) -> None:
    queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    paused = ok_json(database_url, "queues", "pause", "q")
    assert paused["paused"] is True
    assert queue.claim("q", 1, 30) == []
    assert cli(database_url, "queues", "resume", "q").exit_code == 0
    assert len(queue.claim("q", 1, 30)) == 1


def test_override_and_clear(database_url: str, queue: Queue) -> None:
    queue.sync_concurrency_policies("billing", [ConcurrencyPolicyDefinition("mail", 20, 3)])
    control = ok_json(database_url, "policies", "override", "mail", "--max-active", "2",
                      "--rate-limit", "5/10s", "--for", "1h")
    assert control["override"]["max_active"] == 2
    assert control["override"]["rate_limit"] == "5/10s"
    assert control["override"]["expires_at"] is not None
    [health] = queue.health().policies
    assert (health.max_active, health.max_active_per_key, health.rate_limit) == (2, 3, "5/10s")
    text = cli(database_url, "policies", "clear-override", "mail")
    assert text.exit_code == 0 and "override" not in text.stdout
    assert queue.health().policies[0].override is None
    assert [p["queue"] for p in _policies_json(database_url)] == ["mail"]


@pytest.mark.parametrize("args", [
    ["policies", "override", "mail"],                             # no field
    ["policies", "override", "mail", "--rate-limit", "ten/m"],
    ["policies", "override", "mail", "--rate-limit", "0/s"],
    ["policies", "override", "mail", "--max-active", "0"],
    ["policies", "override", "mail", "--max-active", "2", "--for", "soon"],
    ["queues", "pause"],
])
def test_bad_controls_are_usage_errors_and_write_nothing(
    database_url: str, queue: Queue, args: list[str]
) -> None:
    result = cli(database_url, *args)
    assert result.exit_code == 2, result.output
    assert queue.list_queues() == []


def test_jobs_prune(database_url: str, queue: Queue) -> None:
    ids = queue.enqueue_many([("t", {}, EnqueueOptions(queue="p")) for _ in range(3)])
    for job in queue.claim("p", 3, 30):
        queue.complete(job.id, job.fence)
    queue.conn.execute("UPDATE workhorse.jobs SET expires_at = now() - interval '1s'"
                       " WHERE id = %s", (ids[0],))
    assert ok_json(database_url, "jobs", "prune") == {"pruned": 1}
    assert ok_json(database_url, "jobs", "prune", "--older-than", "0s",
                   "--status", "succeeded") == {"pruned": 2}
    assert queue.list_jobs() == []
    assert cli(database_url, "jobs", "prune", "--status", "held").exit_code == 2
    assert cli(database_url, "jobs", "prune", "--older-than", "soon").exit_code == 2
