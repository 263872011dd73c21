"""The claimer (workhorse/worker/claimer.py), in process against the real database: round-robin,
`want` across queues, dry queues and what makes them eligible again, governed hint pass-on."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import psycopg
import pytest

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, JobStatus, Queue, _sql
from workhorse.types import ClaimedJob
from workhorse.worker.claimer import FAIR_SHARE_LAP, FAIR_SHARE_YIELD, Claimer, QueueState
from workhorse.worker.executor import Execution, Outcome
from workhorse.worker.recorder import OutcomeRecorder

LOCK_ID = _sql.function_name("_admission_lock_id")

Started = list[tuple[str, list[int]]]


def _fill(queue: Queue, name: str, n: int) -> list[int]:
    return queue.enqueue_many([("t", {"args": [i], "kwargs": {}}, EnqueueOptions(queue=name))
                               for i in range(n)])


def _starter(started: Started) -> Callable[[QueueState, list[ClaimedJob]], None]:
    def start(state: QueueState, claimed: list[ClaimedJob]) -> None:
        assert all(job.queue == state.name for job in claimed)
        started.append((state.name, [job.id for job in claimed]))

    return start


def _names(states: list[QueueState]) -> list[str]:
    return [state.name for state in states]


Body = Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]


def _run(database_url: str, body: Body) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            await body(aconn)

    anyio.run(main)


def test_rounds_rotate_the_first_queue(database_url: str, queue: Queue) -> None:
    ids = {name: _fill(queue, name, 3) for name in "abc"}
    claimer = Claimer(["a", "b", "c"], lease=30.0, dequeue_timeout=60.0)
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        orders = []
        for _ in range(4):
            eligible = claimer.eligible(time.monotonic())
            orders.append(_names(eligible))
            assert await claimer.claim(aconn, eligible, 1, _starter(started)) == 1
        assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]

    _run(database_url, body)
    # Each round's one job came from the queue the round started with, oldest first.
    assert started == [("a", [ids["a"][0]]), ("b", [ids["b"][0]]), ("c", [ids["c"][0]]),
                       ("a", [ids["a"][1]])]
    for name, taken in (("a", 2), ("b", 1), ("c", 1)):
        for job_id in ids[name][:taken]:
            job = queue.get_job(job_id)
            assert job is not None and job.status is JobStatus.ACTIVE and job.attempts == 1
        for job_id in ids[name][taken:]:
            job = queue.get_job(job_id)
            assert job is not None and job.status is JobStatus.READY


def test_rotation_advances_even_when_the_round_claims_nothing(database_url: str) -> None:
    claimer = Claimer(["a", "b"], lease=30.0, dequeue_timeout=60.0)
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        first = claimer.eligible(time.monotonic())
        assert _names(first) == ["a", "b"]
        assert await claimer.claim(aconn, first, 5, _starter(started)) == 0
        # Both came back empty: both are dry now.
        assert claimer.eligible(time.monotonic()) == []
        claimer.hinted(["a", "b"])
        assert _names(claimer.eligible(time.monotonic())) == ["b", "a"]

    _run(database_url, body)
    assert started == []


def test_want_is_shared_across_queues(database_url: str, queue: Queue) -> None:
    a = _fill(queue, "a", 2)
    b = _fill(queue, "b", 5)
    claimer = Claimer(["a", "b"], lease=30.0, dequeue_timeout=60.0)
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        eligible = claimer.eligible(time.monotonic())
        assert await claimer.claim(aconn, eligible, 3, _starter(started)) == 3
        # "a" came back short (2 of 3): dry; "b" gave all it was asked for (1): not dry.
        assert _names(claimer.eligible(time.monotonic())) == ["b"]

    _run(database_url, body)
    assert started == [("a", a), ("b", b[:1])]
    assert sorted(j.id for j in queue.list_jobs(status="active")) == sorted(a + b[:1])
    assert sorted(j.id for j in queue.list_jobs(status="ready")) == b[1:]


def test_stop_ends_the_round_before_the_next_queue(database_url: str, queue: Queue) -> None:
    a = _fill(queue, "a", 1)
    _fill(queue, "b", 1)
    claimer = Claimer(["a", "b"], lease=30.0, dequeue_timeout=60.0)
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        eligible = claimer.eligible(time.monotonic())
        def stop() -> bool:  # once the first queue's batch has started
            return bool(started)

        assert await claimer.claim(aconn, eligible, 5, _starter(started), stop=stop) == 1

    _run(database_url, body)
    assert started == [("a", a)]
    assert [j.queue for j in queue.list_jobs(status="ready")] == ["b"]


def test_short_queue_is_dry_until_a_hint(database_url: str, queue: Queue) -> None:
    claimer = Claimer(["a", "b"], lease=30.0, dequeue_timeout=60.0)
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        assert await claimer.claim(aconn, claimer.eligible(time.monotonic()), 2,
                                   _starter(started)) == 0
        assert claimer.eligible(time.monotonic()) == []
        claimer.hinted(["nope", "a"])  # an unknown name is ignored
        assert _names(claimer.eligible(time.monotonic())) == ["a"]
        ids = _fill(queue, "a", 1)
        assert await claimer.claim(aconn, claimer.eligible(time.monotonic()), 2,
                                   _starter(started)) == 1
        assert started == [("a", ids)]
        assert claimer.eligible(time.monotonic()) == []

    _run(database_url, body)


def test_dry_queue_is_eligible_again_after_its_poll_interval(database_url: str) -> None:
    claimer = Claimer(["a"], lease=30.0, dequeue_timeout=0.05)

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        before = time.monotonic()
        await claimer.claim(aconn, claimer.eligible(before), 1, _starter([]))
        state = claimer.queues[0]
        dry_since = state.dry_since
        assert dry_since is not None and dry_since >= before
        assert claimer.eligible(dry_since + 0.049) == []
        assert 0.001 <= claimer.idle_timeout(dry_since) <= 0.05
        assert claimer.idle_timeout(dry_since + 1.0) == 0.001
        time.sleep(0.06)
        assert _names(claimer.eligible(time.monotonic())) == ["a"]
        assert state.dry_since is None

    _run(database_url, body)


@pytest.mark.parametrize(("dequeue_timeout", "saturation_poll"), [(60.0, 0.05), (0.05, 60.0)])
def test_governed_queue_polls_at_the_shorter_interval(
    database_url: str, queue: Queue, dequeue_timeout: float, saturation_poll: float
) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=5)])
    options: dict[str, Any] = dict(
        lease=30.0, dequeue_timeout=dequeue_timeout, saturation_poll=saturation_poll)
    governed = Claimer(["g"], governed=["g"], **options)
    plain = Claimer(["plain"], **options)

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        for claimer in (governed, plain):
            assert await claimer.claim(aconn, claimer.eligible(time.monotonic()), 1,
                                       _starter([])) == 0
        [g], [p] = governed.queues, plain.queues
        assert g.governed and not p.governed
        assert g.dry_since is not None and p.dry_since is not None
        g_dry, p_dry = g.dry_since, p.dry_since
        # The governed queue is worth a claim after min(dequeue_timeout, saturation_poll), that
        # is 0.05 s either way; the plain one after dequeue_timeout.
        assert governed.eligible(g_dry + 0.04) == []
        assert governed.eligible(g_dry + 0.051) == [g] and g.dry_since is None
        assert plain.eligible(p_dry + dequeue_timeout - 0.01) == []
        assert plain.eligible(p_dry + dequeue_timeout + 0.001) == [p] and p.dry_since is None

    _run(database_url, body)


def test_retry_due_makes_a_dry_queue_eligible(database_url: str) -> None:
    claimer = Claimer(["a", "b"], lease=30.0, dequeue_timeout=60.0)

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        await claimer.claim(aconn, claimer.eligible(time.monotonic()), 1, _starter([]))
        assert claimer.eligible(time.monotonic()) == []
        claimer.retry_due("nope", 0)  # ignored
        claimer.retry_due("a", 0)
        claimer.retry_due("a", 5.0)  # kept too: each falls due in its turn
        claimer.retry_due("a", 7200.0)  # beyond the horizon: the supervisor's due reading's
        a = claimer.queues[0]
        assert len(a.local_dues) == 2
        assert claimer.idle_timeout(time.monotonic()) == 0.001
        assert _names(claimer.eligible(time.monotonic())) == ["a"]
        assert len(a.local_dues) == 1 and a.dry_since is None

        await claimer.claim(aconn, claimer.eligible(time.monotonic()), 1, _starter([]))
        assert claimer.eligible(time.monotonic()) == []
        claimer.retry_due("b", 5.0)
        now = time.monotonic()
        assert claimer.eligible(now) == []
        assert 4.0 < claimer.idle_timeout(now) <= 5.0
        assert _names(claimer.eligible(now + 5.0)) == ["a", "b"]  # a's second due, b's

    _run(database_url, body)


def test_a_hint_during_the_claim_keeps_the_queue_eligible(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    """The claim came back short, but a hint arrived while it ran: the queue is not dry."""
    claimer = Claimer(["a"], lease=30.0, dequeue_timeout=60.0)

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as locker:
            # Hold the queue's admission lock exclusively: the claim (shared) waits for it.
            await locker.execute("BEGIN")
            await locker.execute(
                f"SELECT pg_advisory_xact_lock(workhorse.{LOCK_ID}('a'))")
            claimed: list[int] = []

            async def claim() -> None:
                claimed.append(await claimer.claim(
                    aconn, claimer.eligible(time.monotonic()), 1, _starter([])))

            async with anyio.create_task_group() as tg:
                tg.start_soon(claim)
                with anyio.fail_after(5):
                    while conn.execute(
                        "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
                        (aconn.info.backend_pid,),
                    ).fetchone() != (1,):
                        await anyio.sleep(0.01)
                claimer.hinted(["a"])
                await locker.execute("COMMIT")
            assert claimed == [0]
        assert _names(claimer.eligible(time.monotonic())) == ["a"]

    _run(database_url, body)


def test_a_short_governed_claim_raced_by_a_hint_passes_nothing_on(
    database_url: str, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    """A governed hint came to this slot; another arrived while its claim waited for the lock;
    the claim came back short. The queue stays eligible here, and no other slot is woken for
    room that is not there."""
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=10)])
    passed: list[str] = []
    claimer = Claimer(["g"], lease=30.0, dequeue_timeout=60.0, governed=["g"],
                      pass_on=passed.append)
    claimer.hinted(["g"])

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as locker:
            await locker.execute("BEGIN")
            await locker.execute(
                f"SELECT pg_advisory_xact_lock(workhorse.{LOCK_ID}('g'))")
            claimed: list[int] = []

            async def claim() -> None:
                claimed.append(await claimer.claim(
                    aconn, claimer.eligible(time.monotonic()), 3, _starter([])))

            async with anyio.create_task_group() as tg:
                tg.start_soon(claim)
                with anyio.fail_after(5):
                    while conn.execute(
                        "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
                        (aconn.info.backend_pid,),
                    ).fetchone() != (1,):
                        await anyio.sleep(0.01)
                claimer.hinted(["g"])
                await locker.execute("COMMIT")
            assert claimed == [0]
        assert passed == []
        assert _names(claimer.eligible(time.monotonic())) == ["g"]

    _run(database_url, body)


def test_governed_hint_is_passed_on_when_the_claim_comes_back_full(
    database_url: str, queue: Queue
) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=10)])
    _fill(queue, "g", 3)
    _fill(queue, "plain", 3)
    passed: list[str] = []
    claimer = Claimer(["g", "plain"], lease=30.0, dequeue_timeout=60.0, governed=["g"],
                      pass_on=passed.append)

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        g, plain = claimer.queues
        # Not hinted: a full claim passes nothing on.
        assert await claimer.claim(aconn, [g], 1, _starter([])) == 1
        assert passed == []
        # Hinted and full (1 of 1): there may be room for another slot.
        claimer.hinted(["g"])
        assert g.relayed
        assert await claimer.claim(aconn, [g], 1, _starter([])) == 1
        assert passed == ["g"] and not g.relayed
        # An ungoverned queue's hint is never relayed.
        claimer.hinted(["plain"])
        assert not plain.relayed
        assert await claimer.claim(aconn, [plain], 1, _starter([])) == 1
        assert passed == ["g"]
        # Hinted and short (1 of 5): the hint is used up here, not passed on.
        claimer.hinted(["g"])
        assert await claimer.claim(aconn, [g], 5, _starter([])) == 1
        assert passed == ["g"] and not g.relayed and g.dry_since is not None

    _run(database_url, body)
    assert queue.list_jobs(queue="g", status="ready") == []


def test_set_governed_changes_which_hints_are_relayed(database_url: str, queue: Queue) -> None:
    _fill(queue, "a", 2)
    passed: list[str] = []
    claimer = Claimer(["a", "b"], lease=30.0, dequeue_timeout=60.0, pass_on=passed.append)

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        a, b = claimer.queues
        claimer.hinted(["a"])
        assert not a.relayed
        claimer.set_governed({"a"})
        assert a.governed and not b.governed
        claimer.hinted(["a"])
        assert a.relayed
        assert await claimer.claim(aconn, [a], 1, _starter([])) == 1
        assert passed == ["a"]
        claimer.set_governed(set())
        assert not a.governed
        assert claimer.freed(["a"], has_room=False) is False
        assert passed == ["a"]

    _run(database_url, body)


def test_freed_with_no_room_passes_on_and_with_room_claims(
    database_url: str, queue: Queue
) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=10)])
    _fill(queue, "g", 4)
    passed: list[str] = []
    claimer = Claimer(["g", "plain"], lease=30.0, dequeue_timeout=60.0, governed=["g"],
                      pass_on=passed.append)
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        g = claimer.queues[0]
        await claimer.claim(aconn, claimer.eligible(time.monotonic()), 10, _starter(started))
        assert claimer.eligible(time.monotonic()) == []  # both dry
        assert started and started[0][0] == "g"

        assert claimer.freed(["g", "plain", "nope"], has_room=False) is False
        assert passed == ["g"]  # only the governed queue, once
        assert claimer.eligible(time.monotonic()) == []

        assert claimer.freed(["g"], has_room=True) is True
        assert passed == ["g"]
        assert _names(claimer.eligible(time.monotonic())) == ["g"] and g.relayed
        _fill(queue, "g", 2)
        assert await claimer.claim(aconn, [g], 2, _starter(started)) == 2
        assert passed == ["g", "g"]  # full after freed(has_room=True): passed on
        assert claimer.freed(["plain"], has_room=True) is False

    _run(database_url, body)


def test_a_real_policy_caps_the_round(database_url: str, queue: Queue) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", max_active=2)])
    ids = _fill(queue, "q", 5)
    claimer = Claimer(["q"], lease=30.0, dequeue_timeout=60.0, governed=["q"])
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        assert await claimer.claim(aconn, claimer.eligible(time.monotonic()), 5,
                                   _starter(started)) == 2
        assert claimer.eligible(time.monotonic()) == []  # short: dry
        claimer.hinted(["q"])
        assert await claimer.claim(aconn, claimer.eligible(time.monotonic()), 5,
                                   _starter(started)) == 0  # still full

    _run(database_url, body)
    assert started == [("q", ids[:2])]
    assert sorted(j.id for j in queue.list_jobs(status="active")) == ids[:2]
    assert sorted(j.id for j in queue.list_jobs(status="ready")) == ids[2:]


def test_per_key_policy_caps_the_round(database_url: str, queue: Queue) -> None:
    queue.sync_concurrency_policies(
        "ns", [ConcurrencyPolicyDefinition("q", max_active=None, max_active_per_key=1)])
    ids = queue.enqueue_many([("t", {}, EnqueueOptions(queue="q", concurrency_key=k))
                              for k in ("x", "x", "y", "y")])
    claimer = Claimer(["q"], lease=30.0, dequeue_timeout=60.0, governed=["q"])
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        assert await claimer.claim(aconn, claimer.eligible(time.monotonic()), 4,
                                   _starter(started)) == 2

    _run(database_url, body)
    assert len(started) == 1 and sorted(started[0][1]) == [ids[0], ids[2]]


def test_claim_errors_pass_through_and_still_rotate(database_url: str, queue: Queue) -> None:
    _fill(queue, "b", 1)
    claimer = Claimer(["a", "b"], lease=30.0, dequeue_timeout=60.0)
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        eligible = claimer.eligible(time.monotonic())
        await aconn.close()
        with pytest.raises(psycopg.OperationalError):
            await claimer.claim(aconn, eligible, 1, _starter(started))
        assert _names(claimer.eligible(time.monotonic())) == ["b", "a"]

    _run(database_url, body)
    assert started == []
    assert [j.status for j in queue.list_jobs(queue="b")] == [JobStatus.READY]


@pytest.mark.parametrize("per_key", [False, True])
def test_a_rate_limit_sleeps_the_queue_until_its_next_start(
    database_url: str, queue: Queue, per_key: bool
) -> None:
    policy = (ConcurrencyPolicyDefinition("r", rate_limit_per_key="1/m") if per_key
              else ConcurrencyPolicyDefinition("r", rate_limit="2/m"))
    queue.sync_concurrency_policies("ns", [policy])
    ids = queue.enqueue_many([("t", {}, EnqueueOptions(queue="r", concurrency_key=k))
                              for k in ("x", "y", "x", "y", "x")])
    claimer = Claimer(["r"], lease=30.0, dequeue_timeout=600.0, saturation_poll=600.0,
                      governed=["r"])
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        before = time.monotonic()
        assert await claimer.claim(aconn, claimer.eligible(before), 5, _starter(started)) == 2
        after = time.monotonic()
        [state] = claimer.queues
        # Dry, and due again when the rate allows the next start: a minute from now, give or
        # take the start bucket's width (1/100 of the period, rounded up: never too early).
        assert state.dry_since is not None and state.due_at is not None
        assert before + 59 < state.due_at <= after + 60.6
        assert claimer.eligible(after) == []
        # No poll meanwhile: even past the governed poll interval, it stays asleep.
        claimer.saturation_poll = 0.001
        assert claimer.eligible(after + 30) == []
        assert 29 < claimer.idle_timeout(after + 30) <= 30.6
        assert claimer.eligible(state.due_at) == [state]
        assert state.due_at is None and state.dry_since is None
        # A hint (a policy change, say) wakes it at once.
        state.due_at = after + 60
        claimer.hinted(["r"])
        assert claimer.eligible(after) == [state]

    _run(database_url, body)
    assert started == [("r", ids[:2])]
    assert sorted(j.id for j in queue.list_jobs(status="active")) == ids[:2]


def test_a_fair_share_lap_yields_for_a_moment_not_until_a_hint(
    database_url: str, queue: Queue
) -> None:
    """Every FAIR_SHARE_LAP-th claim that carries successes of a governed queue takes none (its
    places go back to the fleet), and the queue is worth a claim again FAIR_SHARE_YIELD later
    with no hint: without LISTEN (PgBouncer) none would come but the slow poll's."""
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=100)])
    _fill(queue, "g", 3 * FAIR_SHARE_LAP)
    recorder = OutcomeRecorder(lambda: None, lambda recorded, reused: None,  # type: ignore[arg-type, return-value]
                               ride=["g"])
    claimer = Claimer(["g"], lease=30.0, dequeue_timeout=60.0, governed=["g"])
    taken: list[int] = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        (g,) = claimer.queues

        def start(state: QueueState, claimed: list[ClaimedJob]) -> None:
            for job in claimed:  # each ends at once; its success rides on the next claim
                recorder.add(Outcome(Execution(job, None, 30.0), result="null"))

        assert await claimer.claim(aconn, [g], 1, start, recorder=recorder) == 1
        for _ in range(FAIR_SHARE_LAP):
            before = time.monotonic()
            assert claimer.eligible(before, recorder.riding()) == [g]
            taken.append(await claimer.claim(aconn, [g], 1, start, recorder=recorder,
                                             governed_limit=1))
        assert taken == [1] * (FAIR_SHARE_LAP - 1) + [0]
        assert recorder.riding() == {}
        # The yield runs from when the lap's claim was sent, between `before` and `after`
        # (under load that claim alone may take longer than the yield).
        after = time.monotonic()
        assert claimer.eligible(before) == []  # the others' turn
        assert 0 < claimer.idle_timeout(before) <= (after - before) + FAIR_SHARE_YIELD
        assert claimer.eligible(after + FAIR_SHARE_YIELD + 0.001) == [g]  # no hint needed
        assert await claimer.claim(aconn, [g], 1, start, recorder=recorder) == 1

    _run(database_url, body)
    assert len(queue.list_jobs(queue="g", status="succeeded")) == FAIR_SHARE_LAP


def test_a_governed_chunk_caps_each_governed_claim_and_keeps_the_queue_eligible(
    database_url: str, queue: Queue
) -> None:
    """With `governed_chunk`, a governed queue gives at most that many jobs a claim, and a claim
    that took the chunk is not short: the queue stays eligible, so the slot claims again for the
    places still free. An ungoverned queue in the same round is not capped."""
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=20)])
    governed = _fill(queue, "g", 12)
    free = _fill(queue, "f", 12)
    claimer = Claimer(["g", "f"], lease=30.0, dequeue_timeout=60.0, governed=["g"])
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        eligible = claimer.eligible(time.monotonic())
        assert _names(eligible) == ["g", "f"]
        assert await claimer.claim(aconn, eligible, 20, _starter(started),
                                   governed_chunk=5) == 5 + 12
        assert "g" in _names(claimer.eligible(time.monotonic()))  # took its chunk: not dry
        state = next(s for s in claimer.queues if s.name == "g")
        assert await claimer.claim(aconn, [state], 20, _starter(started), governed_chunk=5) == 5

    _run(database_url, body)
    assert started == [("g", governed[:5]), ("f", free), ("g", governed[5:10])]


def test_a_chunk_never_cuts_the_replacement_of_the_claims_own_successes(
    database_url: str, queue: Queue
) -> None:
    """A full queue's claim that carries its own successes replaces all of them, whatever the
    chunk: the chunk streams the fill of free places, and a replacement it cut short left the
    rest of the places those successes freed idle for another round trip (issue #40: 29
    successes riding, 17 replaced). The chunk still caps a claim beyond them."""
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=4)])
    ids = _fill(queue, "g", 12)
    recorder = OutcomeRecorder(lambda: None, lambda recorded, reused: None,  # type: ignore[arg-type, return-value]
                               ride=["g"])
    claimer = Claimer(["g"], lease=30.0, dequeue_timeout=60.0, governed=["g"],
                      runs_jobs_in=lambda name: True)
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        (g,) = claimer.queues
        first: list[ClaimedJob] = []

        def start(state: QueueState, claimed: list[ClaimedJob]) -> None:
            first.extend(claimed)
            started.append((state.name, [job.id for job in claimed]))

        assert await claimer.claim(aconn, [g], 8, start, governed_chunk=3) == 3
        assert await claimer.claim(aconn, [g], 8, start, governed_chunk=3) == 1
        assert g.full and claimer.eligible(time.monotonic()) == []  # dry: full
        for job in first:  # all four end at once; their successes ride
            recorder.add(Outcome(Execution(job, None, 30.0), result="null"))
        (state,) = claimer.eligible(time.monotonic(), recorder.riding())
        assert state.replace_only
        assert await claimer.claim(aconn, [g], 8, _starter(started), recorder=recorder,
                                   governed_chunk=3) == 4

    _run(database_url, body)
    assert started == [("g", ids[:3]), ("g", ids[3:4]), ("g", ids[4:8])]


@pytest.mark.parametrize("case", ["full, running jobs", "full, running none", "room"])
def test_a_hint_is_left_to_the_next_ride_only_when_full_and_running_there(
    database_url: str, queue: Queue, case: str
) -> None:
    """A governed queue whose claim said `full`, in which the slot runs jobs, ignores a wake-up:
    its own next outcome rides on a claim anyway, and acting on it made every supervisor claim
    for one place given back (issue #40). Running nothing there, or after a claim that found
    room, the hint makes the queue eligible again (both show the check can fail)."""
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=2)])
    _fill(queue, "g", 5 if case != "room" else 1)
    running = case == "full, running jobs"
    claimer = Claimer(["g"], lease=30.0, dequeue_timeout=60.0, governed=["g"],
                      runs_jobs_in=lambda name: running and name == "g")
    started: Started = []

    async def body(aconn: psycopg.AsyncConnection[Any]) -> None:
        (g,) = claimer.queues
        want = 4
        assert await claimer.claim(aconn, [g], want, _starter(started)) == (
            2 if case != "room" else 1)
        assert g.full is (case != "room")  # room: short for want of jobs, not of places
        assert claimer.eligible(time.monotonic()) == []  # short: dry until a hint or a poll
        claimer.hinted(["g"])
        eligible = claimer.eligible(time.monotonic())
        assert eligible == ([] if case == "full, running jobs" else [g])

    _run(database_url, body)


def test_the_claim_says_full_only_when_the_limit_left_no_room(queue: Queue, conn: Any) -> None:
    """The `full` marker: the limit reached, by this claim or before it (then with the unlocked
    look), not a queue that ran out of ready jobs, and never an ungoverned one."""
    from workhorse import _ops
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=2)])
    _fill(queue, "g", 3)
    _fill(queue, "free", 1)
    first = _ops.execute(conn, _ops.claim_as("g", 2, 30))
    assert len(first.jobs) == 2 and first.full  # it took the last places
    second = _ops.execute(conn, _ops.claim_as("g", 2, 30))
    assert second.jobs == [] and second.full
    free = _ops.execute(conn, _ops.claim_as("free", 5, 30))
    assert len(free.jobs) == 1 and not free.full
