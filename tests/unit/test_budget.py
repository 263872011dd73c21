"""Budget (worker/_shared.py): --max-concurrent-tasks tokens shared by a supervisor's slots."""

from __future__ import annotations

from workhorse.worker._shared import Budget


def test_tokens_never_exceed_the_limit_and_come_back() -> None:
    budget = Budget(3, 2)
    assert budget.try_acquire(0, 5) == 3
    assert budget.try_acquire(1, 1) == 0
    budget.release(0, 2)
    assert budget.try_acquire(1, 5) == 2
    assert budget.reclaim(0) == 1 and budget.try_acquire(0, 5) == 1


def test_a_slot_at_its_share_yields_to_a_slot_waiting_for_a_token() -> None:
    """The slot whose job just ended asks again at once; one that got nothing polls. Without
    this, the first slot takes every token back for ever (one slot ran all the jobs)."""
    budget = Budget(3, 3)
    assert budget.try_acquire(0, 4) == 3  # slot 0 started first: it holds them all
    assert budget.try_acquire(1, 4) == 0  # slot 1 waits
    budget.release(0)
    assert budget.try_acquire(0, 4) == 0  # over its share of 1, with slot 1 waiting
    assert budget.try_acquire(1, 4) == 1  # slot 1's poll gets it
    budget.release(0)
    assert budget.try_acquire(0, 4) == 1  # nobody waits any more: it may take it back


def test_a_slot_whose_jobs_all_ended_takes_only_its_share_while_another_waits() -> None:
    """Its jobs started together and ended together: it holds no token when it asks again, and
    would take the whole cap back before the waiting slot polls (one slot ran all 45 jobs)."""
    budget = Budget(3, 3)
    assert budget.try_acquire(0, 4) == 3
    assert budget.try_acquire(1, 4) == 0  # slot 1 waits
    budget.release(0, 3)  # slot 0's three jobs end at once
    assert budget.try_acquire(0, 4) == 1  # its share, not all three
    assert budget.try_acquire(1, 4) == 2  # slot 1's poll finds the rest


def test_a_dead_slot_waits_for_nothing() -> None:
    budget = Budget(2, 2)
    assert budget.try_acquire(0, 2) == 2
    assert budget.try_acquire(1, 1) == 0
    budget.reclaim(1)
    budget.release(0)
    assert budget.try_acquire(0, 1) == 1


def test_a_slot_that_stopped_asking_stops_holding_the_others_back() -> None:
    """Its queues ran dry: it no longer polls, so after WANT_FRESH the others may use the cap."""
    import time

    from workhorse.worker._shared import WANT_FRESH

    budget = Budget(3, 3)
    assert budget.try_acquire(0, 3) == 3
    assert budget.try_acquire(1, 1) == 0  # slot 1 wanted one, once
    budget.release(0)
    assert budget.try_acquire(0, 1) == 0
    time.sleep(WANT_FRESH + 0.02)
    assert budget.try_acquire(0, 1) == 1
