"""The claimer: when, from which queue, and how much to claim.

Each round claims up to `want` jobs (the slot's free capacity), round-robin across the served
queues, starting one queue further each round so that no queue starves another; one claim
call per queue (it takes that one queue's admission lock), on an autocommit connection.

A queue whose claim came back short is "dry" until a hint names it again or its poll interval
passes: `--dequeue-timeout` for an empty queue, a short poll for a governed (maybe saturated)
one, or sooner when this slot scheduled a retry there itself, or when the claim said that a rate
limit allows the next start (then the slot sleeps until exactly that moment, not polling).

Hints for a governed queue usually mean "capacity was freed", and the supervisor sends each to
one slot only (see wakeups.py): the claimer that got one passes it on (`pass_on`) when its claim
came back full, that is when there may be room left for another slot.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .. import _ops
from ..types import ClaimedJob
from .recorder import OutcomeRecorder, encoded

# A governed queue that came back short is polled this often (at most) without a hint.
SATURATION_POLL = 1.0
# Successes that ride on a governed claim take back at most the places they free, so a slot
# never grows its share that way; and every FAIR_SHARE_LAP-th such claim of a queue takes none:
# its places go back to the fleet (the claim wakes the other claimers), so that a budget smaller
# than one slot's concurrency still spreads over every slot and supervisor serving the queue.
# Only a slot holding more than its share laps: the queue's max_active over the slots serving it
# (the supervisor reads it from the registry, see next_due.sql). A slot within its share has
# nothing to give that another slot lacks, and its lap only idled its places for a moment: at 8
# supervisors on a 64 budget, laps were a tenth of the claims and cost 6-11% of the throughput
# (issue #40). And a slot above its share of one place or more gives back only what it holds
# beyond it, refilling the rest of its successes' places in the same claim: a whole lap gave
# back every place its successes freed (8 to 29 of one supervisor's two slots on a 64 budget,
# each holding about 33 of its 32), which idled for the yield, since the other slot, full and
# running jobs, left the wake-up to its own next claim (hinted). Where no share is known (no
# queue-wide max_active: a per-key limit or a named budget alone), or it is below one place,
# every FAIR_SHARE_LAP-th ride laps whole, as before.
FAIR_SHARE_LAP = 8
# How long such a lap leaves the queue to the others: a hint (their NOTIFY) ends it sooner. A
# bound, not a wait for a hint: without LISTEN (PgBouncer in transaction mode) no hint comes but
# the 0.5 s poll's, and every lap would idle the slot for a whole poll interval.
FAIR_SHARE_YIELD = 0.01
# Due times a slot keeps for its own retries and timers: those within the hour (the supervisor's
# reading of the database's due times finds the later ones), at most this many.
LOCAL_DUE_HORIZON = 3600.0
LOCAL_DUES_MAX = 10_000


@dataclass(eq=False)
class QueueState:
    name: str
    dry_since: float | None = None  # monotonic; None: worth a claim
    hints: int = 0  # bumped by every hint, so a claim can tell a hint raced it
    # monotonic, a heap: when the retries, snoozes and durable timers this slot scheduled fall
    # due. Every one is kept (not only the soonest): jobs suspended 20 ms apart each resume at
    # their own time, not at the supervisor's next reading of the due times.
    local_dues: list[float] = field(default_factory=list)
    # monotonic; no claim before then: a rate limit's next allowed start, or a fair-share lap's
    # yield. A hint clears it.
    due_at: float | None = None
    governed: bool = False
    relayed: bool = False  # a governed hint came to this slot alone: pass it on if room is left
    rides: int = 0  # governed claims that carried successes, since the last one that took none
    replace_only: bool = False  # this round: dry, claimed only for the successes that ride
    claim_sent: float = 0.0  # monotonic: when the latest claim was sent (its leases start later)
    full: bool = False  # its max_active was reached at the last claim that could tell


class Claimer:
    def __init__(
        self,
        queues: Sequence[str],
        *,
        lease: float,
        dequeue_timeout: float,
        saturation_poll: float = SATURATION_POLL,
        governed: Iterable[str] = (),
        pass_on: Callable[[str], None] | None = None,
        tasks: Mapping[str, object] | None = None,
        runs_jobs_in: Callable[[str], bool] = lambda queue: False,
        holds_in: Callable[[str], int] = lambda queue: 0,
        shares: Mapping[str, float] | None = None,
    ) -> None:
        governed = set(governed)
        self.queues = [QueueState(q, governed=q in governed) for q in queues]
        self._by_name = {state.name: state for state in self.queues}
        self.lease = lease
        self.dequeue_timeout = dequeue_timeout
        self.saturation_poll = saturation_poll
        self.pass_on = pass_on
        self.runs_jobs_in = runs_jobs_in  # whether this slot runs a job of the queue now
        self.holds_in = holds_in  # how many places this slot holds in the queue now
        # A slot's share of each queue's max_active (FAIR_SHARE_LAP); a queue not named: unknown.
        self.shares: dict[str, float] = dict(shares or {})
        # The app's task registry (read at each claim: a task module imported late still
        # counts): a job of any other task is another app's, and the claim passes it over.
        self._tasks = tasks
        self._known: tuple[int, list[str]] | None = None
        self._rotation = 0
        self.statements = 0  # claims sent, so that a round that sent none can be told
        # A governed claim's round trip, a moving average (lock wait included): what sizes the
        # slot's governed chunks (slot.governed_chunk).
        self.governed_claim_seconds = 0.0

    def known_tasks(self) -> list[str] | None:
        """The task names to claim (None: any), sorted once per change of the registry."""
        if self._tasks is None:
            return None
        if self._known is None or self._known[0] != len(self._tasks):
            self._known = (len(self._tasks), sorted(self._tasks))
        return self._known[1]

    # ---- what the slot hears -----------------------------------------------------------------

    def hinted(self, names: Iterable[str]) -> None:
        """These queues may have work (a relayed NOTIFY). A governed queue whose last claim found
        it full, and in which this slot runs jobs, ignores the hint: the wake-up can only be a
        place freed elsewhere, and this slot's own next outcome rides on a claim of the queue
        anyway (or its poll comes), where acting on every such wake-up made every supervisor
        claim for each place one claim gave back, all but one of them finding nothing (issue
        #40). A slot running nothing there acts on it: that is whom the wake-up is for."""
        for name in names:
            state = self._by_name.get(name)
            if state is not None and state.governed and state.full and self.runs_jobs_in(name):
                continue
            if state is not None:
                state.hints += 1
                state.dry_since = None
                state.due_at = None
                if state.governed:
                    state.relayed = True

    def set_shares(self, shares: Mapping[str, float]) -> None:
        """A slot's share of each queue's max_active, as the supervisor last read it."""
        self.shares = dict(shares)

    def _above_share(self, state: QueueState) -> bool:
        """Whether this slot holds more of the queue's places than its share, or no share is
        known: only then does a fair-share lap give anything to another slot."""
        share = self.shares.get(state.name)
        return share is None or self.holds_in(state.name) > share

    def _room_in_share(self, state: QueueState, riding: int) -> int:
        """How many of the places that `riding` successes free this slot may take again and
        still hold no more than its share, in whole places (0: none, or no share known)."""
        share = self.shares.get(state.name)
        if share is None:
            return 0
        return max(0, math.floor(share) - (self.holds_in(state.name) - riding))

    def set_governed(self, names: set[str]) -> None:
        for state in self.queues:
            state.governed = state.name in names

    def retry_due(self, queue: str, delay: float) -> None:
        """This slot scheduled a retry in `queue`: look again when it falls due."""
        state = self._by_name.get(queue)
        if (state is not None and delay <= LOCAL_DUE_HORIZON
                and len(state.local_dues) < LOCAL_DUES_MAX):
            heapq.heappush(state.local_dues, time.monotonic() + delay)

    def freed(self, queues: Iterable[str], has_room: bool) -> bool:
        """Our own outcomes freed capacity in these queues. Their NOTIFY is not relayed back to
        this supervisor's slots (the listener knows our connections), so this slot acts on it:
        with room of its own it claims at once (and passes the hint on if that claim comes back
        full); with none it passes the hint on straight away. Returns whether to claim now."""
        claim_now = False
        for name in queues:
            state = self._by_name.get(name)
            if state is None or not state.governed:
                continue
            if has_room:
                state.dry_since = None
                state.relayed = True
                claim_now = True
            elif self.pass_on is not None:
                self.pass_on(name)
        return claim_now

    # ---- deciding ----------------------------------------------------------------------------

    def eligible(self, now: float, riding: Container[str] = ()) -> list[QueueState]:
        """The queues worth a claim now, in this round's order. A queue named in `riding` (this
        slot's own successes wait to ride on its claim) is one, unless a rate limit allows no
        start yet; while it is dry, its claim only replaces what those successes free."""
        queues = self.queues
        start = self._rotation % len(queues)
        out = []
        for state in queues[start:] + queues[:start]:
            state.replace_only = False
            if state.due_at is not None:
                # Out of starts, or yielding a lap: nothing to claim before then (a hint, such
                # as a policy change, clears this); no poll meanwhile.
                if state.due_at > now:
                    continue
                state.due_at = None
                state.dry_since = None
            if state.dry_since is not None:
                if state.local_dues and state.local_dues[0] <= now:
                    while state.local_dues and state.local_dues[0] <= now:
                        heapq.heappop(state.local_dues)
                    state.dry_since = None
                elif now - state.dry_since >= self._poll_interval(state):
                    state.dry_since = None
            if state.dry_since is None:
                out.append(state)
            elif state.name in riding:
                state.replace_only = True
                out.append(state)
        return out

    def _poll_interval(self, state: QueueState) -> float:
        if state.governed:
            return min(self.dequeue_timeout, self.saturation_poll)
        return self.dequeue_timeout

    def idle_timeout(self, now: float) -> float:
        """How long to sleep when no queue is eligible: until the first one will be."""
        soonest = self.dequeue_timeout
        for state in self.queues:
            if state.due_at is not None:
                soonest = min(soonest, state.due_at - now)
                continue
            if state.dry_since is not None:
                soonest = min(soonest, state.dry_since + self._poll_interval(state) - now)
            if state.local_dues:
                soonest = min(soonest, state.local_dues[0] - now)
        return max(soonest, 0.001)

    async def claim(
        self,
        conn: psycopg.AsyncConnection[Any],
        eligible: list[QueueState],
        want: int,
        start: Callable[[QueueState, list[ClaimedJob]], None],
        *,
        stop: Callable[[], bool] = lambda: False,
        recorder: OutcomeRecorder | None = None,
        governed_limit: int | None = None,
        governed_chunk: int | None = None,
    ) -> int:
        """One round: up to `want` jobs across `eligible`, in order; each queue's batch goes to
        `start` as soon as it is claimed (so a later queue's error loses nothing). Returns how
        many were claimed; psycopg errors pass through.

        With a `recorder`, each queue's riding successes go with its claim, even when
        nothing more is wanted; on an error they go back to the recorder's flush.
        `governed_limit` caps what governed queues get (the rest of `want` is claimed ahead,
        which only ungoverned queues may be: a job claimed ahead holds budget while it waits).
        `governed_chunk` caps one governed queue's claim beyond the places its own successes
        free: a claim that takes it all is not short, so the slot claims again for the places
        still free."""
        total = 0
        try:
            for state in eligible:
                need = want - total
                if state.governed and governed_limit is not None:
                    need = min(need, governed_limit - total)
                successes = recorder.take_riding(state.name) if recorder is not None else []
                if state.governed and governed_chunk is not None:
                    # A chunk streams the fill of free places; the places this claim's own
                    # successes free are refilled whole (a chunk cut short left the rest idle
                    # for another round trip: 29 successes, 17 replaced).
                    need = min(need, max(governed_chunk, len(successes)))
                if not successes and (need <= 0 or stop() or state.replace_only):
                    continue
                if stop():
                    need = 0
                hints = state.hints
                relayed, state.relayed = state.relayed, False
                self.statements += 1
                state.claim_sent = time.monotonic()
                if successes:
                    assert recorder is not None
                    if state.governed:
                        state.rides += 1
                        # (Counted on while within its share: the first ride above it laps.)
                        if state.rides >= FAIR_SHARE_LAP and self._above_share(state):
                            state.rides = 0
                            keep = self._room_in_share(state, len(successes))
                            if keep > 0:
                                # Back to its share: only what it held beyond it goes round.
                                need = min(need, keep)
                            else:
                                need = 0
                                # Others first, for a moment; a hint ends it sooner.
                                state.dry_since = time.monotonic()
                                state.due_at = state.dry_since + FAIR_SHARE_YIELD
                        elif state.replace_only:
                            need = min(need, len(successes))
                    try:
                        reply = await _ops.execute_async(conn, _ops.claim_as(
                            state.name, max(need, 0), self.lease, encoded(successes),
                            self.known_tasks(), own_transaction=True))
                    except BaseException:
                        recorder.release_riding(successes)
                        raise
                    recorder.counted(successes, reply.accepted)
                    if need <= 0:
                        state.relayed = relayed
                        continue
                else:
                    reply = await _ops.execute_async(conn, _ops.claim_as(
                        state.name, need, self.lease, tasks=self.known_tasks(),
                        expect_full=state.governed and state.full,
                        own_transaction=True))
                claimed, next_start = reply.jobs, reply.next_start
                if reply.full:
                    state.full = True
                elif len(claimed) < need or len(claimed) > len(successes):
                    # Short without the limit saying so (no ready job left), or more than its
                    # own successes freed: there was room. A claim that only replaced its own
                    # successes leaves the queue as full as it found it.
                    state.full = False
                if state.governed and need > 0:
                    took = time.monotonic() - state.claim_sent
                    self.governed_claim_seconds = (
                        took if not self.governed_claim_seconds
                        else 0.8 * self.governed_claim_seconds + 0.2 * took)
                if next_start is not None:
                    # A rate limit cut the claim short: sleep until its next allowed start.
                    state.dry_since = time.monotonic()
                    state.due_at = state.dry_since + next_start
                elif len(claimed) < need and state.hints == hints:
                    state.dry_since = time.monotonic()
                elif relayed and len(claimed) >= need and self.pass_on is not None:
                    # We were the one slot told; the queue may have room for more.
                    self.pass_on(state.name)
                if claimed:
                    total += len(claimed)
                    start(state, claimed)
        finally:
            self._rotation += 1
        return total
