"""Back-pressure in health (docs/design.md "Back-pressure", "Health", "Reason codes"): a backoff
set through the real path (a claimed job's backoff under its fence, or a handler raising
`workhorse.Backoff` under drain) shows in `PolicyHealth.backed_off_until` / `backed_off_by` /
`backed_off_keys`, in `BudgetHealth.backed_off_until` / `backed_off_by`, and as the reason code
`backed_off` while it holds ready work back; everything is gone at the first health read after
it ends or an operator clears it. `workhorse health` prints it, `--json` carries the fields and
`--fail-on backed_off` is a probe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from workhorse import (
    App,
    Backoff,
    BudgetDefinition,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    Job,
    PolicyHealth,
    Queue,
    QueueHealth,
    _ops,
)
from workhorse.testing import drain
from workhorse.types import BackoffState, BudgetHealth


def _enqueue(q: Queue, queue: str, n: int, **options: Any) -> list[int]:
    return q.enqueue_many([("t", {"i": i}, EnqueueOptions(queue=queue, **options))
                           for i in range(n)])


def _serve(conn: psycopg.Connection[Any], queues: list[str]) -> None:
    """A live supervisor serving `queues`, so that `no_worker` stays out of the codes."""
    _ops.execute(conn, _ops.register_worker("app", "host", os.getpid(), 1, queues, {}, None))


def _backoff(q: Queue, job: Job, seconds: float, scope: str | None, *, budget: str | None = None,
             release: bool = True) -> BackoffState:
    """What the worker's recorder sends for a job that backed off (`raise Backoff` when
    `release`, `current_job().backoff()` when not)."""
    _, state = q._run(_ops.backoff(job.id, job.fence, seconds, scope, budget, release),
                      transaction=True)
    assert state is not None
    return state


def _policy(health: QueueHealth, queue: str) -> PolicyHealth | None:
    found = [p for p in health.policies if p.queue == queue]
    return found[0] if found else None


def _budget(health: QueueHealth, name: str) -> BudgetHealth | None:
    found = [b for b in health.budgets if b.name == name]
    return found[0] if found else None


def _codes(health: QueueHealth, queue: str) -> dict[str, int]:
    return {r.code: r.count for r in health.reasons if r.queue == queue}


def test_a_queue_backed_off_has_a_row_its_fields_and_the_code_until_cleared(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["api"])
    _enqueue(queue, "api", 4)
    (job,) = queue.claim("api", 1, 60)
    state = _backoff(queue, job, 60, "queue")
    assert (state.scope, state.name, state.key) == ("queue", "api", None)

    health = queue.health()
    # No policy, no pause, no override: the backoff's control row alone lists the queue.
    p = _policy(health, "api")
    assert p is not None
    assert (p.namespace, p.paused, p.override, p.max_active) == (None, False, None, None)
    assert (p.backed_off_until, p.backed_off_by, p.backed_off_keys) == (state.until, job.id, [])
    assert (p.blocked_ready, p.backed_off_ready) == (4, 4)  # the released job is ready again
    (reason,) = [r for r in health.reasons if r.queue == "api"]
    assert (reason.code, reason.count) == ("backed_off", 4)
    assert reason.detail.startswith("backed off until ")
    assert f"by job {job.id} (scope queue;" in reason.detail
    assert queue.claim("api", 5, 60) == []  # what health says is what the claim does

    cleared = queue.clear_backoff("api")
    assert [b.scope for b in cleared] == ["queue"]
    health = queue.health()
    assert _policy(health, "api") is None  # the control row went with its last backoff
    assert _codes(health, "api") == {}


def test_a_queue_backoff_with_no_ready_work_holds_nothing_back(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["api"])
    _enqueue(queue, "api", 1)
    (job,) = queue.claim("api", 1, 60)
    # current_job().backoff(): the job runs on, and nothing else of the queue is ready.
    state = _backoff(queue, job, 60, "queue", release=False)
    health = queue.health()
    p = _policy(health, "api")
    assert p is not None and (p.backed_off_until, p.backed_off_by) == (state.until, job.id)
    assert p.backed_off_ready == 0
    assert _codes(health, "api") == {}  # in force, but it holds no ready work back
    _enqueue(queue, "api", 2)
    assert _codes(queue.health(), "api") == {"backed_off": 2}


def test_a_queue_backoff_hides_at_limit_and_at_limit_returns_once_it_is_cleared(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["mail"])
    queue.sync_concurrency_policies("app", [ConcurrencyPolicyDefinition("mail", max_active=1)])
    _enqueue(queue, "mail", 3)
    (job,) = queue.claim("mail", 5, 60)
    assert _codes(queue.health(), "mail") == {"at_limit": 2}
    _backoff(queue, job, 60, "queue", release=False)  # it runs on: the queue is still full
    health = queue.health()
    # Nothing starts before the backoff ends, whatever the limit: the backoff is the reason.
    assert _codes(health, "mail") == {"backed_off": 2}
    p = _policy(health, "mail")
    assert p is not None and p.namespace == "app" and p.backed_off_by == job.id
    queue.clear_backoff("mail")
    health = queue.health()
    assert _codes(health, "mail") == {"at_limit": 2}
    p = _policy(health, "mail")
    assert p is not None and (p.backed_off_until, p.backed_off_by) == (None, None)


def test_key_backoffs_list_the_keys_and_count_their_ready_jobs(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["k"])
    _enqueue(queue, "k", 2, concurrency_key="a")
    _enqueue(queue, "k", 3, concurrency_key="b")
    _enqueue(queue, "k", 1, concurrency_key="c")
    (first,) = queue.claim("k", 1, 60)
    assert first.concurrency_key == "a"
    a = _backoff(queue, first, 60, "key")
    assert (a.scope, a.name, a.key) == ("key", "k", "a")

    health = queue.health()
    p = _policy(health, "k")
    assert p is not None
    assert (p.backed_off_until, p.backed_off_by) == (None, None)  # the queue itself is not
    assert p.backed_off_keys == [BackoffState("key", "k", "a", a.until, first.id)]
    assert (p.backed_off_ready, p.blocked_ready) == (2, 2)  # a's two; b's and c's may start
    (reason,) = [r for r in health.reasons if r.queue == "k"]
    assert (reason.code, reason.count) == ("backed_off", 2)
    assert f"by job {first.id} (scope key a;" in reason.detail

    # The claim passes key a over: b's and c's start, a's stay held back.
    started = queue.claim("k", 10, 60)
    assert sorted(j.concurrency_key or "" for j in started) == ["b", "b", "b", "c"]
    b_job = next(j for j in started if j.concurrency_key == "b")
    _enqueue(queue, "k", 1, concurrency_key="b")
    b = _backoff(queue, b_job, 30, "key", release=False)
    health = queue.health()
    p = _policy(health, "k")
    assert p is not None
    # Soonest end first: b's (30 s) before a's (60 s).
    assert [(k.key, k.by_job) for k in p.backed_off_keys] == [("b", b_job.id), ("a", first.id)]
    assert p.backed_off_keys[0].until == b.until
    (reason,) = [r for r in health.reasons if r.queue == "k"]
    assert (reason.code, reason.count) == ("backed_off", 3)
    assert f"by job {b_job.id} (scope key b, and 1 more keys;" in reason.detail

    assert [x.key for x in queue.clear_backoff("k", key="a")] == ["a"]
    p = _policy(queue.health(), "k")
    assert p is not None and [k.key for k in p.backed_off_keys] == ["b"]
    assert _codes(queue.health(), "k") == {"backed_off": 1}
    queue.clear_backoff("k", key="b")
    health = queue.health()
    assert _codes(health, "k") == {}
    p = _policy(health, "k")
    assert p is None or (p.backed_off_keys, p.backed_off_ready) == ([], 0)


def test_the_code_is_gone_at_the_first_read_after_the_backoff_ends(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["api", "k"])
    _enqueue(queue, "api", 2)
    _enqueue(queue, "k", 2, concurrency_key="a")
    (job,) = queue.claim("api", 1, 60)
    (keyed,) = queue.claim("k", 1, 60)
    _backoff(queue, job, 1.0, "queue")
    _backoff(queue, keyed, 1.0, "key")
    health = queue.health()
    assert (_codes(health, "api"), _codes(health, "k")) == ({"backed_off": 2}, {"backed_off": 2})
    time.sleep(1.2)  # no housekeeping ran: the rows are there, past
    assert conn.execute("SELECT count(*) FROM workhorse.backoffs").fetchone() == (2,)
    health = queue.health()
    assert (_codes(health, "api"), _codes(health, "k")) == ({}, {})
    for name in ("api", "k"):
        p = _policy(health, name)
        assert p is not None  # the control row keeps its past stamp until housekeeping
        assert (p.backed_off_until, p.backed_off_by, p.backed_off_keys) == (None, None, [])
        assert (p.backed_off_ready, p.blocked_ready) == (0, 0)


def test_a_budget_backoff_on_the_budget_and_its_queues_instead_of_budget_full(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["a", "b"])
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=1)])
    _enqueue(queue, "a", 2, budget="api")
    _enqueue(queue, "b", 1, budget="api")
    (job,) = queue.claim("a", 5, 60)
    assert {(r.queue, r.code) for r in queue.health().reasons} == {
        ("a", "budget_full"), ("b", "budget_full")}
    # It runs on (current_job().backoff()): the budget is full and backed off.
    state = _backoff(queue, job, 60, None, release=False)
    assert (state.scope, state.name) == ("budget", "api")

    health = queue.health()
    budget = _budget(health, "api")
    assert budget is not None
    assert (budget.backed_off_until, budget.backed_off_by) == (state.until, job.id)
    assert budget.blocked_ready == 2
    (reason,) = budget.reasons
    assert (reason.code, reason.count, reason.queue) == ("backed_off", 2, None)
    assert f"by job {job.id} (scope budget api;" in reason.detail
    # Each queue of the budget has it, counted as budget_full counts: the budget's ready jobs.
    assert {(r.queue, r.code, r.count) for r in health.reasons} == {
        ("a", "backed_off", 2), ("b", "backed_off", 2)}
    for name in ("a", "b"):  # a budget's backoff is not the queues' own
        p = _policy(health, name)
        assert p is not None and (p.backed_off_until, p.backed_off_keys) == (None, [])

    assert [b.name for b in queue.clear_budget_backoff("api")] == ["api"]
    health = queue.health()
    budget = _budget(health, "api")
    assert budget is not None and (budget.backed_off_until, budget.backed_off_by) == (None, None)
    assert [(r.code, r.count) for r in budget.reasons] == [("budget_full", 2)]
    queue.complete(job.id, job.fence)
    health = queue.health()
    assert health.reasons == [] and all(b.reasons == [] for b in health.budgets)


def test_a_released_budget_backoff_and_an_undeclared_budget_have_rows(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    _serve(conn, ["a"])
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=5)])
    _enqueue(queue, "a", 3, budget="api")
    first, second = queue.claim("a", 2, 60)
    on_api = _backoff(queue, first, 60, "budget")  # raised: the job is ready again
    # budget= names any budget, declared or not, with no job naming it.
    ghost = _backoff(queue, second, 60, "budget", budget="ghost", release=False)
    health = queue.health()
    api = _budget(health, "api")
    assert api is not None and (api.backed_off_until, api.backed_off_by) == (on_api.until,
                                                                               first.id)
    assert (api.active_units, api.ready, api.blocked_ready) == (1, 2, 2)  # not full: backed off
    assert [(r.code, r.count) for r in api.reasons] == [("backed_off", 2)]
    other = _budget(health, "ghost")
    assert other is not None
    assert (other.namespace, other.max_active, other.ready) == (None, None, 0)
    assert (other.backed_off_until, other.backed_off_by) == (ghost.until, second.id)
    assert other.reasons == []  # nothing of it is ready: it holds nothing back
    assert _codes(health, "a") == {"backed_off": 2}
    queue.clear_budget_backoff("ghost")
    assert _budget(queue.health(), "ghost") is None


def test_a_handler_raising_backoff_under_drain_shows_in_health(
    database_url: str, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    app = App("bo", database_url=database_url)
    calls: list[str] = []

    @app.task(name="call", queue="partner", concurrency_key=lambda tenant: tenant)
    def call(tenant: str) -> None:
        calls.append(tenant)
        if tenant == "acme":
            raise Backoff("60s", scope="key")

    try:
        for tenant in ("acme", "acme", "zeta"):
            call.delay(tenant)
        _serve(conn, ["partner"])
        # drain runs what may start, then waits out the backoff that holds acme's jobs back (as
        # workers do), past its own timeout here: acme's jobs stay ready.
        with pytest.raises(TimeoutError):
            drain(app, timeout=3)
    finally:
        app.close()
    assert calls == ["acme", "zeta"]
    health = queue.health()
    p = _policy(health, "partner")
    assert p is not None and [(k.key, k.scope) for k in p.backed_off_keys] == [("acme", "key")]
    assert p.backed_off_keys[0].by_job is not None
    assert _codes(health, "partner") == {"backed_off": 2}


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "health", *args],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "WORKHORSE_AUTO_MIGRATE": "0", "COLUMNS": "200"})


@pytest.fixture
def backed_off(conn: psycopg.Connection[Any], queue: Queue) -> Iterator[dict[str, Any]]:
    """A queue backed off, a key of another backed off and a budget backed off, each holding a
    ready job back."""
    _serve(conn, ["q", "k", "b"])
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=5)])
    _enqueue(queue, "q", 2)
    _enqueue(queue, "k", 2, concurrency_key="acme")
    _enqueue(queue, "b", 2, budget="api")
    jobs = {name: queue.claim(name, 1, 60)[0] for name in ("q", "k", "b")}
    states = {name: _backoff(queue, job, 120, scope)
              for (name, job), scope in zip(jobs.items(), ("queue", "key", "budget"),
                                            strict=True)}
    yield {"jobs": jobs, "states": states}


def test_health_json_has_the_fields_and_fail_on_is_a_probe(
    database_url: str, queue: Queue, backed_off: dict[str, Any]
) -> None:
    jobs, states = backed_off["jobs"], backed_off["states"]
    done = _cli(database_url, "--json", "--fail-on", "backed_off")
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    policies = {p["queue"]: p for p in out["policies"]}
    assert policies["q"]["backed_off_until"] == states["q"].until.isoformat()
    assert policies["q"]["backed_off_by"] == jobs["q"].id
    assert policies["q"]["backed_off_keys"] == []
    assert policies["k"]["backed_off_until"] is None
    assert policies["k"]["backed_off_keys"] == [{
        "scope": "key", "name": "k", "key": "acme", "until": states["k"].until.isoformat(),
        "by_job": jobs["k"].id}]
    (budget,) = [b for b in out["budgets"] if b["name"] == "api"]
    assert (budget["backed_off_until"], budget["backed_off_by"]) == (
        states["b"].until.isoformat(), jobs["b"].id)
    assert [r["code"] for r in budget["reasons"]] == ["backed_off"]
    assert sorted((r["queue"], r["code"], r["count"]) for r in out["reasons"]) == [
        ("b", "backed_off", 2), ("k", "backed_off", 2), ("q", "backed_off", 2)]

    assert _cli(database_url, "--fail-on", "paused").returncode == 0
    queue.clear_backoff("q")
    queue.clear_backoff("k")
    assert _cli(database_url, "--fail-on", "backed_off").returncode == 1  # the budget's still
    queue.clear_budget_backoff("api")
    done = _cli(database_url, "--fail-on", "backed_off")
    assert done.returncode == 0, done.stdout + done.stderr


def test_health_text_says_backed_off_until_by_job(
    database_url: str, backed_off: dict[str, Any]
) -> None:
    jobs, states = backed_off["jobs"], backed_off["states"]
    done = _cli(database_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for target, key, name in (("queue q", "-", "q"), ("queue k", "acme", "k"),
                              ("budget api", "-", "b")):
        text = (f"backed off until {states[name].until.isoformat(timespec='seconds')} "
                f"by job {jobs[name].id}")
        assert any(target in line and f" {key} " in line and text in line for line in lines), (
            target, done.stdout)
    assert "backed_off" in done.stdout  # the reasons table
