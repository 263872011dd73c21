"""Reason codes (docs/design.md "Reason codes"): every code health reports is produced here by a
real cause on a real database, with the number behind it, and is gone at the first health read
after its cause ends (`backed_off`'s causes are in tests/integration/test_backoff_health.py).
`suspended` (durable jobs waiting at a sleep, a signal or their children) is in
tests/integration/test_durable_health.py.

The CLI's `health --fail-on` is driven as a probe would: exit 1 with the code present, 0 when it
is gone, 2 for a code outside the set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from workhorse import (
    BudgetDefinition,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    Queue,
    _ops,
)
from workhorse.types import REASON_CODES

RESERVED: set[str] = set()


def _codes(q: Queue, queue: str) -> dict[str, int]:
    return {r.code: r.count for r in q.health().reasons if r.queue == queue}


def _enqueue(q: Queue, queue: str, n: int, task: str = "t", **options: Any) -> list[int]:
    return q.enqueue_many([(task, {"i": i}, EnqueueOptions(queue=queue, **options))
                           for i in range(n)])


def _serve(conn: psycopg.Connection[Any], queues: list[str],
           tasks: list[str] | None = None) -> int:
    """A live supervisor's registry row serving `queues` (declaring `tasks`)."""
    worker_id = _ops.execute(conn, _ops.register_worker(
        "app", "host", os.getpid(), 1, queues, {}, tasks))
    assert worker_id is not None
    return worker_id


def test_the_set_is_stable_and_documented() -> None:
    assert REASON_CODES == (
        "no_worker", "unknown_task", "feature_level", "paused", "at_limit", "key_saturated",
        "rate_limited", "budget_full", "backed_off", "suspended", "expired", "stalled")
    design = (Path(__file__).parents[2] / "docs" / "design.md").read_text(encoding="utf-8")
    section = design.split("### Reason codes", 1)[1].split("\n### ", 1)[0]
    for code in REASON_CODES:
        assert f"| `{code}` |" in section, code


def test_no_worker_until_a_live_supervisor_serves_the_queue(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _enqueue(queue, "mail", 3)
    assert _codes(queue, "mail") == {"no_worker": 3}
    _serve(conn, ["other"])
    assert _codes(queue, "mail") == {"no_worker": 3}  # alive, but not serving mail
    gone = _serve(conn, ["mail"])
    assert _codes(queue, "mail") == {}
    conn.execute("UPDATE workhorse.workers SET last_seen = now() - interval '1 hour' "
                 "WHERE id = %s", (gone,))
    assert _codes(queue, "mail") == {"no_worker": 3}  # serving mail, but not seen for an hour
    _serve(conn, ["mail"])
    assert _codes(queue, "mail") == {}


def test_unknown_task_until_a_serving_app_declares_it(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _enqueue(queue, "mail", 2, task="mail.send")
    _enqueue(queue, "mail", 1, task="mail.known")
    worker = _serve(conn, ["mail"], ["mail.known"])
    assert _codes(queue, "mail") == {"unknown_task": 2}
    conn.execute("UPDATE workhorse.workers SET tasks = %s WHERE id = %s",
                 (["mail.known", "mail.send"], worker))
    assert _codes(queue, "mail") == {}


def test_feature_level_while_the_queue_needs_a_newer_claim(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["mail"])
    _enqueue(queue, "mail", 4)
    # What a newer release's enqueue does when it uses a feature this release does not know.
    conn.execute("INSERT INTO workhorse.queue_levels (queue, feature_level) VALUES ('mail', %s)",
                 (_ops.FEATURE_LEVEL + 1,))
    assert _codes(queue, "mail") == {"feature_level": 4}
    conn.execute("DELETE FROM workhorse.queue_levels WHERE queue = 'mail'")
    assert _codes(queue, "mail") == {}


def test_paused_until_resumed_with_or_without_work(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["mail"])
    queue.pause("mail")
    assert _codes(queue, "mail") == {"paused": 0}
    _enqueue(queue, "mail", 5)
    assert _codes(queue, "mail") == {"paused": 5}
    queue.resume("mail")
    assert _codes(queue, "mail") == {}


def test_at_limit_while_max_active_is_in_use_and_work_waits(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["mail"])
    queue.sync_concurrency_policies("app", [ConcurrencyPolicyDefinition("mail", max_active=2)])
    _enqueue(queue, "mail", 5)
    first, second = queue.claim("mail", 5, 60)
    assert _codes(queue, "mail") == {"at_limit": 3}
    queue.complete(first.id, first.fence)
    assert _codes(queue, "mail") == {}
    # An override that lowers the limit below what runs holds the work back again.
    queue.override_policy("mail", max_active=1)
    assert _codes(queue, "mail") == {"at_limit": 3}
    queue.complete(second.id, second.fence)
    assert _codes(queue, "mail") == {}


def test_key_saturated_counts_keys(conn: psycopg.Connection[Any], queue: Queue) -> None:
    _serve(conn, ["mail"])
    queue.sync_concurrency_policies("app", [
        ConcurrencyPolicyDefinition("mail", max_active=10, max_active_per_key=1)])
    for key in ("a", "b", "c"):
        _enqueue(queue, "mail", 2, concurrency_key=key)
    claimed = queue.claim("mail", 10, 60)
    assert len(claimed) == 3
    assert _codes(queue, "mail") == {"key_saturated": 3}
    for job in claimed[:2]:
        queue.complete(job.id, job.fence)
    assert _codes(queue, "mail") == {"key_saturated": 1}
    queue.complete(claimed[2].id, claimed[2].fence)
    assert _codes(queue, "mail") == {}


def test_rate_limited_while_out_of_starts(conn: psycopg.Connection[Any], queue: Queue) -> None:
    _serve(conn, ["mail"])
    queue.sync_concurrency_policies("app", [
        ConcurrencyPolicyDefinition("mail", rate_limit="2/h")])
    _enqueue(queue, "mail", 5)
    assert len(queue.claim("mail", 5, 60)) == 2
    reasons = {r.code: r for r in queue.health().reasons if r.queue == "mail"}
    assert set(reasons) == {"rate_limited"} and reasons["rate_limited"].count == 3
    assert "2/h" in reasons["rate_limited"].detail
    queue.sync_concurrency_policies("app", [
        ConcurrencyPolicyDefinition("mail", rate_limit="100/s")])
    assert _codes(queue, "mail") == {}


def test_budget_full_on_the_budget_and_each_queue_it_holds(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["a", "b"])
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=1)])
    _enqueue(queue, "a", 2, budget="api")
    _enqueue(queue, "b", 1, budget="api")
    (job,) = queue.claim("a", 5, 60)
    health = queue.health()
    (budget,) = [b for b in health.budgets if b.name == "api"]
    assert [(r.code, r.count, r.queue) for r in budget.reasons] == [("budget_full", 2, None)]
    assert {(r.queue, r.code, r.count) for r in health.reasons} == {
        ("a", "budget_full", 2), ("b", "budget_full", 2)}
    queue.complete(job.id, job.fence)
    health = queue.health()
    assert health.reasons == [] and all(b.reasons == [] for b in health.budgets)


def test_stalled_while_an_expired_lease_awaits_its_reclaim(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["mail"])
    _enqueue(queue, "mail", 1)
    (job,) = queue.claim("mail", 1, 1.5)
    assert _codes(queue, "mail") == {}  # (read well within the lease, even on a busy machine)
    time.sleep(1.8)  # the worker "died": nobody renews the lease
    assert _codes(queue, "mail") == {"stalled": 1}
    (again,) = queue.claim("mail", 1, 60)  # the next claim takes it again
    assert again.id == job.id and again.attempts == 2
    assert _codes(queue, "mail") == {}


def test_expired_while_jobs_of_the_last_hour_ended_past_their_bound(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["mail"])
    late = _enqueue(queue, "mail", 2, expires=0.1)
    time.sleep(0.2)
    assert queue.claim("mail", 5, 60) == []  # the claim ends them, starts none
    assert _codes(queue, "mail") == {"expired": 2}
    # An hour later the cause is over: the code is gone (the jobs stay, counted in depth).
    conn.execute("UPDATE workhorse.jobs SET finished_at = now() - interval '61 minutes'"
                 " WHERE id = ANY(%s)", (late,))
    assert _codes(queue, "mail") == {}
    assert queue.health().depth["expired"] == 2


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "health", *args],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "WORKHORSE_AUTO_MIGRATE": "0"})


def test_health_fail_on_is_a_probe(database_url: str, queue: Queue) -> None:
    queue.pause("mail")
    done = _cli(database_url, "--fail-on", "paused,stalled", "--json")
    assert done.returncode == 1, done.stderr
    assert [(r["queue"], r["code"]) for r in json.loads(done.stdout)["reasons"]] == [
        ("mail", "paused")]
    assert _cli(database_url, "--fail-on", "stalled").returncode == 0
    queue.resume("mail")
    done = _cli(database_url, "--fail-on", "paused")
    assert done.returncode == 0, done.stderr
    bad = _cli(database_url, "--fail-on", "pausd")
    assert bad.returncode == 2 and "unknown reason code pausd" in bad.stderr
    for code in REASON_CODES:
        assert code in bad.stderr or code in RESERVED
