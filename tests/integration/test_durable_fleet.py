"""Invariant 12, "a suspended job holds nothing", the hard way (issue #42, docs/design.md
"Durable execution"): a real worker (`workhorse worker _durable_app:app`, its own OS process, two
slots) on a queue of `max_active=2` holding 100 jobs that sleep a minute durably, enqueued first,
and 20 jobs that really work 150 ms each. A sampler thread reads the queue's rows every few
milliseconds, each read one snapshot:

- the active jobs (never more than 2), and how many of them are working jobs;
- the suspended jobs, and those of them that hold a lease or an attempt (must be none);
- the jobs that hold a place after suspending: `active` while their current fence has recorded a
  pending step, what the suspension writes in the same transaction as `suspended` (must be none).

The working jobs report when they really ran (time.time() at their start and end): two ran at once
while the 100 slept, and never three; a sample saw all 100 suspended and 2 working jobs active,
so the sleepers counted toward nothing. At the end the 100 are still suspended, with no lease and
no attempt used.

The checker is shown to fail on broken copies of the live suspend function installed in the
test's database before the worker starts: one that leaves the job `active` with its lease (the
sleepers hold the queue's two places until their leases run out), one that suspends it with its
lease, and one that keeps its attempt. They test the checker, not the server: CI's first pass
only (marker `slow` alone); the intact run also in its second (`fleet`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _durable_app as da
import psycopg
import pytest
from _backoff_harness import Supervisor, scalar, wait_for
from _integration import install_broken

from workhorse import App, _sql

pytestmark = pytest.mark.slow

SLEEPERS = 100
WORKERS = 20
OPTIONS = ("--slots", "2", "--concurrency", "2", "--lease", "2s", "--dequeue-timeout", "1s",
           "--grace", "10s")
RUN_TIMEOUT = 60.0  # an intact run takes 2-4 s; a broken one is cut at BROKEN_WINDOW
BROKEN_WINDOW = 8.0

SUSPEND = _sql.function_name("suspend")
# The update that suspends the job, and broken copies of it.
SUSPENDS = """\
    SET status = CASE WHEN v_met THEN 'ready' ELSE 'suspended' END,
        suspended_on = CASE WHEN v_met THEN NULL ELSE p_reason END,
        wake_at = CASE WHEN v_met THEN NULL ELSE p_wake_at END,
        attempts = j.attempts - 1,
        lease_until = NULL,"""
BROKEN = {
    "stays active": SUSPENDS.replace("ELSE 'suspended' END", "ELSE 'active' END").replace(
        "lease_until = NULL,", "lease_until = j.lease_until,"),
    "keeps its lease": SUSPENDS.replace("lease_until = NULL,", "lease_until = j.lease_until,"),
    "keeps its attempt": SUSPENDS.replace("attempts = j.attempts - 1,", "attempts = j.attempts,"),
}
EXPECTED = {"stays active": "held their place after suspending",
            "keeps its lease": "suspended jobs held a lease or an attempt",
            "keeps its attempt": "suspended jobs held a lease or an attempt"}

SAMPLE = """
SELECT count(*) FILTER (WHERE j.status = 'active'),
       count(*) FILTER (WHERE j.status = 'active' AND j.task = 'du.work'),
       count(*) FILTER (WHERE j.status = 'suspended'),
       count(*) FILTER (WHERE j.status = 'suspended'
                          AND (j.lease_until IS NOT NULL OR j.attempts > 0)),
       count(*) FILTER (WHERE j.status = 'active' AND EXISTS (
           SELECT 1 FROM workhorse.job_steps s
           WHERE s.job_id = j.id AND s.fence = j.fence AND s.recorded_at IS NULL))
FROM workhorse.jobs j WHERE j.queue = %s
"""


@dataclass
class Sample:
    active: int
    working: int
    suspended: int
    # suspended with a lease or an attempt (the sleepers never failed: a suspended one has
    # used none)
    holding_lease: int
    holding_place: int  # active after its suspension was recorded


@dataclass
class Sampler:
    """Reads SAMPLE in a loop on a connection of its own until stopped."""

    url: str
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self._stop.is_set():
                    row = conn.execute(SAMPLE, (da.QUEUE,)).fetchone()
                    assert row is not None
                    self.samples.append(Sample(*row))
                    time.sleep(0.002)
        except BaseException as exc:  # shown by the test
            self.error = exc


def peak(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals [start, end) that overlap at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = top = 0
    for _, change in events:  # at one instant, the ends (-1) before the starts
        running += change
        top = max(top, running)
    return top


def check(samples: list[Sample], intervals: list[tuple[float, float]]) -> str:
    """Invariant 12 on a run: raises AssertionError naming what was held."""
    assert len(samples) > 50, f"the sampler read only {len(samples)} times"
    holding = [s for s in samples if s.holding_place]
    assert not holding, (f"jobs held their place after suspending in {len(holding)} of "
                         f"{len(samples)} samples, e.g. {holding[0]}")
    leased = [s for s in samples if s.holding_lease]
    assert not leased, (f"suspended jobs held a lease or an attempt in {len(leased)} of "
                        f"{len(samples)} samples, e.g. {leased[0]}")
    over = [s for s in samples if s.active > da.MAX_ACTIVE]
    assert not over, f"more than {da.MAX_ACTIVE} active: {over[:3]}"
    full = [s for s in samples if s.suspended == SLEEPERS and s.working == da.MAX_ACTIVE]
    assert full, (f"no sample saw {SLEEPERS} suspended and {da.MAX_ACTIVE} working jobs active: "
                  "the sleepers counted toward the limit")
    ran = peak(intervals)
    assert len(intervals) == WORKERS and ran == da.MAX_ACTIVE, (
        f"the working jobs ran {ran} at once ({len(intervals)} of {WORKERS} ran) while "
        f"{SLEEPERS} slept")
    return (f"{len(samples)} samples: {len(full)} with {SLEEPERS} suspended and "
            f"{da.MAX_ACTIVE} working; the working jobs ran {ran} at once")


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    """What a deployment does: the app, built on the test's database, stores its policy by
    `app.sync()`; the test enqueues through it."""
    app = da.fleet_app(database_url)
    app.sync()
    yield app
    app.close()


def run(database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, app: App,
        window: float) -> tuple[list[Sample], list[tuple[float, float]]]:
    """The backlog, then a worker and the sampler until every working job succeeded and the
    sleepers are all suspended (or `window` seconds passed); the samples and the working
    jobs' real intervals."""
    sleeper, work = app.tasks["du.sleeper"], app.tasks["du.work"]
    app.enqueue_many(sleeper.call((n,)) for n in range(SLEEPERS))
    app.enqueue_many(work.call((n,)) for n in range(WORKERS))
    done = ("SELECT count(*) FILTER (WHERE task = 'du.work' AND status = 'succeeded') = %s "
            "AND count(*) FILTER (WHERE task = 'du.sleeper' AND status = 'suspended') = %s "
            "FROM workhorse.jobs WHERE queue = %s")
    with Sampler(database_url) as sampler:
        worker = Supervisor(database_url, "_durable_app:app", tmp_path / "worker.log", *OPTIONS)
        try:
            deadline = time.monotonic() + window
            wait_for(lambda: scalar(conn, done, WORKERS, SLEEPERS, da.QUEUE)
                     or time.monotonic() > deadline,
                     window + 5, "the working jobs to succeed", worker)
        finally:
            code = worker.stop()
    assert sampler.error is None, sampler.error
    assert code == 0, worker.output()[-5000:]
    intervals = [(result["start"], result["end"]) for (result,) in conn.execute(
        "SELECT result FROM workhorse.all_jobs WHERE task = 'du.work' AND status = 'succeeded'"
    ).fetchall()]
    return sampler.samples, intervals


@pytest.mark.fleet
def test_suspended_jobs_hold_nothing_while_others_work(
        database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, app: App) -> None:
    samples, intervals = run(database_url, conn, tmp_path, app, RUN_TIMEOUT)
    print(check(samples, intervals))
    # And afterwards: all 100 still asleep, none holding a lease or an attempt, none run twice.
    rows = conn.execute(
        "SELECT status, suspended_on, count(*), count(lease_until), sum(attempts), "
        "min(wake_at) > clock_timestamp() + interval '30 seconds' FROM workhorse.jobs "
        "WHERE task = 'du.sleeper' GROUP BY 1, 2").fetchall()
    assert rows == [("suspended", "sleep", SLEEPERS, 0, 0, True)], rows
    assert scalar(conn, "SELECT count(*) FROM workhorse.job_steps WHERE kind = 'sleep' "
                        "AND recorded_at IS NULL") == SLEEPERS


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_checker_fails_on_a_suspension_that_holds_something(
        database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, app: App,
        broken: str) -> None:
    install_broken(conn, SUSPEND, SUSPENDS, BROKEN[broken])
    samples, intervals = run(database_url, conn, tmp_path, app, BROKEN_WINDOW)
    with pytest.raises(AssertionError, match=EXPECTED[broken]) as failure:
        check(samples, intervals)
    print(f"{broken}: {str(failure.value).splitlines()[0][:300]}")
