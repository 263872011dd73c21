"""Back-pressure against the real claim (docs/design.md "Back-pressure", issue #41 item 1), one
claim at a time: on every path a claim can take, a backoff of each scope holds back exactly its
target and nothing else, the work resumes once it ends, and the job that raised it gets its
attempt back.

The paths (KINDS): no policy (the row walk; the backoff's control row makes the queue governed), a
plain governed queue (max_active only: its fast path), a queue-wide rate (the row walk, cut by the
rate), per-key limits (the heads walk, with and without a per-key rate), fair share and costs (the
choice in units, with heads and as one stream), a budgeted queue without keys (the units' one
stream of budgets) and with keys, and the walks that pass over another app's jobs.

Most backoffs here are of 30 s and end by `_end_backoffs` (their `until` moved into the past,
which is what the claim compares with its clock), so that a slow machine cannot end one early;
`test_the_work_resumes_when_backoffs_end_by_the_clock` lets real ones run out. The checks are
written as scenarios so that `test_the_checks_fail_on_a_claim_that_ignores_backoffs` can run them
on deliberately broken copies of the claim: each of them must fail there.
"""

from __future__ import annotations

import math
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from workhorse import (
    Backoff,
    BudgetDefinition,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    JobStatus,
    Queue,
    _ops,
    _sql,
)
from workhorse.context import JobContext
from workhorse.types import BackoffState, ClaimedJob

Q = "bo"            # the queue under test
ELSEWHERE = "bo-elsewhere"
LONG = 30.0         # a backoff no slow machine outlives during a test
TASK = "t"
ALIEN = "alien.task"  # another app's task: a filtered claim passes its jobs over


# ---- the paths --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One admission path: the queue's policy, what its jobs carry, and whether the claims name
    their tasks while another app's job waits in the queue (the filtered walks)."""

    policy: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    budget: str | None = None        # the budget every job of the queue names (declared)
    filtered: bool = False


KINDS: dict[str, Kind] = {
    "ungoverned": Kind(),
    "ungoverned+filter": Kind(filtered=True),
    "plain": Kind(policy={"max_active": 100}),
    "rate": Kind(policy={"rate_limit": "1000/s"}),
    "per_key": Kind(policy={"max_active_per_key": 100}),
    "per_key+filter": Kind(policy={"max_active_per_key": 100}, filtered=True),
    "per_key_rate": Kind(policy={"max_active_per_key": 100, "rate_limit_per_key": "1000/s"}),
    "fair": Kind(policy={"max_active": 100, "fairness": "key"}),
    "cost": Kind(policy={"max_active": 100}, options={"cost": 2}),
    "cost+filter": Kind(policy={"max_active": 100}, options={"cost": 2}, filtered=True),
    "budgeted": Kind(budget="b"),
    "budgeted+filter": Kind(budget="b", filtered=True),
    "budgeted_keyed": Kind(policy={"max_active_per_key": 100}, budget="b"),
}

# A budgeted queue's paths are the units' only: the budget-scope tests run the others (queue A
# names budget "api" besides).
BUDGET_KINDS = ["ungoverned", "ungoverned+filter", "plain", "rate", "per_key", "per_key+filter",
                "per_key_rate", "fair", "cost", "cost+filter"]


def _setup(q: Queue, kind: Kind, queue: str = Q, budgets: tuple[str, ...] = ()) -> None:
    if kind.policy is not None:
        q.sync_concurrency_policies("bo", [ConcurrencyPolicyDefinition(queue, **kind.policy)])
    names = set(budgets) | ({kind.budget} if kind.budget else set())
    if names:
        q.sync_budgets("bo", [BudgetDefinition(n, max_active=100) for n in sorted(names)])
    if kind.filtered:
        q.enqueue(ALIEN, {}, EnqueueOptions(queue=queue, concurrency_key="alien"))


def _enqueue(q: Queue, kind: Kind | None, queue: str, keys: list[str | None],
             **options: Any) -> list[int]:
    extra = {} if kind is None else dict(kind.options)
    if kind is not None and kind.budget is not None:
        extra["budget"] = kind.budget
    extra.update(options)
    return [q.enqueue(TASK, {"i": i}, EnqueueOptions(queue=queue, concurrency_key=key, **extra))
            for i, key in enumerate(keys)]


def _claim(conn: psycopg.Connection[Any], queue: str, limit: int, kind: Kind | None = None,
           ) -> tuple[list[ClaimedJob], float | None]:
    """The jobs a claim took and its next-start marker (`_ops.claim_batch`'s reply)."""
    tasks = [TASK] if kind is not None and kind.filtered else None
    return _ops.execute(conn, _ops.claim_batch(queue, limit, 60.0, tasks))


def _ids(jobs: list[ClaimedJob]) -> set[int]:
    return {job.id for job in jobs}


def _back_off(conn: psycopg.Connection[Any], job: ClaimedJob, seconds: float,
              scope: str | None = None, budget: str | None = None, *, release: bool = True,
              ) -> tuple[JobStatus | None, BackoffState | None]:
    """What the worker's recorder sends for `raise Backoff(...)` (release) or for
    `current_job().backoff(...)` (no release)."""
    return _ops.execute(conn, _ops.backoff(job.id, job.fence, seconds, scope, budget, release))


def _expire(conn: psycopg.Connection[Any], job: ClaimedJob) -> None:
    """The job's lease ran out (its worker died): any claim may take it again."""
    conn.execute("UPDATE workhorse.jobs SET lease_until = clock_timestamp() - interval '1 s'"
                 " WHERE id = %s", (job.id,))


def _end_backoffs(conn: psycopg.Connection[Any], scope: str | None = None) -> None:
    """Let the backoffs in force (of `scope` only, when given) end now, as if their time had
    passed: the claim compares `until` (and the queues' stamps) with its clock."""
    conn.execute("UPDATE workhorse.backoffs SET until = clock_timestamp() - interval '1 ms'"
                 " WHERE until > clock_timestamp() AND (%s::text IS NULL OR scope = %s)",
                 (scope, scope))
    conn.execute(
        "UPDATE workhorse.queue_controls c SET backed_off_until = COALESCE(("
        "  SELECT max(b.until) FROM workhorse.backoffs b"
        "  WHERE b.scope IN ('queue', 'key') AND b.name = c.queue),"
        "  clock_timestamp() - interval '1 ms')"
        " WHERE c.backed_off_until IS NOT NULL")


def _now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def _job(q: Queue, job_id: int) -> tuple[JobStatus, int, int | None]:
    job = q.get_job(job_id)
    assert job is not None
    return job.status, job.attempts, job.fence


def _written(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    """Everything a backoff may write: the backoffs, the control rows, the jobs."""
    return (
        conn.execute("SELECT * FROM workhorse.backoffs ORDER BY 1, 2, 3").fetchall(),
        conn.execute("SELECT * FROM workhorse.queue_controls ORDER BY queue").fetchall(),
        conn.execute("SELECT id, status, attempts, fence, lease_until, finished_at"
                     " FROM workhorse.jobs ORDER BY id").fetchall(),
    )


def _control_row(conn: psycopg.Connection[Any], queue: str) -> tuple[Any, ...] | None:
    return conn.execute("SELECT paused, override_set_at, backed_off_until"
                        " FROM workhorse.queue_controls WHERE queue = %s", (queue,)).fetchone()


def _assert_marker(next_start: float | None, conn: psycopg.Connection[Any],
                   until: datetime) -> None:
    """The claim's next start is about the time left until the backoff ends."""
    left = (until - _now(conn)).total_seconds()
    assert next_start is not None, "the claim did not say when the backoff ends"
    assert left - 2.0 < next_start <= left + 0.5, (next_start, left)


def _reset(conn: psycopg.Connection[Any]) -> None:
    """Empty every table of the schema but its version: the next scenario starts afresh."""
    tables = [name for (name,) in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'workhorse' AND c.relkind IN ('r', 'p')"
        " AND c.relname <> 'schema_version' ORDER BY 1").fetchall()]
    conn.execute("TRUNCATE " + ", ".join(f"workhorse.{name}" for name in tables))


# ---- the scenarios (each raises AssertionError when a guarantee does not hold) -----------------


def _queue_scope(q: Queue, conn: psycopg.Connection[Any], kind: Kind) -> None:
    _setup(q, kind)
    _enqueue(q, kind, Q, ["k0", "k1"])
    raiser, stuck = _claim(conn, Q, 2, kind)[0]
    rest = _enqueue(q, kind, Q, ["k2", "k3", None, "k0"])
    elsewhere = _enqueue(q, None, ELSEWHERE, ["k0", None])

    status, state = _back_off(conn, raiser, LONG, "queue")
    assert status is JobStatus.READY
    assert state is not None and (state.scope, state.name, state.key, state.by_job) == (
        "queue", Q, None, raiser.id)
    assert _job(q, raiser.id)[:2] == (JobStatus.READY, 0), "its attempt was not given back"
    assert q.backoffs() == [state]

    for expired in (False, True):  # nothing (not even an expired job), and it says when
        if expired:  # (a plain queue's fast path is taken only while no lease has expired)
            _expire(conn, stuck)
        jobs, next_start = _claim(conn, Q, 20, kind)
        assert _ids(jobs) == set(), f"a backed-off queue admitted {_ids(jobs)}"
        _assert_marker(next_start, conn, state.until)
    assert _job(q, stuck.id) == (JobStatus.ACTIVE, 1, stuck.fence)
    assert _ids(_claim(conn, ELSEWHERE, 20)[0]) == set(elsewhere), "another queue was held"

    _end_backoffs(conn)
    jobs, _ = _claim(conn, Q, 20, kind)
    assert _ids(jobs) == {raiser.id, stuck.id, *rest}, "the queue did not resume"
    attempts = {job.id: job.attempts for job in jobs}
    assert attempts[raiser.id] == 1 and attempts[stuck.id] == 2


def _key_scope(q: Queue, conn: psycopg.Connection[Any], kind: Kind) -> None:
    _setup(q, kind)
    _enqueue(q, kind, Q, ["hot", "hot"])
    raiser, stuck = _claim(conn, Q, 2, kind)[0]
    cold = _enqueue(q, kind, Q, ["cold", "hot", "cold", None, "hot", None, "cold"])
    hot_rest = [cold[1], cold[4]]
    cold = [i for i in cold if i not in hot_rest]
    same_key_elsewhere = _enqueue(q, kind, ELSEWHERE, ["hot"])
    _expire(conn, stuck)

    status, state = _back_off(conn, raiser, LONG, "key")
    assert status is JobStatus.READY
    assert state is not None and (state.scope, state.name, state.key, state.by_job) == (
        "key", Q, "hot", raiser.id)
    assert _job(q, raiser.id)[:2] == (JobStatus.READY, 0), "its attempt was not given back"

    jobs, _ = _claim(conn, Q, 20, kind)
    assert _ids(jobs) == set(cold), "the other keys did not go on, or the backed-off key ran"
    jobs, _ = _claim(conn, Q, 20, kind)
    assert _ids(jobs) == set(), f"a backed-off key's job was claimed: {_ids(jobs)}"
    assert _job(q, stuck.id) == (JobStatus.ACTIVE, 1, stuck.fence), "its expired job was reclaimed"
    # Keys are scoped to their queue (invariant 2): the same key elsewhere runs.
    assert _ids(_claim(conn, ELSEWHERE, 20)[0]) == set(same_key_elsewhere)

    _end_backoffs(conn)
    jobs, _ = _claim(conn, Q, 20, kind)
    assert _ids(jobs) == {raiser.id, stuck.id, *hot_rest}, "the key did not resume"
    attempts = {job.id: job.attempts for job in jobs}
    assert attempts[raiser.id] == 1 and attempts[stuck.id] == 2


def _budget_scope(q: Queue, conn: psycopg.Connection[Any], kind: Kind) -> None:
    """Queues A (of `kind`) and B count budget "api"; A and C run jobs of budget "other", A
    some of no budget too."""
    _setup(q, kind, "A", budgets=("api", "other"))
    _enqueue(q, kind, "A", ["a0", "a1"], budget="api")
    raiser, stuck = _claim(conn, "A", 2, kind)[0]
    api_rest = _enqueue(q, kind, "A", ["a2", "a3"], budget="api")
    other = _enqueue(q, kind, "A", ["a4", "a5"], budget="other")
    plain = _enqueue(q, kind, "A", ["a6", None])
    b_api = _enqueue(q, None, "B", ["b0", None], budget="api")
    c_other = _enqueue(q, None, "C", ["c0"], budget="other")
    _expire(conn, stuck)

    status, state = _back_off(conn, raiser, LONG)  # the default scope: the job's budget
    assert status is JobStatus.READY
    assert state is not None and (state.scope, state.name, state.key, state.by_job) == (
        "budget", "api", None, raiser.id)
    assert _job(q, raiser.id)[:2] == (JobStatus.READY, 0), "its attempt was not given back"

    jobs, _ = _claim(conn, "A", 20, kind)
    assert _ids(jobs) == {*other, *plain}, "A's other jobs did not go on, or api's ran"
    jobs, next_start = _claim(conn, "A", 20, kind)
    assert _ids(jobs) == set(), f"a backed-off budget's job was claimed in A: {_ids(jobs)}"
    _assert_marker(next_start, conn, state.until)
    jobs, next_start = _claim(conn, "B", 20)
    assert _ids(jobs) == set(), f"a backed-off budget's job was claimed in B: {_ids(jobs)}"
    _assert_marker(next_start, conn, state.until)
    assert _ids(_claim(conn, "C", 20)[0]) == set(c_other), "another budget was held"
    assert _job(q, stuck.id) == (JobStatus.ACTIVE, 1, stuck.fence), "its expired job was reclaimed"

    _end_backoffs(conn)
    jobs, _ = _claim(conn, "A", 20, kind)
    assert _ids(jobs) == {raiser.id, stuck.id, *api_rest}, "A did not resume"
    assert _ids(_claim(conn, "B", 20)[0]) == set(b_api), "B did not resume"


SCENARIOS: dict[str, Callable[[Queue, psycopg.Connection[Any], Kind], None]] = {
    "queue": _queue_scope, "key": _key_scope, "budget": _budget_scope,
}


# ---- every path, every scope ------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_backoff_holds_back_exactly_its_target_on_every_path(
        queue: Queue, conn: psycopg.Connection[Any], kind: str) -> None:
    """A queue's backoff holds back its queue alone; a key's passes its key over and the queue
    goes on; a budget's holds back its budget in every queue that counts it (on the paths of
    BUDGET_KINDS). One database, emptied between the scopes; every scope's failure is told."""
    scopes = ["queue", "key", *(["budget"] if kind in BUDGET_KINDS else [])]
    failures = []
    for scope in scopes:
        _reset(conn)
        try:
            SCENARIOS[scope](queue, conn, KINDS[kind])
        except AssertionError as exc:
            failures.append(f"scope {scope}: {exc}")
    assert failures == [], "\n".join(failures)


def test_an_undeclared_budget_can_be_backed_off(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    """A budget jobs name but nobody synced limits nothing, until a handler backs it off."""
    _enqueue(queue, None, "A", [None], budget="ghost")
    [raiser] = _claim(conn, "A", 1)[0]
    ghost = _enqueue(queue, None, "A", [None, "g"], budget="ghost")
    plain = _enqueue(queue, None, "A", [None])
    b_ghost = _enqueue(queue, None, "B", [None], budget="ghost")
    status, state = _back_off(conn, raiser, LONG)
    assert status is JobStatus.READY and state is not None
    assert (state.scope, state.name) == ("budget", "ghost")
    assert _ids(_claim(conn, "A", 20)[0]) == set(plain)
    jobs, next_start = _claim(conn, "B", 20)
    assert jobs == []
    _assert_marker(next_start, conn, state.until)
    _end_backoffs(conn)
    assert _ids(_claim(conn, "A", 20)[0]) == {raiser.id, *ghost}
    assert _ids(_claim(conn, "B", 20)[0]) == set(b_ghost)


@pytest.mark.parametrize("scope", [None, "budget"])
def test_a_job_backs_off_any_budget_it_names(
        queue: Queue, conn: psycopg.Connection[Any], scope: str | None) -> None:
    """`budget=` names any budget, also one the job does not count: that budget is held back
    everywhere, the job's own queue is not (its job runs again at once, attempt given back)."""
    queue.sync_budgets("bo", [BudgetDefinition("api", max_active=10)])
    _enqueue(queue, None, "D", [None])
    [raiser] = _claim(conn, "D", 1)[0]
    api = _enqueue(queue, None, "A", [None, "k"], budget="api")
    status, state = _back_off(conn, raiser, LONG, scope, "api")
    assert status is JobStatus.READY and state is not None
    assert (state.scope, state.name, state.by_job) == ("budget", "api", raiser.id)
    assert _claim(conn, "A", 20)[0] == []
    [again] = _claim(conn, "D", 20)[0]
    assert (again.id, again.attempts) == (raiser.id, 1)
    _end_backoffs(conn)
    assert _ids(_claim(conn, "A", 20)[0]) == set(api)


def test_the_work_resumes_when_backoffs_end_by_the_clock(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    """Real backoffs of 1.5 s, of a queue, a key and a budget, run out. Whatever the machine's
    speed, no job of a target starts (the claim's `started_at`) before its backoff's end, and
    each target resumes with the first claim after it."""
    queue.sync_budgets("bo", [BudgetDefinition("api", max_active=10)])
    _enqueue(queue, None, "Q1", [None])
    _enqueue(queue, None, "Q2", ["hot"])
    _enqueue(queue, None, "Q3", [None], budget="api")
    raisers = [_claim(conn, name, 1)[0][0] for name in ("Q1", "Q2", "Q3")]
    waiting = {"Q1": _enqueue(queue, None, "Q1", [None, "x"]),
               "Q2": _enqueue(queue, None, "Q2", ["hot"]),
               "Q3": _enqueue(queue, None, "Q3", [None], budget="api")}
    untils = {}
    for raiser, scope in zip(raisers, ("queue", "key", "budget"), strict=True):
        status, state = _back_off(conn, raiser, 1.5, scope)
        assert status is JobStatus.READY and state is not None
        untils[raiser.queue] = state.until
    started: dict[str, list[ClaimedJob]] = {name: [] for name in untils}
    deadline = max(untils.values()) + timedelta(seconds=20)
    while any(len(jobs) < len(waiting[name]) + 1 for name, jobs in started.items()):
        assert _now(conn) < deadline, f"the work did not resume: {started}"
        for name in started:
            started[name] += _claim(conn, name, 20)[0]
    for name, jobs in started.items():
        assert _ids(jobs) == {*waiting[name], next(r.id for r in raisers if r.queue == name)}
        early = [j.id for j in jobs if j.started_at is not None and j.started_at < untils[name]]
        assert early == [], f"{name}: jobs started before the backoff ended: {early}"
        assert min(j.started_at for j in jobs if j.started_at) < untils[name] + timedelta(
            seconds=5), "resumed late"


def _in_open_transaction(database_url: str, job: ClaimedJob, scope: str,
                         broken: bool) -> psycopg.Connection[Any]:
    """A connection whose open transaction has backed off `scope` (not committed yet). With
    `broken`, the backoff is written without its target's admission lock."""
    holder = psycopg.connect(database_url)
    if broken:
        text = _sql.function_files()[_sql.function_name("backoff")]
        for lock_id in (_sql.function_name("_budget_lock_id"),
                        _sql.function_name("_admission_lock_id")):
            lock = f"PERFORM pg_advisory_xact_lock(workhorse.{lock_id}(v_name));"
            assert text.count(lock) == 1
            text = text.replace(lock, "NULL;")
        holder.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
        holder.commit()
    _ops.execute(holder, _ops.backoff(job.id, job.fence, LONG, scope, None, True))
    return holder


def _claim_meanwhile(conn: psycopg.Connection[Any], database_url: str,
                     holder: psycopg.Connection[Any], queue: str) -> tuple[str | None, set[int]]:
    """Claim `queue` on another connection while `holder`'s transaction is open; commit it once
    the claim waits for it (or has finished). Returns what the claim waited on, and its jobs."""
    from _integration import lock_wait

    got: list[set[int]] = []
    errors: list[BaseException] = []
    with psycopg.connect(database_url, autocommit=True) as other:
        def run() -> None:
            try:
                got.append(_ids(_claim(other, queue, 20)[0]))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        waited = lock_wait(conn, other.info.backend_pid, lambda: bool(got or errors),
                           timeout=5, blocked_by=holder.info.backend_pid)
        holder.commit()
        thread.join(30)
    assert not errors, errors
    return waited, got[0]


def _exact_like_a_pause(q: Queue, conn: psycopg.Connection[Any], database_url: str,
                        scope: str, broken: bool) -> None:
    q.sync_budgets("bo", [BudgetDefinition("api", max_active=10)])
    budget = "api" if scope == "budget" else None
    _enqueue(q, None, Q, ["hot"], budget=budget)
    [raiser] = _claim(conn, Q, 1)[0]
    held = _enqueue(q, None, Q, ["hot", "hot"], budget=budget)
    _enqueue(q, None, Q, ["cold"])
    b_held = _enqueue(q, None, "B", [None], budget="api") if scope == "budget" else []
    holder = _in_open_transaction(database_url, raiser, scope, broken)
    try:
        waited, took = _claim_meanwhile(conn, database_url, holder, Q)
    finally:
        holder.close()
    assert waited == "advisory", f"the claim did not wait for the backoff: {waited}"
    assert not took & {raiser.id, *held}, f"a claim that waited for the backoff admitted {took}"
    if b_held:  # and the budget's other queue, claimed afterwards
        assert _claim(conn, "B", 20)[0] == []


@pytest.mark.parametrize("scope", ["queue", "key", "budget"])
def test_a_claim_that_waited_for_a_backoff_sees_it(
        queue: Queue, conn: psycopg.Connection[Any], database_url: str, scope: str) -> None:
    """Exact like a pause: a backoff takes its target's admission lock, so a claim that queued
    behind it (its queue's lock in shared mode, an ungoverned queue until then, or the budget's)
    reads it once it commits. On a backoff written without the lock, the check fails."""
    _exact_like_a_pause(queue, conn, database_url, scope, broken=False)


@pytest.mark.parametrize("scope", ["queue", "budget"])
def test_the_lock_check_fails_on_a_backoff_that_takes_no_lock(
        queue: Queue, conn: psycopg.Connection[Any], database_url: str, scope: str) -> None:
    with pytest.raises(AssertionError):
        _exact_like_a_pause(queue, conn, database_url, scope, broken=True)


# ---- later backoffs, clearing, housekeeping, operator controls ----------------------------------


@pytest.mark.parametrize("scope", ["queue", "key", "budget"])
def test_a_later_backoff_of_the_same_target_keeps_the_later_end(
        queue: Queue, conn: psycopg.Connection[Any], scope: str) -> None:
    queue.sync_budgets("bo", [BudgetDefinition("api", max_active=10)])
    _enqueue(queue, None, Q, ["hot"] * 4, budget="api")
    j1, j2, j3, j4 = _claim(conn, Q, 4)[0]
    _, first = _back_off(conn, j1, LONG, scope, release=False)
    assert first is not None
    # A shorter one (from current_job().backoff(), and from a raise) leaves the end and its job.
    status, shorter = _back_off(conn, j2, 5, scope, release=False)
    assert status is JobStatus.ACTIVE and shorter is not None
    assert shorter.until == first.until
    status, shorter = _back_off(conn, j3, 5, scope)
    assert status is JobStatus.READY and shorter is not None and shorter.until == first.until
    assert [(b.until, b.by_job) for b in queue.backoffs()] == [(first.until, j1.id)]
    _, later = _back_off(conn, j4, 2 * LONG, scope, release=False)
    assert later is not None and later.until > first.until
    assert [(b.scope, b.until, b.by_job) for b in queue.backoffs()] == [
        (scope, later.until, j4.id)]
    stamp = _control_row(conn, Q)
    assert stamp == (None if scope == "budget" else (False, None, later.until))
    assert _job(queue, j1.id)[:2] == (JobStatus.ACTIVE, 1)  # without release: it runs on


def test_a_key_backoff_outlasting_its_queues_own_holds_only_the_key(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    _enqueue(queue, None, Q, ["hot", "cold"])
    hot, cold = _claim(conn, Q, 2)[0]
    waiting = _enqueue(queue, None, Q, ["hot", "cold", None])
    _, by_key = _back_off(conn, hot, 2 * LONG, "key")
    _, by_queue = _back_off(conn, cold, LONG, "queue")
    assert by_key is not None and by_queue is not None
    assert _control_row(conn, Q) == (False, None, by_key.until)
    assert _claim(conn, Q, 20)[0] == []
    _end_backoffs(conn, "queue")
    assert _ids(_claim(conn, Q, 20)[0]) == {cold.id, waiting[1], waiting[2]}


def _listen(database_url: str) -> psycopg.Connection[Any]:
    listener = psycopg.connect(database_url, autocommit=True)
    listener.execute(_sql.statement("listen"))
    return listener


def _woken(listener: psycopg.Connection[Any], timeout: float = 5.0) -> set[str]:
    """The queues the claimers were told about (NOTIFY payloads) within `timeout`."""
    names: set[str] = set()
    select.select([listener.fileno()], [], [], timeout)
    for notify in listener.notifies(timeout=0.2, stop_after=100):
        names.add(notify.payload)
    return names


def test_clearing_backoffs_resumes_at_once_and_wakes_the_claimers(
        queue: Queue, conn: psycopg.Connection[Any], database_url: str) -> None:
    queue.sync_budgets("bo", [BudgetDefinition("api", max_active=10)])
    _enqueue(queue, None, Q, ["hot", "warm", None])
    hot, warm, plain = _claim(conn, Q, 3)[0]
    _enqueue(queue, None, "A", [None], budget="api")
    [api_job] = _claim(conn, "A", 1)[0]
    b_api = _enqueue(queue, None, "B", [None], budget="api")
    _back_off(conn, hot, LONG, "key")
    _back_off(conn, warm, LONG, "key")
    _back_off(conn, plain, LONG, "queue")
    _back_off(conn, api_job, LONG, "budget")
    assert len(queue.backoffs()) == 4

    listener = _listen(database_url)
    try:
        cleared = queue.clear_backoff(Q, key="hot")
        assert [(b.scope, b.key, b.by_job) for b in cleared] == [("key", "hot", hot.id)]
        assert Q in _woken(listener)
        assert {(b.scope, b.key) for b in queue.backoffs()} == {
            ("key", "warm"), ("queue", None), ("budget", None)}
        assert _claim(conn, Q, 20)[0] == []          # its own backoff still holds it

        cleared = queue.clear_backoff(Q)
        assert [(b.scope, b.key) for b in cleared] == [("key", "warm"), ("queue", None)]
        assert Q in _woken(listener)
        assert _ids(_claim(conn, Q, 20)[0]) == {hot.id, warm.id, plain.id}
        assert _control_row(conn, Q) is None, "a control row that held only a stamp stayed"
        assert queue.clear_backoff(Q) == []

        assert _claim(conn, "B", 20)[0] == []
        cleared = queue.clear_budget_backoff("api")
        assert [(b.scope, b.name, b.by_job) for b in cleared] == [("budget", "api", api_job.id)]
        assert {"A", "B"} <= _woken(listener)
        assert _ids(_claim(conn, "B", 20)[0]) == set(b_api)
        assert _ids(_claim(conn, "A", 20)[0]) == {api_job.id}
        assert queue.backoffs() == [] and queue.clear_budget_backoff("api") == []
    finally:
        listener.close()


def test_clearing_a_paused_queues_backoff_keeps_it_paused(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    _enqueue(queue, None, Q, [None, None])
    [raiser] = _claim(conn, Q, 1)[0]
    _back_off(conn, raiser, LONG, "queue")
    queue.pause(Q)
    queue.clear_backoff(Q)
    assert _control_row(conn, Q) == (True, None, None)
    assert _claim(conn, Q, 20) == ([], None)
    queue.resume(Q)
    assert len(_claim(conn, Q, 20)[0]) == 2


def test_housekeeping_deletes_ended_backoffs_and_the_rows_they_alone_kept(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    queue.sync_budgets("bo", [BudgetDefinition("api", max_active=10)])
    for name in ("ended", "paused", "overridden", "in-force"):
        _enqueue(queue, None, name, [None], budget="api" if name == "ended" else None)
    raisers = {name: _claim(conn, name, 1)[0][0] for name in
               ("ended", "paused", "overridden", "in-force")}
    for name in ("ended", "paused", "overridden"):
        _back_off(conn, raisers[name], LONG, "queue")
    _back_off(conn, raisers["ended"], LONG, "budget", release=False)
    queue.pause("paused")
    queue.override_policy("overridden", max_active=5)
    _end_backoffs(conn)
    _, in_force = _back_off(conn, raisers["in-force"], LONG, "queue")
    assert in_force is not None

    _ops.execute(conn, _ops.housekeeping())
    rows = conn.execute("SELECT scope, name FROM workhorse.backoffs").fetchall()
    assert rows == [("queue", "in-force")]
    assert _control_row(conn, "ended") is None
    assert _control_row(conn, "paused") == (True, None, None)
    overridden = _control_row(conn, "overridden")
    assert overridden is not None and overridden[1] is not None and overridden[2] is None
    assert _control_row(conn, "in-force") == (False, None, in_force.until)
    assert [b.name for b in queue.backoffs()] == ["in-force"]


@pytest.mark.parametrize("control", ["pause_resume", "override_clear"])
def test_operator_controls_do_not_end_a_backoff_in_force(
        queue: Queue, conn: psycopg.Connection[Any], control: str) -> None:
    """Resume and clear_override delete a control row that holds nothing else; never one whose
    backoff is in force (resume must not end a backoff). Once it ended, they may."""
    _enqueue(queue, None, Q, [None, None])
    [raiser] = _claim(conn, Q, 1)[0]
    _, state = _back_off(conn, raiser, LONG, "queue")
    assert state is not None

    def operate() -> None:
        if control == "pause_resume":
            queue.pause(Q)
            queue.resume(Q)
        else:
            queue.override_policy(Q, max_active=5)
            queue.clear_override(Q)

    operate()
    assert _control_row(conn, Q) == (False, None, state.until)
    jobs, next_start = _claim(conn, Q, 20)
    assert jobs == [], "an operator control ended the backoff"
    _assert_marker(next_start, conn, state.until)
    _end_backoffs(conn)
    operate()
    assert _control_row(conn, Q) is None
    assert len(_claim(conn, Q, 20)[0]) == 2


# ---- the job that backs off ---------------------------------------------------------------------


@pytest.mark.parametrize("release", [True, False])
def test_a_stale_fence_writes_nothing(
        queue: Queue, conn: psycopg.Connection[Any], release: bool) -> None:
    """The handler's lease expired and another claim took the job: its backoff (as any
    outcome of it) is refused, and nothing is written."""
    _enqueue(queue, None, Q, ["k"], budget="api")
    [old] = _claim(conn, Q, 1)[0]
    _expire(conn, old)
    [job] = _claim(conn, Q, 1)[0]
    assert (job.id, job.attempts) == (old.id, 2)
    before = _written(conn)
    for stale in (old, replace(job, fence=job.fence + 1000)):
        for scope in (None, "queue", "key", "budget"):
            assert _back_off(conn, stale, LONG, scope, release=release) == (None, None)
    assert _written(conn) == before


def test_a_release_resent_after_it_was_recorded_writes_nothing_more(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    """The recorder resends a release whose reply it lost: the job waits under the same fence,
    and the resend neither extends the backoff nor takes another attempt back."""
    _enqueue(queue, None, Q, [None])
    [job] = _claim(conn, Q, 1)[0]
    status, state = _back_off(conn, job, 5, "queue")
    assert status is JobStatus.READY and state is not None
    before = _written(conn)
    assert _back_off(conn, job, LONG, "queue") == (JobStatus.READY, None)
    assert _written(conn) == before


def test_a_released_job_whose_cancel_was_requested_ends_canceled(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    _enqueue(queue, None, Q, [None, None])
    [job] = _claim(conn, Q, 1)[0]
    assert queue.cancel_jobs([job.id]) == [job.id]
    status, state = _back_off(conn, job, LONG, "queue")
    assert status is JobStatus.CANCELED
    assert _job(queue, job.id)[0] is JobStatus.CANCELED
    # The downstream's "slow down" stands: the queue is backed off all the same.
    assert state is not None and [b.scope for b in queue.backoffs()] == ["queue"]
    assert _claim(conn, Q, 20)[0] == []


@pytest.mark.parametrize("release", [True, False])
@pytest.mark.parametrize("scope", ["key", "budget"])
def test_a_scope_the_job_lacks_raises_and_writes_nothing(
        queue: Queue, conn: psycopg.Connection[Any], scope: str, release: bool) -> None:
    _enqueue(queue, None, Q, [None])   # no key, no budget
    [job] = _claim(conn, Q, 1)[0]
    before = _written(conn)
    with pytest.raises(InvalidOptionsError, match=scope):
        _back_off(conn, job, LONG, scope, release=release)
    assert _written(conn) == before
    assert _job(queue, job.id) == (JobStatus.ACTIVE, 1, job.fence)


# ---- bad input ----------------------------------------------------------------------------------

class _Opaque:
    """Something that is no duration (a stable repr: xdist's workers must agree on test ids)."""

    def __repr__(self) -> str:
        return "<opaque>"


BAD_RETRY_AFTER: list[Any] = [
    0, 0.0, -1, -0.001, 86400.001, 86401, 10**9, 10**400, math.nan, math.inf, -math.inf,
    True, False, None, "", "abc", "3 s", "-5s", "0s", "25h", "1e3", "nan", "inf", [], {},
    _Opaque(), timedelta(0), timedelta(seconds=-1), timedelta(days=2), b"30",
]
BAD_SCOPES: list[Any] = ["Queue", "", "keys", "job", " queue", 1, True, b"queue", ["queue"]]
BAD_NAMES: list[Any] = ["", "x" * 256, "a\x00b", "\ud800", 1, b"api", ["api"]]


@pytest.mark.parametrize("retry_after", BAD_RETRY_AFTER, ids=repr)
def test_backoff_refuses_a_bad_retry_after(retry_after: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        Backoff(retry_after)
    with pytest.raises(InvalidOptionsError):
        Backoff(retry_after=retry_after, scope="queue")


def test_backoff_takes_good_retry_afters() -> None:
    assert [Backoff(v).retry_after for v in (
        0.001, 1, 2.5, 86400, "30s", "500ms", "2m", "1d", timedelta(minutes=1))] == [
        0.001, 1.0, 2.5, 86400.0, 30.0, 0.5, 120.0, 86400.0, 60.0]
    signal = Backoff(2, budget="api")
    assert (signal.scope, signal.budget) == (None, "api")


@pytest.mark.parametrize("scope", BAD_SCOPES, ids=repr)
def test_backoff_refuses_a_bad_scope(scope: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        Backoff(1, scope=scope)


@pytest.mark.parametrize("budget", BAD_NAMES, ids=repr)
def test_backoff_refuses_a_bad_budget_name(budget: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        Backoff(1, budget=budget)
    with pytest.raises(InvalidOptionsError):
        Backoff(1, scope="budget", budget=budget)


@pytest.mark.parametrize("scope", ["key", "queue"])
def test_backoff_refuses_a_budget_with_another_scope(scope: str) -> None:
    with pytest.raises(InvalidOptionsError, match="budget"):
        Backoff(1, scope=scope, budget="api")


@pytest.mark.parametrize("reason", [1, None, b"x"], ids=repr)
def test_backoff_refuses_a_reason_that_is_not_text(reason: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        Backoff(1, reason=reason)


def test_current_job_backoff_checks_before_it_records() -> None:
    """`current_job().backoff(...)` checks as Backoff does; a refused one is never recorded."""
    recorded: list[Backoff] = []
    context = JobContext(id=1, task=TASK, queue=Q, concurrency_key=None, attempt=1,
                         max_attempts=3, scheduled_for=None, back_off=recorded.append)
    for bad in ({"retry_after": 0}, {"retry_after": math.nan}, {"retry_after": 1, "scope": "x"},
                {"retry_after": 1, "budget": ""}, {"retry_after": 1, "scope": "key",
                                                   "budget": "api"}):
        with pytest.raises(InvalidOptionsError):
            context.backoff(**bad)
    assert recorded == []
    context.backoff("2s", scope="key")
    assert [(b.retry_after, b.scope) for b in recorded] == [(2.0, "key")]


# What the recorder sends, refused by the SQL itself (the check in Backoff is not its only one).
SQL_BAD: dict[str, tuple[float, str | None, str | None]] = {
    "zero": (0.0, None, None),
    "negative": (-1.0, None, None),
    "nan": (math.nan, None, None),
    "inf": (math.inf, None, None),
    "over a day": (86400.5, None, None),
    "unknown scope": (1.0, "keys", None),
    "budget with key": (1.0, "key", "api"),
    "budget with queue": (1.0, "queue", "api"),
}


def test_the_backoff_statement_refuses_bad_input_and_writes_nothing(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    _enqueue(queue, None, Q, ["k"], budget="api")
    [job] = _claim(conn, Q, 1)[0]
    before = _written(conn)
    for case, (seconds, scope, budget) in SQL_BAD.items():
        for release in (True, False):
            with pytest.raises(InvalidOptionsError):
                _back_off(conn, job, seconds, scope, budget, release=release)
            assert _written(conn) == before, case


CLEAR_BAD: list[tuple[str, dict[str, Any]]] = [
    *[("queue", {"queue": name}) for name in [*BAD_NAMES, None]],
    *[("key", {"queue": Q, "key": name}) for name in BAD_NAMES],
    *[("budget", {"name": name}) for name in [*BAD_NAMES, None]],
]


def test_clearing_refuses_bad_input_and_clears_nothing(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    _enqueue(queue, None, Q, ["k"], budget="api")
    [job] = _claim(conn, Q, 1)[0]
    _back_off(conn, job, LONG, "key", release=False)
    _back_off(conn, job, LONG, "budget", release=False)
    before = _written(conn)
    for what, args in CLEAR_BAD:
        with pytest.raises(InvalidOptionsError):
            if what == "budget":
                queue.clear_budget_backoff(args["name"])
            else:
                queue.clear_backoff(args["queue"], **{k: v for k, v in args.items()
                                                      if k != "queue"})
        assert _written(conn) == before, (what, args)
    # The operation beneath: a scope other than a queue's or a budget's, a key with a budget.
    for scope, name, key in [("queues", Q, None), ("key", Q, "k"), ("", Q, None),
                             (None, Q, None), ("budget", "api", "k")]:
        with pytest.raises(InvalidOptionsError):
            _ops.execute(conn, _ops.clear_backoff(scope, name, key))  # type: ignore[arg-type]
        assert _written(conn) == before, scope
    assert len(queue.backoffs()) == 2


# ---- the checks fail on a claim that ignores backoffs -----------------------------------------

CLAIM = _sql.function_name("claim")
CHOOSE = _sql.function_name("_choose_units")

# (function, old text, new text): a claim that does not see one kind of backoff.
BROKEN: dict[str, tuple[str, str, str]] = {
    # The claim reads the queue's own backoff and returns nothing: never.
    "queue backoff ignored": (CLAIM, "IF v_queue_off IS NOT NULL THEN", "IF false THEN"),
    # The plain governed queue's fast path does not step aside for a control row.
    "fast path ignores the control row": (
        CLAIM, "AND NOT EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = p.queue)",
        ""),
    # No key is ever read as backed off (every path then admits its jobs).
    "key backoffs ignored": (
        CLAIM, "COALESCE(array_agg(b.ckey) FILTER (WHERE b.scope = 'key'), '{}')",
        "'{}'::text[]"),
    # The choice in units never joins the budget's backoff.
    "budget backoff ignored": (CHOOSE, "CASE WHEN bo.until > p_now THEN bo.until END AS off_until",
                               "NULL::timestamptz AS off_until"),
}

# Which scenario each broken claim must fail, on which paths.
BROKEN_RUNS: list[tuple[str, str, str]] = [
    *[("queue backoff ignored", "queue", kind) for kind in KINDS if kind != "plain"],
    ("fast path ignores the control row", "queue", "plain"),
    *[("key backoffs ignored", "key", kind) for kind in KINDS],
    *[("budget backoff ignored", "budget", kind) for kind in ("ungoverned", "per_key", "fair")],
]

def _install_broken(conn: psycopg.Connection[Any], broken: str) -> None:
    function, old, new = BROKEN[broken]
    text = _sql.function_files()[function]
    assert text.count(old) == 1, (function, old)
    conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                 .replace(old, new))


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_checks_fail_on_a_claim_that_ignores_backoffs(
        queue: Queue, conn: psycopg.Connection[Any], broken: str) -> None:
    """Without this, a scenario above could pass because its claim never met the backoff: on a
    deliberately broken copy of the claim, each scenario it breaks fails on each path."""
    _install_broken(conn, broken)
    passed = []
    for name, scenario, kind in BROKEN_RUNS:
        if name != broken:
            continue
        _reset(conn)
        try:
            SCENARIOS[scenario](queue, conn, KINDS[kind])
        except AssertionError:
            continue
        passed.append(f"{scenario}-{kind}")
    assert passed == [], f"these checks passed on a claim where {broken}: {passed}"
