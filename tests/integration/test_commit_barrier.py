"""The worker's claims that queue for the queue's admission lock commit asynchronously and are
followed by a commit barrier (sql/claim/'s "The commit after the lock"). The crash that shows the
barrier is needed is in tests/faults/test_faults_commit.py; here, what each part does on its own:

- a claim asked for an asynchronous commit that had to wait for the lock sets
  `synchronous_commit` off for its transaction only and says so (an 'unflushed' marker); one
  that got the lock at once, or was not asked, commits synchronously and says nothing;
- a claim whose successes are awaited by a registered result waiter commits synchronously
  again (a waiter must not read a result a crash could take back);
- the claim operation sends the barrier after an unflushed claim that took jobs or recorded
  successes, and only then returns; otherwise it sends none;
- the barrier's commit flushes the WAL that an asynchronous commit left unflushed."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from workhorse import EnqueueOptions, Queue, _ops, _sql
from workhorse.types import ConcurrencyPolicyDefinition

QUEUE = "barrier"
POLICY = [ConcurrencyPolicyDefinition(queue=QUEUE, max_active=8)]


@pytest.fixture
def governed(queue: Queue) -> Queue:
    queue.sync_concurrency_policies("tests", POLICY)
    queue.enqueue_many([("t.task", {"args": [n], "kwargs": {}}, EnqueueOptions(queue=QUEUE))
                        for n in range(4)])
    return queue


def _claim_in_a_transaction(url: str, own_transaction: bool,
                            successes: Sequence[tuple[int, int]] = (),
                            contended: bool = False) -> tuple[list[Any], str]:
    """One claim's statement inside an open transaction: its rows, and the transaction's
    synchronous_commit before the commit. `contended`: another transaction holds the queue's
    admission lock (a policy sync, which takes it until its commit) for the claim's first 0.3 s."""
    holder = psycopg.connect(url)
    try:
        if contended:
            Queue(holder).sync_concurrency_policies("tests", POLICY)  # the lock, until commit
            threading.Timer(0.3, holder.commit).start()
        with psycopg.connect(url) as conn:
            if successes:
                rows = conn.execute(_sql.statement("complete_and_claim"), (
                    QUEUE, 1, 30.0, [i for i, _ in successes], [f for _, f in successes],
                    ["null"] * len(successes), None, None, None, own_transaction)).fetchall()
            else:
                rows = conn.execute(_sql.statement("claim"), (
                    QUEUE, 1, 30.0, None, False, own_transaction)).fetchall()
            setting = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()[0]
            conn.commit()
    finally:
        time.sleep(0.35 if contended else 0)
        holder.close()
    return rows, setting


def _unflushed(rows: list[Any]) -> bool:
    return any(row[0] is None and row[15] == "unflushed" for row in rows)


def test_a_claim_that_waited_for_the_lock_commits_asynchronously_and_says_so(
        governed: Queue, database_url: str) -> None:
    rows, setting = _claim_in_a_transaction(database_url, True, contended=True)
    assert setting == "off" and _unflushed(rows)
    assert len([row for row in rows if row[0] is not None]) == 1
    for own, contended in ((True, False), (False, True), (False, False)):
        rows, setting = _claim_in_a_transaction(database_url, own, contended=contended)
        assert setting == "on" and not _unflushed(rows), (own, contended)
    with psycopg.connect(database_url, autocommit=True) as conn:  # the next transaction
        assert conn.execute("SELECT current_setting('synchronous_commit')").fetchone()[0] == "on"


def test_an_awaited_success_commits_synchronously_again(
        governed: Queue, database_url: str) -> None:
    [first, second] = governed.claim(QUEUE, 2, 30.0)
    _, setting = _claim_in_a_transaction(database_url, True, [(first.id, first.fence)],
                                         contended=True)
    assert setting == "off"  # nobody waits for a result
    with psycopg.connect(database_url, autocommit=True) as waiter:
        _ops.execute(waiter, _ops.listen_results())
        _, setting = _claim_in_a_transaction(database_url, True, [(second.id, second.fence)],
                                             contended=True)
    assert setting == "on"
    assert governed.get_job(second.id).status == "succeeded"


def _job_row(job_id: int) -> tuple[Any, ...]:
    return (job_id, "t.task", QUEUE, "", 0, {}, 1, 3, 7, None, None, None, {}, None, None, None,
            None)


UNFLUSHED = (None, None, QUEUE, None, None, None, None, None, None, None, None, None, None, None,
             None, "unflushed", None)


def _statements(reply: list[tuple[Any, ...]],
                successes: Sequence[tuple[int, int, str, str]] = ()) -> list[str]:
    """The statements the claim operation sends, fed `reply` for the claim."""
    op = _ops.claim_as(QUEUE, 4, 30.0, successes, own_transaction=True)
    sent = []
    statement, _ = next(op)
    try:
        while True:
            sent.append(statement.as_string())
            statement, _ = op.send(reply if len(sent) == 1 else [])
    except StopIteration:
        return sent


def test_the_claim_operation_sends_the_barrier_after_an_unflushed_claim_only() -> None:
    barrier = _sql.statement("commit_barrier").as_string()
    assert _statements([UNFLUSHED, _job_row(1)])[-1] == barrier
    assert len(_statements([UNFLUSHED, _job_row(1)])) == 2
    assert _statements([UNFLUSHED], [(5, 9, "null", "")])[-1] == barrier
    assert barrier not in _statements([UNFLUSHED])  # nothing to act on
    assert barrier not in _statements([_job_row(1)])  # committed synchronously


def test_the_barrier_flushes_what_an_asynchronous_commit_left(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute(_sql.statement("commit_barrier"))  # it writes WAL, committed unflushed
        [written] = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        conn.execute("SET synchronous_commit = on")
        conn.execute(_sql.statement("commit_barrier"))
        [flushed] = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()
    assert flushed >= written
