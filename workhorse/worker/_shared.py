"""State the supervisor creates before forking and its slots share: the budget and the counters.

Both live in anonymous shared memory (and a POSIX semaphore), made before the first fork, so a
slot restarted later inherits the very same objects. Neither holds a lock that a slot killed with
SIGKILL could leave locked.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

_FORK = multiprocessing.get_context("fork")

# One row of counters per slot index; a restarted slot keeps adding to its index's row.
STAT_FIELDS = ("claimed", "succeeded", "failed", "retried", "held", "lost", "stale", "in_flight",
               "canceled", "released")
CLAIMED, SUCCEEDED, FAILED, RETRIED, HELD, LOST, STALE, IN_FLIGHT, CANCELED, RELEASED = range(
    len(STAT_FIELDS))


# How long a slot that got no token counts as waiting for one: it asks again every BUDGET_POLL
# (20 ms, slot.py) while it has work.
WANT_FRESH = 0.1


class Budget:
    """`--max-concurrent-tasks`: K tokens shared by every slot of one supervisor.

    A slot takes tokens (never blocking) before it claims, gives back the ones its claim did not
    use, and gives one back as each job ends. `held[i]` records what slot i holds, so that the
    supervisor can return a dead slot's tokens. The record is updated on the safe side: after a
    token is taken and before one is given back, so a slot killed in between leaks one token (the
    budget shrinks by one until restart) rather than letting the fleet overshoot.
    """

    def __init__(self, limit: int, slots: int) -> None:
        self.limit = limit
        self.slots = slots
        self._share = -(-limit // slots)  # a slot's fair share, rounded up
        self._semaphore = _FORK.BoundedSemaphore(limit)
        self._held: Any = _FORK.RawArray("q", slots)
        # When each slot's latest try got nothing (CLOCK_MONOTONIC, one clock for every process;
        # 0: it got some). Such a slot polls for a token, while the slot whose job just ended
        # asks again at once and would take every token back for ever. A slot that stopped
        # asking (its queues ran dry) stops counting as waiting after WANT_FRESH.
        self._wanting: Any = _FORK.RawArray("d", slots)

    def try_acquire(self, index: int, want: int) -> int:
        """Up to `want` tokens; while another slot is waiting for one, only as many as bring
        this slot to its fair share (so the cap is shared by the slots, not taken by the
        fastest). The share caps how many, not only whether: a slot whose jobs all ended
        together holds none, and would otherwise take the whole cap back before the waiting
        slots' next poll, every time."""
        if want <= 0:
            return 0
        now = time.monotonic()
        if any(now - self._wanting[other] < WANT_FRESH
               for other in range(self.slots) if other != index):
            want = min(want, self._share - self._held[index])
            if want <= 0:
                return 0
        got = 0
        while got < want and self._semaphore.acquire(False):
            got += 1
            self._held[index] += 1
        self._wanting[index] = 0.0 if got else now
        return got

    def release(self, index: int, count: int = 1) -> None:
        for _ in range(count):
            self._held[index] -= 1
            self._semaphore.release()

    def reclaim(self, index: int) -> int:
        """Give back what a dead slot held (supervisor only, after reaping it)."""
        count = max(int(self._held[index]), 0)
        self._held[index] = 0
        self._wanting[index] = 0.0
        returned = 0
        for _ in range(count):
            try:
                self._semaphore.release()
            except ValueError:  # already full: never exceed the bound
                break
            returned += 1
        return returned


class Stats:
    """Per-slot counters in shared memory; each row has one writer (its slot)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._values: Any = _FORK.RawArray("q", slots * len(STAT_FIELDS))

    def add(self, index: int, field: int, amount: int = 1) -> None:
        self._values[index * len(STAT_FIELDS) + field] += amount

    def set(self, index: int, field: int, value: int) -> None:
        self._values[index * len(STAT_FIELDS) + field] = value

    def get(self, index: int, field: int) -> int:
        return int(self._values[index * len(STAT_FIELDS) + field])

    def totals(self) -> dict[str, int]:
        width = len(STAT_FIELDS)
        return {
            name: int(sum(self._values[i * width + f] for i in range(self.slots)))
            for f, name in enumerate(STAT_FIELDS)
        }
