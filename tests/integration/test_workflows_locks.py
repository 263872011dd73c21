"""Completions of parents of shared dependents never deadlock (issue #28, docs/design.md "Locks"):
two transactions on two connections complete the parents of two multi-parent dependents in
opposite orders, concurrently, many rounds; both commit, and each dependent is released once.
Nor does canceling a workflow while one of its members completes.

The release runs at commit, for all of a transaction's successes together, its dependents
locked in (queue, id) order (the release function in sql/workflows/). The broken variant is the
release run at the end of each statement instead (`SET CONSTRAINTS ... IMMEDIATE`, which is how
the row trigger released before): the same rounds then deadlock, and the checker fails."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from workhorse import App, JobStatus, Queue, _ops, _sql, chain, group
from workhorse._enqueue import _single

RELEASE_TRIGGER = "workhorse.jobs_workflow_trg_release"


@pytest.fixture
def app(database_url: str) -> Any:
    app = App("wfl", database_url=database_url)

    @app.task(name="wfl.add", queue="wfl")
    def add(a: int, b: int = 0) -> int:
        return a + b

    app.t = {"add": add}  # type: ignore[attr-defined]
    yield app
    app.close()


def _diamonds(app: App, database_url: str) -> tuple[dict[str, tuple[int, int]], list[int]]:
    """Parents a1, a2 of c1 and b1, b2 of c2, claimed: {name: (id, fence)}, [c1, c2]."""
    add = app.t["add"]  # type: ignore[attr-defined]
    parents = {name: add.delay(1) for name in ("a1", "a2", "b1", "b2")}
    c1 = add.apply_async(args=(0,), queue="wfl-c", depends_on=[parents["a1"], parents["a2"]])
    c2 = add.apply_async(args=(0,), queue="wfl-c", depends_on=[parents["b1"], parents["b2"]])
    with psycopg.connect(database_url, autocommit=True) as conn:
        claimed = {job.id: job.fence for job in Queue(conn).claim("wfl", 4, 60.0)}
    assert set(claimed) == {h.id for h in parents.values()}
    return {name: (h.id, claimed[h.id]) for name, h in parents.items()}, [c1.id, c2.id]


def _complete(conn: psycopg.Connection[Any], *jobs: tuple[int, int]) -> None:
    accepted = Queue(conn).complete_many([(job_id, fence, 1) for job_id, fence in jobs])
    assert accepted == {job_id for job_id, _ in jobs}


def _round(database_url: str, jobs: dict[str, tuple[int, int]], immediate: bool,
           one_statement: bool) -> list[BaseException]:
    """T1 completes a1 then b1, T2 b2 then a2 (each pair in one statement, or in two statements
    with the other transaction's first one in between); both then commit. The errors raised."""
    errors: list[BaseException] = []
    t1 = psycopg.connect(database_url)
    t2 = psycopg.connect(database_url)
    try:
        if immediate:
            for conn in (t1, t2):
                conn.execute(f"SET CONSTRAINTS {RELEASE_TRIGGER} IMMEDIATE")

        def run(conn: psycopg.Connection[Any], *steps: tuple[tuple[int, int], ...],
                gate: threading.Barrier | None = None) -> None:
            try:
                for step in steps:
                    if gate is not None:
                        gate.wait(timeout=10)
                    _complete(conn, *step)
                conn.commit()
            except psycopg.Error as exc:
                errors.append(exc)
                conn.rollback()

        if one_statement:
            gate = threading.Barrier(2)
            threads = [threading.Thread(target=run, args=(t1, (jobs["a1"], jobs["b1"])),
                                        kwargs={"gate": gate}),
                       threading.Thread(target=run, args=(t2, (jobs["b2"], jobs["a2"])),
                                        kwargs={"gate": gate})]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            return errors
        # Each transaction's first success, then the second ones at once.
        _complete(t1, jobs["a1"])
        _complete(t2, jobs["b2"])
        first = threading.Thread(target=run, args=(t1, (jobs["b1"],)))
        first.start()
        time.sleep(0.2)  # T1's second statement runs (and, released at once, waits for T2)
        run(t2, (jobs["a2"],))
        first.join(timeout=30)
        return errors
    finally:
        t1.close()
        t2.close()


def check_no_deadlock(app: App, database_url: str, rounds: int, immediate: bool,
                      one_statement: bool) -> None:
    """Every round: both transactions commit, each dependent released exactly once, ready."""
    for _ in range(rounds):
        jobs, children = _diamonds(app, database_url)
        errors = _round(database_url, jobs, immediate, one_statement)
        assert not errors, errors
        for child in children:
            job = app.get_job(child)
            assert job is not None and job.status is JobStatus.READY, job
            assert job.workflow_id is not None  # a depends_on job: a workflow of one member
            releases = {i: n for i, n, _ in
                        app._run(_single(_ops.workflow_releases(job.workflow_id)))}
            assert releases == {child: 1}, releases


def test_opposite_orders_across_statements_never_deadlock(app: App, database_url: str) -> None:
    check_no_deadlock(app, database_url, rounds=10, immediate=False, one_statement=False)


def test_opposite_orders_in_one_statement_never_deadlock(app: App, database_url: str) -> None:
    # A worker's batch of successes is one statement (a completion, or the claim recording them).
    check_no_deadlock(app, database_url, rounds=100, immediate=False, one_statement=True)


def test_the_checker_fails_on_a_release_at_each_statement(app: App, database_url: str) -> None:
    """The broken variant: each statement's successes released at its end, dependents locked as
    they come (the row trigger's old way): the opposite orders deadlock, PostgreSQL aborts one
    transaction (its completions lost unless resent), and the checker fails."""
    with pytest.raises(AssertionError, match=r"[Dd]eadlock"):
        check_no_deadlock(app, database_url, rounds=1, immediate=True, one_statement=False)


def _cancel_while_completing(app: App, database_url: str, waiting_first: bool
                             ) -> tuple[list[BaseException], int, int]:
    """T1 records the success of p (the parent of waiting c) and commits a moment later; T2
    cancels the workflow meanwhile (`WorkflowHandle.cancel`: p and c). `waiting_first`: the
    broken variant, T2 locks the waiting member before the cancel waits for p's row."""
    add = app.t["add"]  # type: ignore[attr-defined]
    h = chain(add.si(1), add.s(2).set(queue="wfl-c")).delay()
    p, c = (job.id for job in h.jobs())
    with psycopg.connect(database_url, autocommit=True) as conn:
        [claimed] = Queue(conn).claim("wfl", 1, 60.0)
    assert claimed.id == p
    errors: list[BaseException] = []
    t1 = psycopg.connect(database_url)
    t2 = psycopg.connect(database_url)
    try:
        _complete(t1, (p, claimed.fence))

        def cancel() -> None:
            try:
                if waiting_first:
                    t2.execute("SELECT 1 FROM workhorse.jobs WHERE id = %s FOR UPDATE", (c,))
                t2.execute(_sql.statement("cancel_jobs"),
                           ([p, c], _ops.DEFAULT_RETENTION_JSON))
                t2.commit()
            except psycopg.Error as exc:
                errors.append(exc)
                t2.rollback()

        thread = threading.Thread(target=cancel)
        thread.start()
        time.sleep(0.3)  # the cancel waits for p's row
        try:
            t1.commit()  # the release locks c
        except psycopg.Error as exc:
            errors.append(exc)
        thread.join(timeout=30)
    finally:
        t1.close()
        t2.close()
    return errors, p, c


def test_canceling_a_workflow_while_a_member_completes_never_deadlocks(
        app: App, database_url: str) -> None:
    for _ in range(5):
        errors, p, c = _cancel_while_completing(app, database_url, waiting_first=False)
        assert not errors, errors
        # The success committed first and released c; the cancel then canceled c, ready.
        assert app.get_job(p).status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
        assert app.get_job(c).status is JobStatus.CANCELED  # type: ignore[union-attr]


def test_the_cancel_check_fails_when_the_waiting_member_is_locked_first(
        app: App, database_url: str) -> None:
    errors, _, _ = _cancel_while_completing(app, database_url, waiting_first=True)
    assert any(isinstance(e, psycopg.errors.DeadlockDetected) for e in errors), errors


def _immediate_round(app: App, database_url: str) -> list[int]:
    """A chord of two whose members' successes are recorded by two statements of one
    transaction that set every constraint IMMEDIATE (as Django's constraint checks do): the
    callback's release counts."""
    add = app.t["add"]  # type: ignore[attr-defined]
    h = chain(group(add.si(1), add.si(2)), add.s().set(queue="wfl-c")).delay()
    with psycopg.connect(database_url, autocommit=True) as conn:
        claimed = Queue(conn).claim("wfl", 2, 60.0)
    with psycopg.connect(database_url) as conn:
        conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for job in claimed:
            _complete(conn, (job.id, job.fence))
        conn.commit()
    return [n for _, n, _ in app._run(_single(_ops.workflow_releases(h.id)))]


def check_released_once_when_immediate(app: App, database_url: str) -> None:
    assert _immediate_round(app, database_url) == [0, 0, 1]


def test_releases_stay_exact_under_set_constraints_immediate(app: App,
                                                             database_url: str) -> None:
    check_released_once_when_immediate(app, database_url)


def test_the_immediate_check_fails_when_the_release_fires_before_the_note(
        app: App, database_url: str) -> None:
    """The broken variant: the release trigger renamed to sort before the row trigger (the
    triggers of one event fire in name order), so, made immediate, it runs before the success
    is noted: the callback is never released, and the checker fails."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"ALTER TRIGGER {RELEASE_TRIGGER.split('.')[1]} ON workhorse.jobs "
                     "RENAME TO jobs_workflow_a_release")
    try:
        with pytest.raises(AssertionError):
            check_released_once_when_immediate(app, database_url)
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("ALTER TRIGGER jobs_workflow_a_release ON workhorse.jobs "
                         f"RENAME TO {RELEASE_TRIGGER.split('.')[1]}")
