"""Admission by named budget and rate bursts (issue #30, docs/design.md "Named budgets (one limit
shared by several queues) and rate bursts"), one claim at a time against the real claim, so that
each rule is seen on its own: a budget counts units across queues, a full budget is passed over
(with its key in a keyed queue) and never blocks the queue's other jobs, turns between the queues
that share a budget, a budget nobody declared limits nothing, a job that can never fit is held,
overrides, the rate and its burst (budgets, queues and keys), the next-start marker, health, and a
worker of 0.2.0 admitting nothing from a budgeted queue. Every test here fails on the claim before
budgets were admitted (it took every job: checked by running this file on that commit). The fleet,
rate-window and model tests are in tests/acceptance/ and test_budget_model.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from sql_names import released_called_function

from workhorse import (
    BudgetDefinition,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    JobStatus,
    Queue,
    _sql,
)

CLAIM = _sql.function_name("claim")


def _enqueue(q: Queue, queue: str, n: int, **options: Any) -> list[int]:
    return [q.enqueue("t", {"i": i}, EnqueueOptions(queue=queue, **options)) for i in range(n)]


def _claim(conn: psycopg.Connection[Any], queue: str, limit: int) -> tuple[list[int], float | None]:
    """The ids the claim took, and its next-start marker (None: no marker)."""
    rows = conn.execute(
        f"SELECT id, fence, next_start_in FROM workhorse.{CLAIM}"
        "(%s, %s, 60, NULL, NULL, NULL, NULL, NULL)", (queue, limit)).fetchall()
    return [r[0] for r in rows if r[0] is not None], next(
        (r[2] for r in rows if r[0] is None and r[2] is not None), None)


def _fences(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, int]:
    return dict(conn.execute("SELECT id, fence FROM workhorse.jobs WHERE id = ANY(%s)",
                             (ids,)).fetchall())


def _budget_units(conn: psycopg.Connection[Any], budget: str) -> int:
    return conn.execute(
        "SELECT COALESCE(sum(cost), 0) FROM workhorse.jobs WHERE budget = %s"
        " AND status = 'active' AND lease_until > clock_timestamp()", (budget,)).fetchone()[0]


def test_two_queues_share_a_budget_and_take_freed_places_in_turn(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=3)])
    a = _enqueue(queue, "A", 20, budget="api")
    b = _enqueue(queue, "B", 5, budget="api")
    took_a, _ = _claim(conn, "A", 10)
    assert took_a == a[:3]                       # the budget, not the batch, limits
    assert _claim(conn, "B", 10) == ([], None)   # full: B waits (and now wants it)
    assert _budget_units(conn, "api") == 3
    fences = _fences(conn, took_a)
    queue.complete(took_a[0], fences[took_a[0]])
    # A freed a place, but B waits for the budget and its turn is older: A leaves it to B.
    assert _claim(conn, "A", 10) == ([], None)
    assert _claim(conn, "B", 10)[0] == b[:1]
    queue.complete(took_a[1], fences[took_a[1]])
    assert _claim(conn, "A", 10)[0] == a[3:4]    # and back to A
    assert _budget_units(conn, "api") == 3
    [health] = [h for h in queue.health().budgets if h.name == "api"]
    assert (health.active_units, health.queues) == (3, ["A", "B"])
    assert health.blocked_ready == 16 + 4 and health.next_start_at is None


def test_a_full_budget_is_passed_over_and_the_queues_other_jobs_go_on(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=1)])
    budgeted = _enqueue(queue, "q", 5, budget="api")
    plain = _enqueue(queue, "q", 3)
    other = _enqueue(queue, "q", 2, budget="elsewhere")   # named, declared by nobody: no limit
    took, _ = _claim(conn, "q", 10)
    assert took == [budgeted[0], *plain, *other]
    assert _claim(conn, "q", 10) == ([], None)


def test_in_a_keyed_queue_a_full_budget_passes_its_key_over(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition(
        "k", max_active_per_key=5)])
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=1)])
    k1 = _enqueue(queue, "k", 2, budget="api", concurrency_key="one")
    k1_plain = _enqueue(queue, "k", 1, concurrency_key="one")
    k2 = _enqueue(queue, "k", 2, budget="api", concurrency_key="two")
    k3 = _enqueue(queue, "k", 2, concurrency_key="three")
    keyless = _enqueue(queue, "k", 1, budget="api") + _enqueue(queue, "k", 1)
    took, _ = _claim(conn, "k", 20)
    # The budget's one place goes to the first job in order; key one's next job (of the full
    # budget) holds its key, so its plain job behind it waits (a key's order holds); key two is
    # passed over; key three and the plain keyless job go on.
    assert sorted(took) == sorted([k1[0], *k3, keyless[1]])
    assert k1_plain[0] not in took and k2[0] not in took


def test_a_job_that_can_never_fit_its_declared_budget_is_held(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    big = _enqueue(queue, "q", 1, budget="api", cost=5)      # before the budget was declared
    small = _enqueue(queue, "q", 1, budget="api", cost=2)
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=3)])
    took, _ = _claim(conn, "q", 10)
    assert took == small
    job = queue.get_job(big[0])
    assert job is not None and job.status == JobStatus.HELD
    assert job.error is not None and job.error["type"] == "CostExceedsLimitError"
    assert "budget api" in job.error["message"]


def test_costs_count_in_units_and_an_override_lowers_the_budget(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=10)])
    queue.override_budget("api", max_active=4)
    jobs = _enqueue(queue, "q", 4, budget="api", cost=2)
    took, _ = _claim(conn, "q", 10)
    assert took == jobs[:2] and _budget_units(conn, "api") == 4
    queue.clear_budget_override("api")
    assert _claim(conn, "q", 10)[0] == jobs[2:]


def test_a_budgets_rate_and_burst_count_starts_across_queues(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.sync_budgets("ns", [BudgetDefinition("api", rate_limit="4/60s", rate_burst=2)])
    a = _enqueue(queue, "A", 5, budget="api")
    b = _enqueue(queue, "B", 5, budget="api")
    took, marker = _claim(conn, "A", 10)
    assert took == a[:2]                      # the burst: 2 in any 30 s
    assert marker is not None and 29 < marker <= 30.5
    assert _claim(conn, "B", 10)[0] == []     # the burst's window is shared
    conn.execute("UPDATE workhorse.budget_starts SET bucket_end = bucket_end"
                 " - interval '31 seconds' WHERE span = 1")   # the burst window passed
    assert _claim(conn, "B", 10)[0] == b[:2]  # 4 in 60 s now: the rate
    conn.execute("UPDATE workhorse.budget_starts SET bucket_end = bucket_end"
                 " - interval '31 seconds' WHERE span = 1")
    took, marker = _claim(conn, "A", 10)
    assert took == [] and marker is not None and marker > 20
    [health] = [h for h in queue.health().budgets if h.name == "api"]
    assert health.next_start_at is not None and health.blocked_ready == 6


def test_a_queues_burst_and_a_keys_burst_are_enforced(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("q", rate_limit="10/60s", rate_burst=3),
        ConcurrencyPolicyDefinition("k", rate_limit_per_key="10/60s", rate_burst_per_key=2)])
    jobs = _enqueue(queue, "q", 10)
    took, marker = _claim(conn, "q", 10)
    assert took == jobs[:3] and marker is not None and 17 < marker <= 18.5   # 60*3/10 = 18 s
    one = _enqueue(queue, "k", 4, concurrency_key="one")
    two = _enqueue(queue, "k", 4, concurrency_key="two")
    took, _ = _claim(conn, "k", 10)
    assert sorted(took) == sorted(one[:2] + two[:2])


def test_health_says_when_a_rate_limited_queue_and_its_keys_start_next(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition("q", rate_limit="10/60s", rate_burst=3),
        ConcurrencyPolicyDefinition("k", rate_limit_per_key="2/60s"),
        ConcurrencyPolicyDefinition("plain", max_active=3)])
    _enqueue(queue, "q", 5)
    _enqueue(queue, "k", 3, concurrency_key="one")
    before = {p.queue: p for p in queue.health().policies}
    _claim(conn, "q", 10)
    _claim(conn, "k", 10)
    now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    after = {p.queue: p for p in queue.health().policies}
    assert before["q"].next_start_at is not None and before["q"].next_start_at <= now
    assert after["q"].next_start_at is not None
    assert 17 < (after["q"].next_start_at - now).total_seconds() <= 18.5   # the burst's 18 s
    assert before["k"].next_key_start_at is None
    assert after["k"].next_key_start_at is not None
    assert 59 < (after["k"].next_key_start_at - now).total_seconds() <= 61
    assert after["plain"].next_start_at is None and after["plain"].next_key_start_at is None


def test_a_worker_of_0_2_0_admits_nothing_from_a_budgeted_queue(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.sync_budgets("ns", [BudgetDefinition("api", max_active=1)])
    _enqueue(queue, "q", 3, budget="api")
    old_claim = released_called_function("claim")  # what 0.2.0's claim statement calls
    assert old_claim != CLAIM
    rows = conn.execute(f"SELECT id, status FROM workhorse.{old_claim}"
                        "('q', 10, 60, NULL, NULL, NULL, NULL, NULL)").fetchall()
    assert all(r[0] is None for r in rows)
    assert conn.execute("SELECT count(*) FROM workhorse.jobs WHERE status = 'active'"
                        ).fetchone()[0] == 0


def test_claims_of_queues_sharing_budgets_never_deadlock_nor_overshoot(
    database_url: str, queue: Queue
) -> None:
    """Claimers of three queues whose jobs name two budgets each, completing as they go: every
    claim locks its queue, then its budgets in name order, so none waits in a cycle, and no
    budget is ever over its limit (sampled after every claim)."""
    queue.sync_budgets("ns", [BudgetDefinition("a", max_active=3),
                              BudgetDefinition("b", max_active=2)])
    for name in ("Q1", "Q2", "Q3"):
        _enqueue(queue, name, 60, budget="a")
        _enqueue(queue, name, 60, budget="b")
    errors: list[BaseException] = []
    peaks = {"a": 0, "b": 0}
    stop = time.monotonic() + 3

    def claimer(name: str) -> None:
        with psycopg.connect(database_url, autocommit=True) as c:
            q = Queue(c)
            while time.monotonic() < stop:
                try:
                    for job in q.claim(name, 4, 30):
                        units = dict(c.execute(
                            "SELECT budget, sum(cost) FROM workhorse.jobs WHERE status = 'active'"
                            " AND lease_until > clock_timestamp() GROUP BY budget").fetchall())
                        for budget in peaks:
                            peaks[budget] = max(peaks[budget], int(units.get(budget, 0)))
                        q.complete(job.id, job.fence)
                except BaseException as exc:
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=claimer, args=(n,)) for n in ("Q1", "Q2", "Q3") * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert 0 < peaks["a"] <= 3 and 0 < peaks["b"] <= 2


# ---- cost: index entries one claim reads with 200 and with 20,000 jobs of a full budget ahead --

CHOOSE = _sql.function_name("_choose_units")


def _full_budget_ahead(database_url: str, path: str, flood: int) -> None:
    """Queue q: one job of budget `api` (max_active=1) active, `flood` more of it ready ahead
    of 12 jobs that name no budget (each job its own key on the keyed paths)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE workhorse.jobs, workhorse.key_heads, workhorse.key_hints,"
                     " workhorse.policies, workhorse.queue_controls, workhorse.budget_queues,"
                     " workhorse.budgets CASCADE")
        q = Queue(conn)
        q.sync_budgets("ns", [BudgetDefinition("api", max_active=1)])
        keyed = path != "stream"
        q.enqueue("t", {}, EnqueueOptions(queue="q", budget="api"))
        conn.execute(
            "INSERT INTO workhorse.jobs (task, queue, ckey, payload, budget, feature_level, status)"
            " SELECT 't', 'q', CASE WHEN %s THEN 'b' || g ELSE '' END, '{}', 'api', 2, 'ready'"
            " FROM generate_series(1, %s) g", (keyed, flood))
        for i in range(12):
            key = f"u{i}" if keyed else None
            q.enqueue("t", {}, EnqueueOptions(queue="q", concurrency_key=key))
        policy = {"per_key": ConcurrencyPolicyDefinition("q", max_active_per_key=2),
                  "fair": ConcurrencyPolicyDefinition("q", max_active=64, fairness="key")}
        if path in policy:
            q.sync_concurrency_policies("ns", [policy[path]])   # rebuilds the key heads
        conn.execute("ANALYZE workhorse.jobs")
        assert len(q.claim("q", 1, 600)) == 1                   # the budget is full now


def _entries_read(database_url: str, claim: str) -> tuple[int, int]:
    """(jobs taken, index entries of jobs read) by one claim of up to 4, rolled back."""
    with psycopg.connect(database_url) as conn:
        took = conn.execute(f"SELECT count(id) FROM workhorse.{claim}"
                            "('q', 4, 30, NULL, NULL, NULL, NULL, NULL)").fetchone()
        row = conn.execute(
            "SELECT COALESCE(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)"
            " FROM pg_index i WHERE i.indrelid = 'workhorse.jobs'::regclass").fetchone()
        conn.rollback()
    assert took is not None and row is not None
    return int(took[0]), int(row[0])


def _growth(database_url: str, claim: str, path: str) -> tuple[int, int]:
    _full_budget_ahead(database_url, path, 200)
    took_small, small = _entries_read(database_url, claim)
    _full_budget_ahead(database_url, path, 20_000)
    took_big, big = _entries_read(database_url, claim)
    assert took_small == took_big == 4, "the jobs behind the full budget must run"
    return small, big


@pytest.mark.parametrize("path", ["stream", "per_key", "fair"])
def test_a_claims_cost_does_not_grow_with_a_full_budgets_backlog(
        database_url: str, queue: Queue, path: str) -> None:
    small, big = _growth(database_url, CLAIM, path)
    assert small > 0, "nothing read: the measure would be vacuous"
    assert big <= 2 * small + 50, (small, big)


@pytest.mark.parametrize("path", ["stream", "per_key"])
def test_the_cost_check_catches_a_choice_that_reads_the_full_budgets_jobs(
        database_url: str, queue: Queue, path: str) -> None:
    """The same check on a copy of the choice that reads past a full budget's jobs and heads
    one by one (the jobs that name no budget found by filtering the queue's ready rows, the heads
    of no budget by their job's budget) must fail."""
    choose = _sql.function_files()[CHOOSE]
    stream = """            WHERE j.budget IS NULL AND j.queue = p_queue AND j.status = 'ready'
              AND (j.rank, j.id) > (v_all_rank, v_all_id)
              AND (cardinality(p_off_keys) = 0 OR NOT (j.ckey = ANY(p_off_keys)))
            ORDER BY j.budget, j.queue, j.rank, j.id"""
    heads = """                 WHERE h.queue = p_queue AND h.budget IS NULL
                   AND NOT (h.ckey = ANY(k_key)) AND NOT (h.ckey = ANY(v_passed))
                 ORDER BY h.queue, h.budget, h.head_rank, h.head_id"""
    assert choose.count(stream) == choose.count(heads) == 1
    broken_choose = (choose.replace(f"workhorse.{CHOOSE}(", "workhorse.choose_reading_all(", 1)
                     .replace(stream, """            WHERE j.queue = p_queue AND j.status = 'ready'
              AND (j.rank, j.id) > (v_all_rank, v_all_id) AND COALESCE(j.budget, '') = ''
            ORDER BY j.queue, j.rank, j.id""")
                     .replace(heads, """                 WHERE h.queue = p_queue
                   AND (SELECT hj.budget FROM workhorse.jobs hj WHERE hj.id = h.head_id) IS NULL
                   AND NOT (h.ckey = ANY(k_key)) AND NOT (h.ckey = ANY(v_passed))
                 ORDER BY h.queue, h.head_rank, h.head_id"""))
    claim = _sql.function_files()[CLAIM]
    broken_claim = (claim.replace(f"workhorse.{CLAIM}(", "workhorse.claim_reading_all(", 1)
                    .replace(f"workhorse.{CHOOSE}(", "workhorse.choose_reading_all("))
    queue.conn.execute(broken_choose)
    queue.conn.execute(broken_claim)
    small, big = _growth(database_url, "claim_reading_all", path)
    assert big > 2 * small + 50, (small, big)
