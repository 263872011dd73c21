"""A claim's cost does not grow with the number of key_limits rows (issue #41 item 2: "Claim cost
must not grow with the number of keys that have a limit row"): each key the claim looks at is
read from key_limits by its primary key, never by a scan of the queue's rows.

Method, as the claim-cost tests of test_unknown_task_claim.py and test_budget_admission.py: one
claim of 10 in a transaction rolled back afterwards, with this transaction's statistics of
key_limits read around it (the xact counters of the table and of key_limits_pkey: seq scans,
index scans, index entries returned, blocks fetched, i.e. hit + read). The same queue and jobs are
measured with 1,000 and with 50,000 rows in key_limits, every key the claim meets having a row in
both. Blocks are counted, not time: no figure here depends on the machine's load.

`test_the_check_fails_on_a_claim_that_reads_every_row` runs the same check on deliberately broken
copies of the claim (the tracked keys' lateral probe replaced by a join over the queue's rows;
the probe of a key met from its head, or of a started job's key, filtering the queue's rows
instead of seeking its key): it must fail there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from _integration import install_broken

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, KeyLimit, Queue, _sql

Q = "kl"
TASK = "t"
CLAIM = _sql.function_name("claim")
CHOOSE = _sql.function_name("_choose_units")
BATCH = 10
ACTIVE = 5  # keys with a running job: the claim tracks them (the lateral probe)
READY = 20  # keys with 2 ready jobs each behind them: the claim meets 10 (the probe per head)
SMALL, BIG = 1_000, 50_000


def _key(i: int) -> str:
    return f"k{i:06}"


def _ready_key(i: int) -> str:
    """Every other ready key has a row (the override), the others none (the default's)."""
    return _key(i) if i % 2 == 0 else f"x{i:06}"


@dataclass(frozen=True)
class Reads:
    """What one claim of BATCH read of key_limits (its heap and its primary key together)."""

    took: int
    seq_scans: int
    probes: int  # index scans of key_limits_pkey
    entries: int  # index entries it returned
    blocks: int  # blocks fetched (hit + read), heap and index


def _setup(queue: Queue) -> None:
    """Queue Q with a per-key limit of 1: ACTIVE keys with a running job (lease 1 h), then READY
    keys with 2 ready jobs each; SMALL rows of key_limits, among them the active keys' and every
    other ready key's."""
    queue.sync_concurrency_policies("plan", [
        ConcurrencyPolicyDefinition(Q, max_active=None, max_active_per_key=1)])
    _rows(queue, SMALL)
    queue.enqueue_many([(TASK, {}, EnqueueOptions(queue=Q, concurrency_key=_key(i)))
                        for i in range(ACTIVE)])
    assert len(queue.claim(Q, ACTIVE, 3600)) == ACTIVE
    queue.enqueue_many([(TASK, {"n": n}, EnqueueOptions(queue=Q, concurrency_key=_ready_key(i)))
                        for n in range(2) for i in range(ACTIVE, ACTIVE + READY)])


def _rows(queue: Queue, n: int) -> None:
    """n rows of key_limits for Q (keys 0..n-1; every 100th may run 2, the others 1), and the
    default (1), through the product; analyzed, as autovacuum would."""
    queue.set_key_limits("plan", Q, {_key(i): KeyLimit(max_active=2 if i % 100 == 0 else 1)
                                     for i in range(n)}, default=KeyLimit(max_active=1))
    queue.conn.execute("ANALYZE workhorse.key_limits")


_COUNTERS = """
    SELECT pg_stat_get_xact_numscans('workhorse.key_limits'::regclass),
           pg_stat_get_xact_numscans('workhorse.key_limits_pkey'::regclass),
           pg_stat_get_xact_tuples_returned('workhorse.key_limits_pkey'::regclass),
           pg_stat_get_xact_blocks_fetched('workhorse.key_limits'::regclass)
           + pg_stat_get_xact_blocks_fetched('workhorse.key_limits_pkey'::regclass)"""


def _reads(database_url: str, claim: str = CLAIM) -> Reads:
    """One claim of BATCH on a fresh connection (no plan cached), rolled back; its reads of
    key_limits, as this transaction's statistics count them (before and after: a session's
    counters are flushed to the shared ones at most once a second, so they may hold more)."""
    with psycopg.connect(database_url) as conn:
        before = conn.execute(_COUNTERS).fetchone()
        took = conn.execute(f"SELECT count(id) FROM workhorse.{claim}"
                            "(%s, %s, 60, NULL, NULL, NULL, NULL, NULL)", (Q, BATCH)).fetchone()
        after = conn.execute(_COUNTERS).fetchone()
        conn.rollback()
    assert before is not None and after is not None and took is not None
    seq, probes, entries, blocks = (int(a) - int(b) for a, b in zip(after, before, strict=True))
    return Reads(int(took[0]), seq, probes, entries, blocks)


def _growth(database_url: str, queue: Queue, claim: str = CLAIM) -> tuple[Reads, Reads]:
    _setup(queue)
    small = _reads(database_url, claim)
    _rows(queue, BIG)
    big = _reads(database_url, claim)
    return small, big


def _check(small: Reads, big: Reads) -> None:
    assert small.took == big.took == BATCH, (small, big)
    assert small.probes > 0, "key_limits never read: the measure would be vacuous"
    # Never a scan: one probe per key looked at, each returning at most its own row.
    assert small.seq_scans == big.seq_scans == 0, (small, big)
    assert big.probes == small.probes, (small, big)
    assert big.entries == small.entries <= small.probes, (small, big)
    # The blocks: at most one more level of key_limits_pkey per probe (the tree's depth is the
    # log of the rows), each probe a handful of blocks whatever the rows.
    assert big.blocks <= small.blocks + big.probes, (small, big)
    assert big.blocks <= 5 * big.probes, (small, big)


def test_a_claims_reads_of_key_limits_do_not_grow_with_its_rows(
        database_url: str, queue: Queue) -> None:
    small, big = _growth(database_url, queue)
    _check(small, big)
    # The keys the claim looked at: the ACTIVE tracked ones, the keyless (''), and the BATCH
    # heads it took, read twice (once when met, once to file their starts); the rows found: the
    # active keys', and twice those of the half of the heads that have one.
    assert small.probes == ACTIVE + 1 + 2 * BATCH, small
    assert small.entries == ACTIVE + BATCH, small


# ---- the check fails where the claim reads every row -----------------------------------------

BROKEN = {
    # The tracked keys' rows by a join over all of the queue's rows (OFFSET 0: not flattened
    # back into a probe per key).
    "lateral_as_join": (CHOOSE, """LEFT JOIN LATERAL (
                SELECT k.max_active, k.weight, k.rate_limit, k.rate_period
                FROM workhorse.key_limits k
                WHERE p_key_limits AND k.queue = p_queue AND k.ckey = g.ckey) AS kl ON true""",
                        """LEFT JOIN (
                SELECT k.ckey, k.max_active, k.weight, k.rate_limit, k.rate_period
                FROM workhorse.key_limits k
                WHERE p_key_limits AND k.queue = p_queue OFFSET 0) AS kl ON kl.ckey = g.ckey"""),
    # A key met from its head found by filtering the queue's rows, not by seeking its key.
    "head_probe_filters": (CHOOSE,
                           "WHERE p_key_limits AND k.queue = p_queue AND k.ckey = v_key;",
                           "WHERE p_key_limits AND k.queue = p_queue AND k.ckey || '' = v_key;"),
    # The same in the claim's filing of each started job's rate window.
    "starts_probe_filters": (CLAIM, "AND kl.ckey = a.ckey),", "AND kl.ckey || '' = a.ckey),"),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_check_fails_on_a_claim_that_reads_every_row(
        database_url: str, queue: Queue, conn: psycopg.Connection[Any], broken: str) -> None:
    install_broken(conn, *BROKEN[broken])
    small, big = _growth(database_url, queue)
    with pytest.raises(AssertionError):
        _check(small, big)
    # Broken the way meant: it still claims, and reads the rows it should not.
    assert small.took == big.took == BATCH
    assert big.entries >= BIG or big.blocks > 10 * small.blocks, (small, big)
