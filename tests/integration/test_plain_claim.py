"""The plain queue's claim (issue #40): a governed queue whose one rule is max_active, with nothing
else to do, is admitted by the claim's two-statement branch; every other queue falls through to
the paths that know its rules (docs/design.md, invariants 1 to 7).

Which branch a claim took is read from the functions it called in its transaction
(`pg_stat_xact_user_functions` with `track_functions = 'pl'`): the other paths read the limits
in force through the `_limits` function, the plain branch does not. What each branch admits is
checked by the admission tests (test_claim, test_admission_model, test_admission_contention,
...), which run on both; here, each condition that must send a claim down the other paths is
shown to do so, and the check is shown to fail on a copy of the claim without that condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from workhorse import (
    BudgetDefinition,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    Queue,
    _sql,
)

CLAIM = _sql.function_name("claim")
LIMITS = _sql.function_name("_limits")
UNKNOWN_READY = _sql.function_name("_unknown_ready")
EMPTY: dict[str, Any] = {"args": [], "kwargs": {}}


def _claim(conn: psycopg.Connection[Any], queue: str, tasks: list[str] | None = None,
           function: str = CLAIM) -> tuple[list[int], bool]:
    """The ids one claim of up to 10 jobs took, and whether it took the plain branch."""
    with conn.transaction():
        conn.execute("SET LOCAL track_functions = 'pl'")
        rows = conn.execute(
            f"SELECT id FROM workhorse.{function}(%s, 10, 60, NULL, NULL, NULL, NULL, NULL, "
            "%s::text[])", (queue, tasks)).fetchall()
        general = conn.execute(
            "SELECT COALESCE(sum(calls), 0) FROM pg_stat_xact_user_functions "
            "WHERE schemaname = 'workhorse' AND funcname = %s", (LIMITS,)).fetchone()
    assert general is not None
    return [row[0] for row in rows if row[0] is not None], general[0] == 0


def _plain(q: Queue, queue: str = "q") -> None:
    q.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition(queue, max_active=8)])
    q.enqueue_many([("t", EMPTY, EnqueueOptions(queue=queue))] * 3)


def _policy(**limits: Any) -> Callable[[Queue, psycopg.Connection[Any]], None]:
    def setup(q: Queue, conn: psycopg.Connection[Any]) -> None:
        q.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition("q", **limits)])
    return setup


def _paused(q: Queue, conn: psycopg.Connection[Any]) -> None:
    q.pause("q")


def _overridden(q: Queue, conn: psycopg.Connection[Any]) -> None:
    q.override_policy("q", max_active=4)


def _budgeted(q: Queue, conn: psycopg.Connection[Any]) -> None:
    q.sync_budgets("ns", [BudgetDefinition("api", max_active=5)])
    q.enqueue("t", EMPTY, EnqueueOptions(queue="q", budget="api"))


def _costed(q: Queue, conn: psycopg.Connection[Any]) -> None:
    q.enqueue("t", EMPTY, EnqueueOptions(queue="q", cost=2))  # raises the queue's level


def _expired(q: Queue, conn: psycopg.Connection[Any]) -> None:
    [job] = q.claim("q", 1, 0.05)
    time.sleep(0.1)
    assert conn.execute("SELECT lease_until < clock_timestamp() FROM workhorse.jobs "
                        "WHERE id = %s", (job.id,)).fetchone() == (True,)


def _due(q: Queue, conn: psycopg.Connection[Any]) -> None:
    q.enqueue("t", EMPTY, EnqueueOptions(queue="q", delay=0.05))
    time.sleep(0.1)


def _foreign(q: Queue, conn: psycopg.Connection[Any]) -> None:
    q.enqueue("other.app", EMPTY, EnqueueOptions(queue="q"))


# Each condition that makes a queue not plain, and the start of each clause of the plain
# branch that sees it (a clause with a parenthesis runs to its closing one). Fair share and
# budgets are level-2 features, so the level's clauses see them as well.
Setup = Callable[[Queue, psycopg.Connection[Any]], None]
NOT_PLAIN: dict[str, tuple[Setup, str | tuple[str, ...]]] = {
    "per-key limit": (_policy(max_active=8, max_active_per_key=2),
                      "AND p.max_active_per_key IS NULL"),
    "rate limit": (_policy(max_active=8, rate_limit="100/s"), "AND p.rate_limit IS NULL"),
    "per-key rate": (_policy(max_active=8, rate_limit_per_key="100/s"),
                     "AND p.rate_limit_per_key IS NULL"),
    "fair share": (_policy(max_active=8, fairness="key"),
                   ("AND p.fairness = 'fifo'", "AND p.feature_level <= 1")),
    "paused": (_paused, "AND NOT EXISTS (SELECT 1 FROM workhorse.queue_controls c"),
    "override": (_overridden, "AND NOT EXISTS (SELECT 1 FROM workhorse.queue_controls c"),
    "budget": (_budgeted, ("AND NOT EXISTS (SELECT 1 FROM workhorse.budget_queues bq",
                           "AND NOT EXISTS (SELECT 1 FROM workhorse.queue_levels lv")),
    "cost": (_costed, "AND NOT EXISTS (SELECT 1 FROM workhorse.queue_levels lv"),
    "expired lease": (_expired, "j.lease_until <= v_now)"),
    "due job": (_due, "j.run_at <= v_now)"),
    # Another app's job: the plain walk is left short, and the probe sends the rest below.
    "another app's job": (_foreign, f"AND workhorse.{UNKNOWN_READY}(p_queue, p_tasks, false"),
}
# The condition whose removal is shown: made true, or for the probe of a short walk, false.
REMOVED = {"another app's job": "AND false"}


def _clause(text: str, start: str) -> str:
    """The whole clause of the plain branch's statement that `start` begins (or ends, for the
    two probes of jobs: their EXISTS is found backwards), parentheses matched."""
    plain = text.index("IF v_peek THEN")
    at = text.index(start, plain)
    if start.endswith("<= v_now)"):  # the end of an EXISTS: back to its "AND NOT EXISTS ("
        begin = text.rindex("AND NOT EXISTS (", plain, at)
        return text[begin:at + len(start)]
    if "(" not in start:
        return start
    depth, i = 0, text.index("(", at)
    while True:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[at:i + 1]
        i += 1


def _install_broken(conn: psycopg.Connection[Any], cuts: dict[str, str]) -> None:
    """`claim_broken`: a copy of the claim with each clause of `cuts` (each found once)
    replaced by its value."""
    text = _sql.function_files()[CLAIM]
    broken = text.replace(f"workhorse.{CLAIM}(", "workhorse.claim_broken(", 1)
    for clause, replacement in cuts.items():
        assert text.count(clause) == 1, clause
        broken = broken.replace(clause, replacement, 1)
    conn.execute(broken)


def test_a_queue_whose_one_rule_is_max_active_takes_the_plain_branch(conn, queue):
    _plain(queue)
    ids, plain = _claim(conn, "q", ["t"])
    assert plain and len(ids) == 3
    # 3 of 8 active, nothing ready: still plain, and admits nothing.
    assert _claim(conn, "q", ["t"]) == ([], True)


def test_an_ungoverned_queue_does_not(conn, queue):
    queue.enqueue_many([("t", EMPTY, EnqueueOptions(queue="free"))] * 2)
    ids, plain = _claim(conn, "free")
    assert not plain and len(ids) == 2


@pytest.mark.parametrize("case", list(NOT_PLAIN))
def test_every_other_rule_or_chore_takes_the_other_paths(conn, queue, case):
    _plain(queue)
    setup, _ = NOT_PLAIN[case]
    setup(queue, conn)
    _, plain = _claim(conn, "q", ["t"])
    assert not plain, case


@pytest.mark.parametrize("case", list(NOT_PLAIN))
def test_the_check_fails_on_a_claim_without_that_condition(conn, queue, case):
    setup, starts = NOT_PLAIN[case]
    text = _sql.function_files()[CLAIM]
    _install_broken(conn, {_clause(text, start): REMOVED.get(case, "AND true")
                           for start in ((starts,) if isinstance(starts, str) else starts)})
    _plain(queue)
    setup(queue, conn)
    _, plain = _claim(conn, "q", ["t"], function="claim_broken")
    assert plain, case


def test_a_walk_left_short_by_another_apps_jobs_claims_the_rest_below(conn, queue):
    """The plain walk meets another app's job among its rows (never activated): the claim goes
    on below for the rest of its limit, and takes no more than the limit in all. Shown to fail
    when the short walk returns instead (the claim then takes only what the first rows held)."""
    queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition("q", max_active=8)])
    first = queue.enqueue_many([("t", EMPTY, EnqueueOptions(queue="q"))] * 5)
    [theirs] = queue.enqueue_many([("other.app", EMPTY, EnqueueOptions(queue="q"))])
    then = queue.enqueue_many([("t", EMPTY, EnqueueOptions(queue="q"))] * 5)
    text = _sql.function_files()[CLAIM]
    clause = _clause(text, NOT_PLAIN["another app's job"][1])  # type: ignore[arg-type]
    _install_broken(conn, {clause: "AND false"})

    def claim(function: str) -> list[int]:
        rows = conn.execute(
            f"SELECT id FROM workhorse.{function}('q', 7, 60, NULL, NULL, NULL, NULL, NULL, "
            "ARRAY['t'])").fetchall()
        return sorted(row[0] for row in rows if row[0] is not None)

    with conn.transaction(force_rollback=True):
        assert claim("claim_broken") == first + then[:1]  # the first 7 rows held 6 of ours
    taken = claim(CLAIM)
    assert taken == first + then[:2]
    assert queue.get_job(theirs).status.value == "ready"  # type: ignore[union-attr]


def test_a_job_of_another_cost_is_left_to_a_claim_that_counts_units(conn, queue):
    """A job of cost 2 raises its queue's level in the commit that enqueues it; a plain claim
    that read the level before that commit must not activate it as one job. Simulated: the job
    is written with the level not raised yet. Shown to fail without the activation's cost test
    (the job would take one place of a count of jobs, two units of max_active)."""
    queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition("q", max_active=2)])
    [one] = queue.enqueue_many([("t", EMPTY, EnqueueOptions(queue="q"))])
    [two] = queue.enqueue_many([("t", EMPTY, EnqueueOptions(queue="q"))])
    conn.execute("UPDATE workhorse.jobs SET cost = 2 WHERE id = %s", (two,))
    _install_broken(conn, {"                      AND j.cost = 1\n": ""})
    with conn.transaction(force_rollback=True):
        assert _claim(conn, "q", ["t"], function="claim_broken") == ([one, two], True)
    assert _claim(conn, "q", ["t"]) == ([one], True)
    assert queue.get_job(two).status.value == "ready"  # type: ignore[union-attr]
    # Once the level shows (the enqueue's commit), the claim in units takes it when it fits.
    conn.execute("INSERT INTO workhorse.queue_levels (queue, feature_level) VALUES ('q', 2)")
    fence = conn.execute("SELECT fence FROM workhorse.jobs WHERE id = %s", (one,)).fetchone()
    assert fence is not None
    queue.complete_many([(one, fence[0], None)])
    ids, plain = _claim(conn, "q", ["t"])
    assert ids == [two] and not plain


@pytest.mark.parametrize("rules", ["per-key", "override"])
def test_the_other_paths_counting_jobs_leave_a_job_of_another_cost_too(conn, queue, rules):
    """The same race on the paths that count jobs, not units: a per-key limit (key heads) and
    an override (the row walk). Shown to fail without their activation's cost test."""
    queue.sync_concurrency_policies("t", [ConcurrencyPolicyDefinition(
        "q", max_active=4, max_active_per_key=2 if rules == "per-key" else None)])
    if rules == "override":
        queue.override_policy("q", max_active=4)
    options = EnqueueOptions(queue="q", concurrency_key="k")
    [one] = queue.enqueue_many([("t", EMPTY, options)])
    [two] = queue.enqueue_many([("t", EMPTY, options)])
    conn.execute("UPDATE workhorse.jobs SET cost = 2 WHERE id = %s", (two,))
    _install_broken(conn, {
        "              AND (v_units OR NOT v_governed OR (j.cost = 1 AND j.rate_cost = 1))\n": ""})
    with conn.transaction(force_rollback=True):
        assert _claim(conn, "q", ["t"], function="claim_broken") == ([one, two], False)
    assert _claim(conn, "q", ["t"]) == ([one], False)
    assert queue.get_job(two).status.value == "ready"  # type: ignore[union-attr]
