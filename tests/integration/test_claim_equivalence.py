"""The product's claim admits exactly what the reference claim admits (tests/fixtures/
reference_claim.sql: 0.1's last claim, before the baseline gave the activation and the head
moves one statement each): the same jobs, in the same order, leaving the same key heads and job
rows, on random per-key queues (priorities, keyless jobs, active and expired leases), with and
without rate limits. A claim with a broken per-key count is caught by the same comparison, so it
can fail."""

from __future__ import annotations

import pytest
from _claim_comparison import PRODUCT, differences, install_reference, product_claim_text

SEEDS = range(24)


@pytest.mark.parametrize("rate", [False, True], ids=["no-rate-limit", "rate-limits"])
def test_the_claim_admits_what_the_reference_claim_admits(conn, queue, rate):
    reference = install_reference(conn)
    found = [d for seed in SEEDS
             for d in differences(conn, queue, seed, rate, reference, PRODUCT)]
    assert found == []


def test_the_comparison_catches_a_claim_that_ignores_active_jobs_of_a_key(conn, queue):
    reference = install_reference(conn)
    text = product_claim_text()
    lean = "WHERE c.ckey = '' OR c.nth <= v_per_key - COALESCE(a.n, 0)"
    assert text.count(lean) == 1  # the no-rate-limit statement's per-key room
    broken = text.replace(f"workhorse.{PRODUCT[1]}(", "workhorse.claim_broken(", 1).replace(
        lean, "WHERE c.ckey = '' OR c.nth <= v_per_key")
    conn.execute(broken)
    found = [d for seed in SEEDS
             for d in differences(conn, queue, seed, False, reference,
                                  ("workhorse", "claim_broken"))]
    assert found
