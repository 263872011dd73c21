"""Fair share and job cost, the parts outside the claim (docs/design.md "Fair share and job cost"):
`cost`, `rate_cost` and `weight` on EnqueueOptions, `@app.task` and the call site, stored on the
job; the `fairness` policy field, synced, listed and in health; the feature levels that keep a
0.2.0 claim away from a costed or fair queue (invariant 5); the refusal at enqueue of a job that
can never fit its queue's synced policy; bad input typed, nothing written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sql_names import released_statement

from workhorse import (
    App,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    InvalidPolicyError,
    Queue,
    _sql,
)


def _count(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT count(*) FROM workhorse.jobs").fetchone()[0]  # type: ignore[index]


def _levels(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute("SELECT queue, feature_level FROM workhorse.queue_levels").fetchall())


@pytest.fixture
def app(database_url: str) -> Any:
    app = App("fair", database_url=database_url)

    @app.task(name="fair.infer", queue="llm", max_active=8, fairness="key",
              concurrency_key=lambda r: r["tenant"], cost=lambda r: r["gpus"],
              rate_limit="9000/m", rate_cost=lambda r: r.get("tokens", 1))
    def infer(r: dict[str, Any]) -> None: ...

    @app.task(name="fair.plain", queue="plain", weight=2)
    def plain(n: int) -> None: ...

    @app.task(name="fair.bad_cost", queue="plain", cost=lambda n: n)
    def bad_cost(n: Any) -> None: ...

    yield app
    app.close()


def test_costs_and_weights_are_stored_on_the_job(queue, conn):
    [a, b] = queue.enqueue_many([
        ("t", {}, EnqueueOptions(queue="q", cost=3, rate_cost=40, weight=7)),
        ("t", {}, EnqueueOptions(queue="q")),
    ])
    job_a, job_b = queue.get_job(a), queue.get_job(b)
    assert job_a is not None and job_b is not None
    assert (job_a.cost, job_a.rate_cost, job_a.weight) == (3, 40, 7)
    assert (job_b.cost, job_b.rate_cost, job_b.weight) == (1, 1, 1)
    # A shared options object (one array_fill per option) stores them too.
    shared = EnqueueOptions(queue="q", cost=2, weight=5)
    ids = queue.enqueue_many([("t", {}, shared)] * 3)
    rows = conn.execute("SELECT cost, rate_cost, weight FROM workhorse.jobs WHERE id = ANY(%s)",
                        (ids,)).fetchall()
    assert rows == [(2, 1, 5)] * 3


def test_the_app_resolves_costs_at_enqueue_and_the_call_site_wins(app):
    h = app.tasks["fair.infer"].delay({"tenant": "t1", "gpus": 2, "tokens": 300})
    job = h.job()
    assert (job.concurrency_key, job.cost, job.rate_cost, job.weight) == ("t1", 2, 300, 1)
    h = app.tasks["fair.infer"].apply_async(({"tenant": "t1", "gpus": 2},), cost=1, weight=3,
                                            rate_cost=5)
    job = h.job()
    assert (job.cost, job.rate_cost, job.weight) == (1, 5, 3)
    assert app.tasks["fair.plain"].delay(1).job().weight == 2


def test_a_cost_or_rate_cost_other_than_1_raises_the_queues_level(queue, conn):
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="plain", weight=9))])
    assert _levels(conn) == {}  # a weight alone needs nothing of the claim on a FIFO queue
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="costed", cost=2))])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="rated", rate_cost=2))])
    assert _levels(conn) == {"costed": 2, "rated": 2}
    # The job rows stay level 1: completing them needs nothing new.
    assert conn.execute("SELECT DISTINCT feature_level FROM workhorse.jobs").fetchall() == [(1,)]


def test_a_fair_policy_is_synced_listed_in_health_and_stored_at_level_2(queue, conn):
    report = queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("llm", max_active=8, fairness="key"),
        ConcurrencyPolicyDefinition("mail", max_active=3),
    ])
    by_queue = {p.queue: p for p in report}
    assert by_queue["llm"].fairness == "key" and by_queue["mail"].fairness == "fifo"
    levels = dict(conn.execute("SELECT queue, feature_level FROM workhorse.policies").fetchall())
    assert levels == {"llm": 2, "mail": 1}
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="llm", concurrency_key="a", cost=3))])
    queue.claim("llm", 1, 30)
    health = {p.queue: p for p in queue.health().policies}
    assert health["llm"].fairness == "key"
    assert health["llm"].active_units == 3 and health["llm"].active == 3
    assert health["llm"].available == 5
    assert health["mail"].active_units == 0
    # Back to FIFO: an update, and the level follows the policy's fields.
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("llm", max_active=8)])
    assert [p.fairness for p in queue.list_concurrency_policies("ns")] == ["fifo"]


def test_the_app_syncs_its_queues_fairness(app):
    app.sync()
    with app.connection() as conn:
        policies = {p.queue: p for p in Queue(conn).list_concurrency_policies()}
    assert policies["llm"].fairness == "key"


@pytest.mark.parametrize("fair", [False, True])
def test_a_released_claim_admits_nothing_from_a_costed_or_fair_queue(queue, conn, fair):
    """Rolling upgrade (invariant 5): the 0.2.0 claim (the released `claim` statement) sees the
    raised level and admits nothing there, while it still serves other queues."""
    if fair:
        queue.sync_concurrency_policies("ns", [
            ConcurrencyPolicyDefinition("q", max_active=4, fairness="key")])
        queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", concurrency_key="a"))] * 2)
    else:
        queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", cost=2))])
        queue.enqueue_many([("t", {}, EnqueueOptions(queue="q"))])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="other"))])
    old = released_statement("claim")
    rows = conn.execute(old, ("q", 10, 30.0)).fetchall()
    assert [r[0] for r in rows if r[0] is not None] == []
    assert [r[15] for r in rows] == ["feature_level"]  # the marker its worker warns about
    assert len([r for r in conn.execute(old, ("other", 10, 30.0)).fetchall() if r[0]]) == 1
    assert conn.execute("SELECT DISTINCT status FROM workhorse.jobs WHERE queue = 'q'"
                        ).fetchall() == [("ready",)]


def test_a_checker_of_the_level_fails_when_the_level_is_not_raised(queue, conn):
    """The rolling-upgrade check above can fail: with the queue's level lowered by hand, the
    released claim admits the costed job (it cannot count its cost)."""
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", cost=2))])
    conn.execute("DELETE FROM workhorse.queue_levels")
    rows = conn.execute(released_statement("claim"), ("q", 10, 30.0)).fetchall()
    assert len([r for r in rows if r[0] is not None]) == 1


def test_a_cost_that_can_never_fit_the_synced_policy_is_refused_at_enqueue(queue, conn):
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("q", max_active=8, max_active_per_key=4, rate_limit="100/m",
                                    rate_limit_per_key="50/m")])
    for options in (EnqueueOptions(queue="q", cost=9),
                    EnqueueOptions(queue="q", cost=5, concurrency_key="k"),
                    EnqueueOptions(queue="q", rate_cost=101),
                    EnqueueOptions(queue="q", rate_cost=51, concurrency_key="k")):
        with pytest.raises(InvalidOptionsError, match="can never start"):
            queue.enqueue_many([("t", {}, EnqueueOptions(queue="q")), ("t", {}, options)])
        assert _count(conn) == 0 and _levels(conn) == {}
    # What fits is accepted: keyless jobs are not held to the per-key limit.
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", cost=8)),
                        ("t", {}, EnqueueOptions(queue="q", cost=4, concurrency_key="k")),
                        ("t", {}, EnqueueOptions(queue="q", rate_cost=100))])
    assert _count(conn) == 3


BAD_OPTIONS = [
    {"weight": 0}, {"weight": 1001}, {"weight": "3"}, {"weight": True}, {"weight": 2.0},
    {"cost": 0}, {"cost": -1}, {"cost": 10**7}, {"cost": True}, {"cost": "2"},
    {"rate_cost": 0}, {"rate_cost": 10**7}, {"rate_cost": False},
]


@pytest.mark.parametrize("bad", BAD_OPTIONS, ids=repr)
def test_bad_costs_and_weights_are_typed_and_write_nothing(app, queue, conn, bad):
    with pytest.raises(InvalidOptionsError):
        EnqueueOptions(queue="q", **bad)
    with pytest.raises(InvalidOptionsError):
        app.tasks["fair.plain"].apply_async((1,), **bad)
    with pytest.raises(InvalidOptionsError):
        app.task(name=f"fair.decl{abs(hash(repr(bad)))}", queue="plain", **bad)(lambda: None)
    assert _count(conn) == 0


@pytest.mark.parametrize("returned", [2.5, "2", None, True, 0, 10**7], ids=repr)
def test_a_cost_callable_that_returns_a_non_int_is_typed(app, conn, returned):
    with pytest.raises(InvalidOptionsError, match="cost must be an int"):
        app.tasks["fair.bad_cost"].delay(returned)
    assert _count(conn) == 0


def test_a_cost_callable_that_raises_is_typed(app, conn):
    raising = App("fair-raising", database_url=app.database_url)

    @raising.task(name="fair.raises", queue="plain", rate_cost=lambda n: 1 // 0)
    def raises(n: int) -> None: ...

    with pytest.raises(InvalidOptionsError, match="rate_cost callable"):
        raises.delay(1)
    raising.close()
    assert _count(conn) == 0


@pytest.mark.parametrize("bad", [
    {"fairness": "x"}, {"fairness": None}, {"fairness": "KEY"},
    {"fairness": "key", "max_active": None, "max_active_per_key": 3},
], ids=repr)
def test_bad_fairness_is_typed_and_writes_nothing(app, queue, conn, bad):
    fields: dict[str, Any] = {"max_active": 4, **bad}
    with pytest.raises(InvalidPolicyError):
        ConcurrencyPolicyDefinition("q", **fields)
    with pytest.raises(InvalidPolicyError):
        app.queue("q2", **fields)
    with pytest.raises(InvalidPolicyError):
        app.task(name="fair.decl_fair", queue="q3", **fields)(lambda: None)
    assert conn.execute("SELECT count(*) FROM workhorse.policies").fetchone() == (0,)
    assert _count(conn) == 0


def _untracked_key_claimed(queue: Queue, conn: psycopg.Connection[Any]) -> list[str | None]:
    """A fair queue with no per-key limit: key `a` holds the queue's only active job, so `b`
    (no active job) is seen only through its key head."""
    [a] = queue.claim("f", 1, 30)
    assert a.concurrency_key == "a"
    return [job.concurrency_key for job in queue.claim("f", 5, 30)]


def test_a_fair_queue_keeps_heads_through_retries_releases_and_operator_changes(queue, conn):
    _heads_kept(queue, conn)


def test_the_heads_check_fails_when_released_paths_hint_only_per_key_queues(queue, conn):
    """The check above can fail: with the hints of the paths that make jobs ready again limited
    to queues with a per-key limit (0.2.0's rule), the retried key is never seen."""
    name = _sql.function_name("_hint_keys")
    text = _sql.function_files()[name]
    keyed = _sql.function_name("_keyed")
    old = keyed.rsplit("_", 1)[0] + "_v" + "1"  # 0.2.0's rule
    conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                 .replace(f"workhorse.{keyed}(", f"workhorse.{old}("))
    with pytest.raises(AssertionError):
        _heads_kept(queue, conn)


def _heads_kept(queue: Queue, conn: psycopg.Connection[Any]) -> None:
    """Fair share reads key heads even without a per-key limit: every path that makes a job
    ready again hints its key (a retry that falls due, a release, an operator's retry), and an
    override cleared on a fair queue leaves its heads in place."""
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("f", max_active=4, fairness="key")])
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="f", concurrency_key="a"))] * 3)
    [b] = queue.enqueue_many([("t", {}, EnqueueOptions(queue="f", concurrency_key="b",
                                                        delay=3600))])
    conn.execute("UPDATE workhorse.jobs SET run_at = now() - interval '1s' WHERE id = %s", (b,))
    assert sorted(_untracked_key_claimed(queue, conn), key=str) == ["a", "a", "b"]
    # An operator's retry of a held job of a new key, and an override set and cleared.
    conn.execute("UPDATE workhorse.jobs SET status = 'succeeded'")
    [c] = queue.enqueue_many([("t", {}, EnqueueOptions(queue="f", concurrency_key="c"))])
    conn.execute("UPDATE workhorse.jobs SET status = 'held' WHERE id = %s", (c,))
    conn.execute("DELETE FROM workhorse.key_heads")
    queue.enqueue_many([("t", {}, EnqueueOptions(queue="f", concurrency_key="a"))])
    assert [job.concurrency_key for job in queue.claim("f", 1, 30)] == ["a"]
    queue.retry_jobs([c])
    queue.override_policy("f", max_active_per_key=2)
    queue.clear_override("f")
    assert [job.concurrency_key for job in queue.claim("f", 5, 30)] == ["c"]


def test_a_stored_job_that_can_never_fit_is_held_and_one_an_override_keeps_out_waits(queue, conn):
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", max_active=8)])
    [big, small] = queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", cost=6)),
                                       ("t", {}, EnqueueOptions(queue="q", cost=2))])
    queue.override_policy("q", max_active=4)
    assert queue.claim("q", 5, 30) == []          # waits for the override: nothing overtakes it
    assert queue.get_job(big).status == "ready"   # type: ignore[union-attr]
    queue.clear_override("q")
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", max_active=4)])
    assert [job.id for job in queue.claim("q", 5, 30)] == [small]
    held = queue.get_job(big)
    assert held is not None and held.status == "held"
    assert held.error is not None and held.error["type"] == "CostExceedsLimitError"
