"""Fair-share laps on demand (workhorse/worker/claimer.py, FAIR_SHARE_LAP; issue #40).

A slot whose successes ride on its claims gives its places back to the fleet every
FAIR_SHARE_LAP-th ride, so that a budget smaller than one slot still spreads over every slot and
supervisor serving the queue. It does so only while it holds more than its share: the queue's
max_active over the slots of the live supervisors serving it, which the supervisor's timer reads
from the registry (next_due.sql) and sends to its slots. Where no share is known (no queue-wide
max_active) it laps as before.

1. The share, from the database: max_active in force (an override's) over the live slots serving
   the queue, unrounded; none for an ungoverned queue, a per-key limit alone, or a queue whose
   jobs name a budget; a supervisor not seen for 30 s is not counted.
2. The claimer: within its share it never laps; above it, the next ride laps: whole when its
   share is below one place (or unknown), else it gives back only what it holds beyond its
   share and refills the rest of its successes' places in the same claim.
3. A real fleet: 3 supervisors of one slot and 4 places each on a queue with max_active=2 (a
   share of 2/3). Every supervisor runs a part of the jobs. The checker fails on the same fleet
   whose claimers never lap (one supervisor, at least, then never gets a place).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from _integration import REPO

from workhorse import (
    BudgetDefinition,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    Queue,
    _ops,
)
from workhorse.types import ClaimedJob
from workhorse.worker.claimer import FAIR_SHARE_LAP, Claimer, QueueState
from workhorse.worker.executor import Execution, Outcome
from workhorse.worker.recorder import OutcomeRecorder


def _shares(conn: psycopg.Connection[Any], queues: list[str]) -> dict[str, float | None]:
    return {timer.queue: timer.share for timer in _ops.execute(conn, _ops.next_due(queues))}


def _register(conn: psycopg.Connection[Any], pid: int, slots: int, queues: list[str]) -> int:
    worker_id = _ops.execute(conn, _ops.register_worker("laps", "host", pid, slots, queues, {}))
    assert worker_id is not None
    return worker_id


def test_the_share_is_max_active_over_the_live_slots_serving_the_queue(
    conn: psycopg.Connection[Any], queue: Queue
) -> None:
    queue.sync_concurrency_policies("laps", [
        ConcurrencyPolicyDefinition("q", max_active=64),
        ConcurrencyPolicyDefinition("keyed", max_active_per_key=2),
        ConcurrencyPolicyDefinition("budgeted", max_active=10),
    ])
    queue.sync_budgets("laps", [BudgetDefinition("api", max_active=5)])
    queue.enqueue("t", {"args": [], "kwargs": {}}, EnqueueOptions(queue="budgeted", budget="api"))
    queues = ["q", "keyed", "budgeted", "free"]
    # No supervisor registered yet: one slot's worth, the whole limit.
    assert _shares(conn, queues) == {"q": 64.0, "keyed": None, "budgeted": None, "free": None}

    _register(conn, 1, 2, ["q", "other"])
    _register(conn, 2, 6, ["q"])
    _register(conn, 3, 5, ["other"])  # serves another queue: not counted
    gone = _register(conn, 4, 10, ["q"])
    conn.execute("UPDATE workhorse.workers SET last_seen = now() - interval '31 seconds'"
                 " WHERE id = %s", (gone,))
    assert _shares(conn, ["q"]) == {"q": 8.0}

    # An override's max_active is the one in force; unrounded below one place a slot.
    queue.override_policy("q", max_active=3, expires_in=60)
    assert _shares(conn, ["q"]) == {"q": 3 / 8}
    queue.clear_override("q")
    assert _shares(conn, ["q"]) == {"q": 8.0}


def _riding(held: dict[str, int], share: float) -> tuple[
        OutcomeRecorder, Claimer, Callable[[QueueState, list[ClaimedJob]], None]]:
    """A recorder whose successes of "g" ride on claims, a claimer that holds `held["g"]` places
    there with a share of `share`, and a `start` under which every job claimed ends at once."""
    recorder = OutcomeRecorder(lambda: None, lambda recorded, reused: None,  # type: ignore[arg-type, return-value]
                               ride=["g"])
    claimer = Claimer(["g"], lease=30.0, dequeue_timeout=60.0, governed=["g"],
                      holds_in=held.__getitem__, shares={"g": share})

    def start(state: QueueState, claimed: list[ClaimedJob]) -> None:
        for job in claimed:  # each ends at once; its success rides on the next claim
            recorder.add(Outcome(Execution(job, None, 30.0), result="null"))

    return recorder, claimer, start


def test_a_slot_within_its_share_never_laps_and_above_it_laps_at_the_next_ride(
    database_url: str, queue: Queue
) -> None:
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=100)])
    queue.enqueue_many([("t", {"args": [i], "kwargs": {}}, EnqueueOptions(queue="g"))
                        for i in range(4 * FAIR_SHARE_LAP)])
    held = {"g": 1}
    recorder, claimer, start = _riding(held, 1.0)
    taken: list[int] = []

    async def body() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            (g,) = claimer.queues

            async def ride() -> None:
                assert claimer.eligible(time.monotonic(), recorder.riding()) == [g]
                taken.append(await claimer.claim(aconn, [g], 1, start, recorder=recorder,
                                                 governed_limit=1))

            assert await claimer.claim(aconn, [g], 1, start, recorder=recorder) == 1
            for _ in range(2 * FAIR_SHARE_LAP):  # one place held, a share of one: no lap
                await ride()
            assert taken == [1] * (2 * FAIR_SHARE_LAP)
            held["g"] = 2  # above its share: the next ride laps
            await ride()
            assert taken[-1] == 0
            # Within its share again, and the count starts over: no lap for a whole lap.
            held["g"] = 1
            await anyio.sleep(0.05)  # the lap's yield
            assert await claimer.claim(aconn, [g], 1, start, recorder=recorder) == 1
            for _ in range(FAIR_SHARE_LAP):
                await ride()
            assert taken[-FAIR_SHARE_LAP:] == [1] * FAIR_SHARE_LAP

            claimer.set_shares({})  # no share known: every FAIR_SHARE_LAP-th ride laps
            rides = 0
            while taken[-1] != 0:  # the rides since the last lap count towards this one
                assert rides < FAIR_SHARE_LAP
                await ride()
                rides += 1

    anyio.run(body)


def test_a_slot_above_a_share_of_places_gives_back_only_its_excess(
    database_url: str, queue: Queue
) -> None:
    """A slot holding 5 places with a share of 3.0 whose 5 successes ride on its lap refills 3
    of their places and gives back 2, without the lap's yield: a whole lap gave back all 5 and
    idled them (issue #40). With a share of 0.5 (a budget smaller than the fleet) the lap is
    whole, as before."""
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("g", max_active=100)])
    queue.enqueue_many([("t", {"args": [i], "kwargs": {}}, EnqueueOptions(queue="g"))
                        for i in range(30)])
    recorder, claimer, start = _riding({"g": 5}, 3.0)
    laps: list[tuple[int, bool]] = []  # (jobs the lap took, whether the queue then yields)

    async def body() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            (g,) = claimer.queues

            for share in (3.0, 0.5):
                claimer.set_shares({"g": share})
                g.due_at = g.dry_since = None
                assert await claimer.claim(aconn, [g], 5, start, recorder=recorder) == 5
                g.rides = FAIR_SHARE_LAP - 1  # the next ride is a lap
                taken = await claimer.claim(aconn, [g], 5, start, recorder=recorder,
                                            governed_limit=5)
                laps.append((taken, g.due_at is not None))
                recorder.release_riding()

    anyio.run(body)
    assert laps == [(3, False), (0, True)]


# ---- the fleet ----------------------------------------------------------------------------------

SUPERVISORS = 3
LIMIT = 2
JOBS = 240
OPTIONS = ("--slots", "1", "--concurrency", "4", "--lease", "10s", "--dequeue-timeout", "5s")

APP = '''
import os
import time

import workhorse

app = workhorse.App("laps")


@app.task(name="laps.run", queue="laps", max_active=2)
def run(seconds):
    time.sleep(seconds)
    return os.getpid()
'''

# The broken variant: the same worker whose claimers never lap (a slot always within its share).
NO_LAPS = '''
import sys

from workhorse.cli import main
from workhorse.worker import claimer

claimer.Claimer._above_share = lambda self, state: False
sys.argv[0] = "workhorse"
main(prog_name="workhorse")
'''


def _claiming(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND application_name LIKE 'workhorse-slot%%-claim'").fetchone()
    assert row is not None
    return int(row[0])


def _pids(conn: psycopg.Connection[Any]) -> Counter[int]:
    rows = conn.execute("SELECT (result #>> '{}')::integer FROM workhorse.jobs"
                        " WHERE queue = 'laps' AND status = 'succeeded'").fetchall()
    return Counter(row[0] for row in rows)


def run_fleet(database_url: str, conn: psycopg.Connection[Any], where: Path,
              entry: list[str]) -> Counter[int]:
    """SUPERVISORS supervisors started with `entry` (the worker command before its arguments);
    JOBS jobs of 20 ms once every slot claims. Returns how many jobs each slot ran, by its pid
    (each supervisor has one slot)."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}
    logs = [(where / f"worker{n}.log").open("wb") for n in range(SUPERVISORS)]
    procs = [subprocess.Popen([*entry, "worker", "laps_app:app", *OPTIONS], cwd=where, env=env,
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
             for log in logs]

    def output() -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(where.glob("worker*.log")))

    try:
        deadline = time.monotonic() + 120
        while _claiming(conn) < SUPERVISORS:
            assert time.monotonic() < deadline, f"the slots did not connect\n{output()}"
            time.sleep(0.05)
        # Every supervisor registered and its timer read the share (it reads at least every s).
        time.sleep(1.5)
        queue = Queue(conn)
        queue.enqueue_many([("laps.run", {"args": [0.02], "kwargs": {}},
                             EnqueueOptions(queue="laps")) for _ in range(JOBS)])
        deadline = time.monotonic() + 120
        while sum(_pids(conn).values()) < JOBS:
            assert time.monotonic() < deadline, f"the jobs did not finish\n{output()}"
            time.sleep(0.1)
        return _pids(conn)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for log in logs:
            log.close()


def spread(ran: Counter[int]) -> str | None:
    """None when SUPERVISORS slots each ran at least a tenth of their even part; else why not."""
    least = JOBS // SUPERVISORS // 10
    if len(ran) < SUPERVISORS or min(ran.values()) < least:
        return f"jobs by slot pid {dict(ran)}: not every one of {SUPERVISORS} ran {least}"
    return None


@pytest.fixture
def laps_app(conn: psycopg.Connection[Any], tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "laps_app.py").write_text(APP)
    (tmp_path / "no_laps.py").write_text(NO_LAPS)
    Queue(conn).sync_concurrency_policies("laps", [
        ConcurrencyPolicyDefinition("laps", max_active=LIMIT)])
    yield tmp_path


@pytest.mark.slow
def test_a_budget_smaller_than_the_fleet_spreads_over_every_supervisor(
    database_url: str, conn: psycopg.Connection[Any], laps_app: Path
) -> None:
    ran = run_fleet(database_url, conn, laps_app, [sys.executable, "-m", "workhorse"])
    assert spread(ran) is None, spread(ran)


@pytest.mark.slow
def test_the_spread_checker_fails_on_a_fleet_that_never_laps(
    database_url: str, conn: psycopg.Connection[Any], laps_app: Path
) -> None:
    ran = run_fleet(database_url, conn, laps_app,
                    [sys.executable, str(laps_app / "no_laps.py")])
    assert sum(ran.values()) == JOBS
    assert spread(ran) is not None
    assert len(ran) < SUPERVISORS  # the supervisors that found the queue full never got a place
