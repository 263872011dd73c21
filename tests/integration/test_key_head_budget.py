"""A key head carries its head job's budget (docs/architecture.md, issue #40's ninth reading):
the claim's own head moves say it (`budget`, and `budget_for` = the head it is the budget of), and
the key_heads_budget trigger fills it in for every other writer (0.2.0's claim, the refreshes),
which leave `budget_for` behind. The claim's moves no longer pay a PL/pgSQL trigger call a key
(issue #40: a fifth of a keyed claim of 25); these tests show the trigger idle on the claim's
moves, each head's budget right after them (a job whose budget was set behind the claim's back
included), and the trigger still setting it for a writer that does not."""

from __future__ import annotations

from typing import Any

import psycopg

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _sql

CLAIM = _sql.function_name("claim")
TRIGGER_FUNCTION = _sql.function_name("_key_head_budget")


def _keyed_backlog(queue: Queue, keys: int, per_key: int) -> None:
    queue.sync_concurrency_policies("ns", [
        ConcurrencyPolicyDefinition(queue="kq", max_active=64, max_active_per_key=2)])
    queue.enqueue_many([
        ("t", {"i": i}, EnqueueOptions(queue="kq", concurrency_key=f"k{i % keys}"))
        for i in range(keys * per_key)])


def _wrong_heads(conn: psycopg.Connection[Any]) -> list[tuple[str, int, str | None, str | None]]:
    """Heads whose budget is not their head job's: (key, head, head's budget, job's budget)."""
    return conn.execute(
        "SELECT h.ckey, h.head_id, h.budget, j.budget FROM workhorse.key_heads h"
        " JOIN workhorse.jobs j ON j.id = h.head_id"
        " WHERE h.budget IS DISTINCT FROM j.budget ORDER BY h.ckey").fetchall()


def _claim_counting_trigger(conn: psycopg.Connection[Any], limit: int) -> tuple[int, int]:
    """One claim in a transaction: (jobs claimed, calls of the trigger's function in it). The
    session's function counts are read before and after the claim, in its transaction (they
    are the session's pending counts, not only this transaction's)."""
    calls = ("SELECT COALESCE(sum(calls), 0) FROM pg_stat_xact_user_functions"
             " WHERE schemaname = 'workhorse' AND funcname = %s")
    conn.execute("SET track_functions = 'pl'")
    with conn.transaction():
        before = conn.execute(calls, (TRIGGER_FUNCTION,)).fetchone()[0]
        claimed = conn.execute(
            f"SELECT count(*) FROM workhorse.{CLAIM}(%s, %s, 60, NULL, NULL, NULL, NULL, NULL)"
            " WHERE id IS NOT NULL AND status IS NULL", ("kq", limit)).fetchone()[0]
        after = conn.execute(calls, (TRIGGER_FUNCTION,)).fetchone()[0]
    return claimed, after - before


def test_the_claims_head_moves_carry_the_budget_without_the_trigger(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    _keyed_backlog(queue, keys=10, per_key=5)
    # A first claim builds the heads from the enqueues' hints (a refresh: the trigger's work).
    assert _claim_counting_trigger(conn, 1)[0] == 1
    # A job whose budget was set after the queue's admission path was chosen (as an enqueue
    # that commits while a claim runs): the head that moves onto it must carry it.
    second_of_k3 = conn.execute(
        "SELECT id FROM workhorse.jobs WHERE ckey = 'k3' ORDER BY id OFFSET 1 LIMIT 1"
    ).fetchone()[0]
    conn.execute("UPDATE workhorse.jobs SET budget = 'api' WHERE id = %s", (second_of_k3,))

    claimed, trigger_calls = _claim_counting_trigger(conn, 10)

    assert claimed == 10  # k0's second job and every other key's head
    assert trigger_calls == 0, "the claim's head moves ran the trigger"
    assert conn.execute("SELECT count(*), count(*) FILTER (WHERE budget_for = head_id)"
                        " FROM workhorse.key_heads").fetchone() == (10, 10)
    assert conn.execute("SELECT head_id, budget FROM workhorse.key_heads WHERE ckey = 'k3'"
                        ).fetchone() == (second_of_k3, "api")
    assert _wrong_heads(conn) == []


def test_a_writer_that_does_not_say_the_budget_gets_it_from_the_trigger(
    queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    _keyed_backlog(queue, keys=3, per_key=3)
    assert _claim_counting_trigger(conn, 1)[0] == 1  # builds the heads
    last_of_k1 = conn.execute(
        "SELECT max(id) FROM workhorse.jobs WHERE ckey = 'k1'").fetchone()[0]
    conn.execute("UPDATE workhorse.jobs SET budget = 'api' WHERE id = %s", (last_of_k1,))

    # As 0.2.0's claim moves a head: head_rank and head_id only.
    conn.execute("UPDATE workhorse.key_heads SET head_id = %s WHERE ckey = 'k1'", (last_of_k1,))
    assert conn.execute("SELECT budget, budget_for FROM workhorse.key_heads WHERE ckey = 'k1'"
                        ).fetchone() == ("api", last_of_k1)
    # And a head inserted without it.
    conn.execute("DELETE FROM workhorse.key_heads WHERE ckey = 'k1'")
    conn.execute("INSERT INTO workhorse.key_heads (queue, ckey, head_rank, head_id)"
                 " VALUES ('kq', 'k1', 0, %s)", (last_of_k1,))
    assert _wrong_heads(conn) == []
    assert conn.execute("SELECT budget FROM workhorse.key_heads WHERE ckey = 'k1'"
                        ).fetchone()[0] == "api"
