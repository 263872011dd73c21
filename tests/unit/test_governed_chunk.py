"""governed_chunk: how many jobs one governed claim takes at the handlers' measured pace."""

from __future__ import annotations

import pytest

from workhorse.worker.slot import GOVERNED_CHUNK_MIN, governed_chunk


def test_no_cap_before_a_job_was_timed() -> None:
    assert governed_chunk(64, None) is None
    assert governed_chunk(64, 0.0) is None


def test_slow_handlers_claim_in_small_chunks() -> None:
    # 20 ms handlers at -c 64: the places are refilled eight at a time.
    assert governed_chunk(64, 0.02) == GOVERNED_CHUNK_MIN == 8
    assert governed_chunk(128, 1.0) == GOVERNED_CHUNK_MIN


def test_short_handlers_claim_the_whole_room() -> None:
    # No-op jobs: a claim of 8 could not keep 32 places busy; no cap.
    assert governed_chunk(32, 0.00005) is None
    assert governed_chunk(64, 0.002) is None


@pytest.mark.parametrize("concurrency", [1, 4, 8])
def test_a_slot_no_larger_than_a_chunk_is_never_capped(concurrency: int) -> None:
    assert governed_chunk(concurrency, 10.0) is None


def test_the_chunk_grows_as_handlers_get_shorter() -> None:
    chunks = [governed_chunk(256, pace) for pace in (0.1, 0.02, 0.01, 0.005, 0.0025)]
    assert chunks == [8, 26, 52, 103, 205]


def test_slow_claims_make_bigger_chunks() -> None:
    # 8 supervisors on one budget: a claim waits ~20 ms for the admission lock, so 20 ms
    # handlers at -c 64 need claims of their whole room, not of 8 (issue #40).
    assert governed_chunk(64, 0.02, claim_cost=0.02) is None
    assert governed_chunk(256, 0.02, claim_cost=0.004) == 103
    # A claim faster than GOVERNED_CLAIM_COST is not trusted to be that fast.
    assert governed_chunk(64, 0.02, claim_cost=0.0001) == governed_chunk(64, 0.02) == 8
