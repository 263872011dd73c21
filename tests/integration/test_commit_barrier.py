"""The worker's governed claims commit asynchronously and are followed by a commit barrier
(claim_v2's "The commit after the lock"). The crash that shows the barrier is needed is in
tests/faults/test_faults_commit.py; here, what each part does on its own:

- a claim asked for an asynchronous commit sets `synchronous_commit` off for its transaction
  only, and one not asked leaves it alone;
- a claim whose successes are awaited by a registered result waiter commits synchronously
  again (a waiter must not read a result a crash could take back);
- the claim operation sends the barrier after a claim that took jobs or recorded successes,
  and only then returns; after an empty claim, or without `own_transaction`, it sends none;
- the barrier's commit flushes the WAL that an asynchronous commit left unflushed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from workhorse import EnqueueOptions, Queue, _ops, _sql
from workhorse.types import ConcurrencyPolicyDefinition

QUEUE = "barrier"


@pytest.fixture
def governed(queue: Queue) -> Queue:
    queue.sync_concurrency_policies("tests", [
        ConcurrencyPolicyDefinition(queue=QUEUE, max_active=8)])
    queue.enqueue_many([("t.task", {"args": [n], "kwargs": {}}, EnqueueOptions(queue=QUEUE))
                        for n in range(4)])
    return queue


def _claim_in_a_transaction(url: str, own_transaction: bool,
                            successes: list[tuple[int, int]] = ()) -> tuple[list[Any], str]:
    """One claim's statement inside an open transaction: its rows, and the transaction's
    synchronous_commit before the commit."""
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
    return rows, setting


def test_an_async_claim_turns_synchronous_commit_off_for_its_transaction_only(
        governed: Queue, database_url: str) -> None:
    rows, setting = _claim_in_a_transaction(database_url, True)
    assert len(rows) == 1 and setting == "off"
    rows, setting = _claim_in_a_transaction(database_url, False)
    assert len(rows) == 1 and setting == "on"
    with psycopg.connect(database_url, autocommit=True) as conn:  # the next transaction
        assert conn.execute("SELECT current_setting('synchronous_commit')").fetchone()[0] == "on"


def test_an_awaited_success_commits_synchronously_again(
        governed: Queue, database_url: str) -> None:
    [first, second] = governed.claim(QUEUE, 2, 30.0)
    _, setting = _claim_in_a_transaction(database_url, True, [(first.id, first.fence)])
    assert setting == "off"  # nobody waits for a result
    with psycopg.connect(database_url, autocommit=True) as waiter:
        _ops.execute(waiter, _ops.listen_results())
        _, setting = _claim_in_a_transaction(database_url, True, [(second.id, second.fence)])
    assert setting == "on"
    assert governed.get_job(second.id).status == "succeeded"


def _job_row(job_id: int) -> tuple[Any, ...]:
    return (job_id, "t.task", QUEUE, "", 0, {}, 1, 3, 7, None, None, None, {}, None, None, None,
            None)


def _statements(own_transaction: bool, reply: list[tuple[Any, ...]],
                successes: list[tuple[int, int, str, str]] = ()) -> list[str]:
    """The statements the claim operation sends, fed `reply` for the claim."""
    op = _ops.claim_as(QUEUE, 4, 30.0, successes, own_transaction=own_transaction)
    sent = []
    statement, _ = next(op)
    try:
        while True:
            sent.append(statement.as_string())
            statement, _ = op.send(reply if len(sent) == 1 else [])
    except StopIteration:
        return sent


def test_the_claim_operation_sends_the_barrier_only_when_it_has_something_to_act_on() -> None:
    barrier = _sql.statement("commit_barrier").as_string()
    assert _statements(True, [_job_row(1)])[-1] == barrier
    assert _statements(True, [], [(5, 9, "null", "")])[-1] == barrier
    assert barrier not in _statements(True, [])
    assert barrier not in _statements(False, [_job_row(1)])
    assert len(_statements(True, [_job_row(1)])) == 2


def test_the_barrier_flushes_what_an_asynchronous_commit_left(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute(_sql.statement("commit_barrier"))  # it writes WAL, committed unflushed
        [written] = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        conn.execute("SET synchronous_commit = on")
        conn.execute(_sql.statement("commit_barrier"))
        [flushed] = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()
    assert flushed >= written
