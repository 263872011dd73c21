"""What a namespace protects (issue 24, item 7): its synced desired state (policies and
schedules), which only its own app's sync creates, changes or prunes. It does not guard the
queue's controls or jobs, so every operator action says which namespace owns the queue it acts
on. The real CLI on a real database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_cli import cli

from workhorse import (
    App,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    PolicyConflictError,
    Queue,
)
from workhorse.queue import error_document


@pytest.fixture
def jobs(queue: Queue) -> dict[str, int]:
    """Queue `mail` is owned by namespace `billing` (one failed job, one ready); queue `loose`
    by none (one ready job)."""
    queue.sync_concurrency_policies(
        "billing", [ConcurrencyPolicyDefinition(queue="mail", max_active=5)])
    queue.enqueue("billing.send", None, EnqueueOptions(queue="mail", max_attempts=1))
    [failing] = queue.claim("mail", 1, 30)
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        queue.fail(failing.id, failing.fence, error_document(exc))
    return {
        "failed": failing.id,
        "mail": queue.enqueue("billing.send", None, EnqueueOptions(queue="mail")),
        "loose": queue.enqueue("other.thing", None, EnqueueOptions(queue="loose")),
    }


def ok(database_url: str, *args: str) -> str:
    result = cli(database_url, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("action", [
    ["queues", "pause"], ["queues", "resume"],
    ["policies", "override", "--max-active", "1"], ["policies", "clear-override"],
])
def test_queue_actions_name_the_owning_namespace(
    database_url: str, jobs: dict[str, int], action: list[str]
) -> None:
    verb, rest = action[:2], action[2:]
    out = ok(database_url, *verb, "mail", *rest)
    assert "namespace billing owns queue mail" in out
    loose = ok(database_url, *verb, "loose", *rest)
    assert "no namespace owns queue loose" in loose


def test_queue_action_json_is_unchanged_and_the_owner_goes_to_stderr(
    database_url: str, jobs: dict[str, int]
) -> None:
    result = cli(database_url, "queues", "pause", "mail", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["paused"] is True
    assert "namespace billing owns queue mail" in result.stderr


def test_cancel_and_retry_name_the_namespaces_of_the_jobs(
    database_url: str, jobs: dict[str, int]
) -> None:
    out = ok(database_url, "jobs", "cancel", str(jobs["mail"]), str(jobs["loose"]))
    assert "1 in queue mail, owned by namespace billing" in out
    assert "1 in queue loose, owned by no namespace" in out

    retried = ok(database_url, "jobs", "retry", str(jobs["failed"]))
    assert "1 in queue mail, owned by namespace billing" in retried


def test_app_sync_touches_only_its_own_namespace(database_url: str, queue: Queue) -> None:
    other = App("other", database_url=database_url)

    @other.task(name="other.work", queue="theirs", max_active=2)
    def work() -> None: ...

    @other.periodic(every="1h", name="other.tick", queue="theirs")
    def tick() -> None: ...

    other.sync()
    before = (queue.list_concurrency_policies(), queue.list_schedules())

    mine = App("mine", database_url=database_url)

    @mine.task(name="mine.work", queue="ours", max_active=3)
    def mine_work() -> None: ...

    try:
        mine.sync(prune=True)  # prunes its own namespace only
        assert [p.queue for p in queue.list_concurrency_policies("mine")] == ["ours"]
        assert (queue.list_concurrency_policies("other"), queue.list_schedules("other")) == (
            [p for p in before[0] if p.namespace == "other"],
            [s for s in before[1] if s.namespace == "other"],
        )

        # Declaring another namespace's queue is a conflict, and writes nothing.
        @mine.task(name="mine.steal", queue="theirs", max_active=99)
        def steal() -> None: ...

        @mine.task(name="mine.more", queue="ours-too", max_active=1)
        def more() -> None: ...

        with pytest.raises(PolicyConflictError):
            mine.sync()
        stored: dict[str, Any] = {p.queue: p for p in queue.list_concurrency_policies()}
        assert stored["theirs"].namespace == "other" and stored["theirs"].max_active == 2
        assert "ours-too" not in stored
    finally:
        mine.close()
        other.close()
