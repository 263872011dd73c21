"""Per-key limits exact under a fleet (issue #41, docs/design.md "Per-key limits"): four
supervisors (`workhorse worker`, each its own OS process, --slots 1 --concurrency 16) drain one
queue whose limits per key are data, declared by an app (_key_limits_app.py) and stored by
`app.sync()`. Two records of when each job ran are checked, key by key:

- the database's: [started_at, finished_at), stamped by the claim and by the outcome with
  clock_timestamp(), which spans every moment the claim counts the job as active;
- the handler's own: [start, end) by time.time() as it starts and ends (the job's result), inside
  the former: when the job really ran.

A key's peak is the most of its intervals that overlap at one instant.

1. 1,000 keys: 50 premium keys of their own limit 3 (8 jobs each), 950 free keys at the set's
   default 1 (2 jobs each), under a policy whose max_active_per_key is 5. No key's peak passes
   its own limit in either record; at least 45 premium keys had 3 active at once, and at least
   25 really ran 3 at once (so the limit is what held them, not a fleet too small to reach it).
2. 200 keys: 20 premium keys of their own limit 10 (40 jobs each), 180 free keys at the default 1,
   policy per-key 3. Every key's peak equals its limit (the database's record), never more (both
   records); every premium key really ran at least 4 at once (more than the policy's 3), and
   at least 2 of them 10. While
   the fleet runs, once the free key f000 (150 jobs, the oldest) has run 10 jobs, the test
   raises it to 4 with `Queue.set_key_limits(None, queue, {"f000": KeyLimit(max_active=4)},
   prune=False)`: it never ran 2 at once before the call, and had 4 active at once after the
   call's commit, within its first 20 starts after it (the claims that follow the commit take
   it to 4 at once: its head is the oldest), and really ran more than 1 at once.
3. The same checkers fail on the same fleets with a broken claim installed in the test's database
   before the workers start: one that ignores the keys' own rows (the premium keys stay at the
   default), one that ignores the set's default (the free keys run up to the policy's per-key
   limit), and one that ignores the promoted key's row only (its change never takes).

Each run is 2-6 s of a fleet on an idle 2-core machine; the file, 30 s.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import _key_limits_app as kl
import psycopg
import pytest
from _backoff_harness import Supervisor, rows, scalar, stop_all, wait_for
from _integration import install_broken

from workhorse import App, KeyLimit, Queue, _sql

# Several supervisors: CI's first pass; the intact claims also in its second (marker `fleet`: the
# claim plans differently on PostgreSQL 15), the broken ones, which test the checkers, not the
# server, only once.
pytestmark = pytest.mark.slow


def _claims(names: list[str]) -> list[Any]:
    return [pytest.param(name, marks=pytest.mark.fleet) if name == "intact" else name
            for name in names]


SUPERVISORS = 4
OPTIONS = ("--slots", "1", "--concurrency", "16", "--lease", "30s", "--dequeue-timeout", "1s",
           "--grace", "10s")
DRAIN_TIMEOUT = 120.0  # generous: a busy 2-core machine; a fleet that stalls fails after it

# The claim as shipped, and three broken copies (the line that admits a key's next unit).
CHOOSE = _sql.function_name("_choose_units")
ADMIT = "> COALESCE(k_own_max[v_best], p_default_max, p_per_key, c_big)"
CLAIMS = {
    "intact": None,
    "rows ignored": "> COALESCE(p_default_max, p_per_key, c_big)",
    "default ignored": "> COALESCE(k_own_max[v_best], p_per_key, c_big)",
    # Only the promoted key's row is ignored: the change is stored, and never takes.
    "promotion ignored": (f"> COALESCE(CASE WHEN k_key[v_best] = '{kl.PROMOTED}' THEN NULL "
                          "ELSE k_own_max[v_best] END, p_default_max, p_per_key, c_big)"),
}
EXPECTED = {"rows ignored": "premium keys below their limit",
            "default ignored": "keys above their own limit",
            "promotion ignored": "the promoted key had at most 1 active at once after its change"}

Interval = tuple[Any, Any]  # [start, end): datetimes (the database's) or floats (time.time())


def peak(intervals: Iterable[Interval], begin: Any = None, end: Any = None) -> int:
    """The most intervals [start, end) that overlap at one instant (within [begin, end) when
    given); an interval ending at the instant another starts does not overlap it."""
    events: list[tuple[Any, int]] = []
    for start, stop in intervals:
        if begin is not None:
            start = max(start, begin)
        if end is not None:
            stop = min(stop, end)
        if start < stop:
            events += [(start, 1), (stop, -1)]
    running = top = 0
    for _, change in sorted(events):  # at one instant, the ends (-1) before the starts
        running += change
        top = max(top, running)
    return top


@dataclass
class Record:
    """Each key's intervals: the database's and the handler's own."""

    db: dict[str, list[tuple[datetime, datetime]]]
    real: dict[str, list[tuple[float, float]]]


def record(conn: psycopg.Connection[Any], queue: str) -> Record:
    db: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    real: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, started, finished, result in rows(
            conn, "SELECT ckey, started_at, finished_at, result FROM workhorse.all_jobs "
                  "WHERE queue = %s AND status = 'succeeded'", queue):
        db[key].append((started, finished))
        real[key].append((result["start"], result["end"]))
    return Record(dict(db), dict(real))


def above(recorded: Record, limits: dict[str, int]) -> dict[str, tuple[int, int]]:
    """The keys whose peak passed their limit: {key: (database peak, handler peak)}."""
    found = {}
    for key, limit in limits.items():
        peaks = (peak(recorded.db.get(key, [])), peak(recorded.real.get(key, [])))
        if max(peaks) > limit:
            found[key] = peaks
    return found


def shown(found: dict[str, Any]) -> str:
    return f"{len(found)}: {dict(list(found.items())[:8])}"


@pytest.fixture
def declared(database_url: str) -> Iterator[Callable[[Callable[[str], App]], App]]:
    """What a deployment does: the app (built on the test's database) stores its policy and key
    limits by `app.sync()`; the test enqueues through it."""
    apps: list[App] = []

    def declare(build: Callable[[str], App]) -> App:
        app = build(database_url)
        apps.append(app)
        report = app.sync()
        assert report.key_limits is not None and report.key_limits.updated == list(
            app.declared_key_limits), report
        return app

    try:
        yield declare
    finally:
        for app in apps:
            app.close()


def install(conn: psycopg.Connection[Any], claim: str) -> None:
    broken = CLAIMS[claim]
    if broken is not None:
        install_broken(conn, CHOOSE, ADMIT, broken)


def drain(database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, app: str,
          queue: str, total: int,
          meanwhile: Callable[[list[Supervisor]], None] | None = None) -> float:
    """Run SUPERVISORS supervisors of `app` until `total` jobs of `queue` succeeded (calling
    `meanwhile` once they are started); stop them; the seconds it took."""
    began = time.monotonic()
    supervisors = [Supervisor(database_url, app, tmp_path / f"s{i}.log", *OPTIONS)
                   for i in range(SUPERVISORS)]
    try:
        if meanwhile is not None:
            meanwhile(supervisors)
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.all_jobs "
                                      "WHERE queue = %s AND status = 'succeeded'",
                                queue) == total,
                 DRAIN_TIMEOUT, f"the fleet to run all {total} jobs", *supervisors)
    finally:
        codes = stop_all(supervisors)
    assert codes == [0] * SUPERVISORS, [s.output()[-3000:] for s in supervisors]
    # Every supervisor's slot ran jobs (the handler returns its process id).
    assert scalar(conn, "SELECT count(DISTINCT result->>'pid') FROM workhorse.all_jobs "
                        "WHERE queue = %s", queue) == SUPERVISORS
    return time.monotonic() - began


# ---- 1. 1,000 keys ---------------------------------------------------------------------------

FREE = [f"f{i:03}" for i in range(950)]
PREMIUM_JOBS = 8  # a key's jobs are consecutive in admission order
FREE_JOBS = 2
# Of the 50 premium keys, how many must reach their limit 3: by the database's record (the claim
# admitted 3 at once, then had to refuse a 4th), and by the handlers' (3 really ran at once: a
# claim's jobs start a few ms apart, and a key's 3 may come from two claims, so fewer).
PREMIUM_AT_LIMIT_DB = 45
PREMIUM_AT_LIMIT_REAL = 25


def check(conn: psycopg.Connection[Any]) -> str:
    recorded = record(conn, kl.QUEUE)
    assert len(recorded.db) == len(kl.PREMIUM) + len(FREE), len(recorded.db)
    limits = ({key: kl.PREMIUM_LIMIT for key in kl.PREMIUM}
              | {key: kl.DEFAULT_LIMIT for key in FREE})
    over = above(recorded, limits)
    assert over == {}, f"keys above their own limit (database, handler): {shown(over)}"
    db = [key for key in kl.PREMIUM if peak(recorded.db[key]) == kl.PREMIUM_LIMIT]
    real = [key for key in kl.PREMIUM if peak(recorded.real[key]) == kl.PREMIUM_LIMIT]
    assert len(db) >= PREMIUM_AT_LIMIT_DB and len(real) >= PREMIUM_AT_LIMIT_REAL, (
        f"premium keys below their limit: {len(db)} of {len(kl.PREMIUM)} had "
        f"{kl.PREMIUM_LIMIT} active at once, {len(real)} ran {kl.PREMIUM_LIMIT} at once: the "
        "fleet did not test the limit")
    return (f"{len(db)} of {len(kl.PREMIUM)} premium keys had {kl.PREMIUM_LIMIT} active at once, "
            f"{len(real)} ran {kl.PREMIUM_LIMIT} at once; none above")


@pytest.fixture
def backlog(declared: Callable[[Callable[[str], App]], App]) -> int:
    app = declared(kl.fleet_app)
    work = app.tasks["kl.work"]
    calls = [work.call((n, key)) for key in kl.PREMIUM for n in range(PREMIUM_JOBS)]
    calls += [work.call((n, key)) for key in FREE for n in range(FREE_JOBS)]
    app.enqueue_many(calls)
    return len(calls)


@pytest.mark.parametrize("claim", _claims(["intact", "rows ignored", "default ignored"]))
def test_a_fleet_holds_every_one_of_1000_keys_to_its_own_limit(
        database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, backlog: int,
        claim: str) -> None:
    install(conn, claim)
    took = drain(database_url, conn, tmp_path, "_key_limits_app:fleet", kl.QUEUE, backlog)
    if claim == "intact":
        print(f"{backlog} jobs in {took:.1f} s: {check(conn)}")
        return
    # The checker must fail on a broken claim: premium keys at the default (1), or free keys
    # at the policy's per-key 5.
    with pytest.raises(AssertionError, match=EXPECTED[claim]) as failure:
        check(conn)
    print(f"{claim}: {str(failure.value).splitlines()[0][:300]}")


# ---- 2. premium and free keys, and a promotion while the fleet runs ---------------------------

TIERS_FREE = [f"f{i:03}" for i in range(180)]  # f000 is kl.PROMOTED
TIERS_PREMIUM_JOBS = 40
TIERS_FREE_JOBS = 3
PROMOTED_JOBS = 150
PROMOTE_AFTER = 10  # the promoted key's jobs run (one at a time) before the change
# Each premium key really ran more at once than the policy's per-key 3 (what "rows ignored" gives).
TIERS_REAL_MIN = kl.TIERS_POLICY_PER_KEY + 1
TIERS_AT_LIMIT_REAL = 2  # of the 20 premium keys: how many must really run 10 at once
PROMOTED_SOON = 20  # its starts after the change by which it must have PROMOTED_LIMIT active
SOON = timedelta(microseconds=1)


@dataclass
class Change:
    """When `set_key_limits` was called and when it had returned (its commit in between), by
    the database's clock and by time.time()."""

    db_before: datetime
    db_after: datetime
    before: float
    after: float


def check_tiers(conn: psycopg.Connection[Any], change: Change) -> str:
    recorded = record(conn, kl.TIERS_QUEUE)
    assert len(recorded.db) == len(kl.TIERS_PREMIUM) + len(TIERS_FREE), len(recorded.db)
    limits = ({key: kl.TIERS_PREMIUM_LIMIT for key in kl.TIERS_PREMIUM}
              | {key: kl.TIERS_DEFAULT_LIMIT for key in TIERS_FREE})
    limits[kl.PROMOTED] = kl.PROMOTED_LIMIT
    over = above(recorded, limits)
    promoted_db, promoted_real = recorded.db[kl.PROMOTED], recorded.real[kl.PROMOTED]
    # Before the change: the default's 1, over every instant up to the call.
    before = (peak(promoted_db, end=change.db_before), peak(promoted_real, end=change.before))
    if max(before) > kl.TIERS_DEFAULT_LIMIT:
        over[f"{kl.PROMOTED} before its change"] = before
    assert over == {}, f"keys above their own limit (database, handler): {shown(over)}"
    ran_before = sum(start < change.db_before for start, _ in promoted_db)
    assert ran_before >= PROMOTE_AFTER, ran_before
    # Never more, and exactly: every key had its limit active at once (the database's record).
    below = {key: peak(recorded.db[key]) for key in kl.TIERS_PREMIUM + TIERS_FREE[1:]
             if peak(recorded.db[key]) != limits[key]}
    assert below == {}, f"premium keys below their limit: {shown(below)}"
    # And really ran: every premium key more at once than the policy's per-key limit would
    # let it, some exactly their 10 (a key's 10 come from one claim or two, its jobs start
    # a few ms apart, and some last only 10 ms: 7-10 on an idle machine, 5-10 on a slow busy
    # one, where only 4 of the 20 reached 10; the database's record above is the exact check).
    real = {key: peak(recorded.real[key]) for key in kl.TIERS_PREMIUM}
    at_limit = sum(n == kl.TIERS_PREMIUM_LIMIT for n in real.values())
    assert min(real.values()) >= TIERS_REAL_MIN and at_limit >= TIERS_AT_LIMIT_REAL, (
        f"premium keys below their limit: they really ran {sorted(real.values())} at once")
    # After the change's commit: its new limit, first by the claim's count.
    after = peak(promoted_db, begin=change.db_after)
    assert after == kl.PROMOTED_LIMIT, (
        f"the promoted key had at most {after} active at once after its change to "
        f"{kl.PROMOTED_LIMIT} (before: {before[0]})")
    starts = sorted(start for start, _ in promoted_db if start >= change.db_after)
    # At once: the oldest head, it is the first a claim with a free place meets.
    first = next(n for n, start in enumerate(starts)
                 if peak(promoted_db, end=start + SOON) >= after)
    assert first < PROMOTED_SOON, (
        f"the promoted key had {after} active only at its {first + 1}th start after its change")
    delay = (starts[first] - change.db_after).total_seconds()
    real_after = peak(promoted_real, begin=change.after)
    assert real_after >= 2, f"the promoted key never ran 2 at once after its change: {real_after}"
    return (f"{len(kl.TIERS_PREMIUM)} premium keys at {kl.TIERS_PREMIUM_LIMIT} ({at_limit} ran "
            f"{kl.TIERS_PREMIUM_LIMIT} at once, all at least {min(real.values())}), "
            f"{len(TIERS_FREE) - 1} free at "
            f"{kl.TIERS_DEFAULT_LIMIT}; {kl.PROMOTED}: {ran_before} jobs one at a time before "
            f"its change, {kl.PROMOTED_LIMIT} active {delay:.3f} s after its commit, at its "
            f"start {first + 1} after it ({real_after} ran at once)")


@pytest.fixture
def tiers_backlog(declared: Callable[[Callable[[str], App]], App]) -> int:
    app = declared(kl.tiers_app)
    tier = app.tasks["kl.tier"]
    # The promoted key's jobs first (the oldest head: every claim meets it first), then each
    # premium key's, then the free keys'.
    calls = [tier.call((n, kl.PROMOTED)) for n in range(PROMOTED_JOBS)]
    calls += [tier.call((n, key)) for key in kl.TIERS_PREMIUM for n in range(TIERS_PREMIUM_JOBS)]
    calls += [tier.call((n, key)) for key in TIERS_FREE[1:] for n in range(TIERS_FREE_JOBS)]
    app.enqueue_many(calls)
    return len(calls)


def promote(conn: psycopg.Connection[Any], supervisors: list[Supervisor]) -> Change:
    """Once the promoted key has run PROMOTE_AFTER jobs, raise it to PROMOTED_LIMIT, as an
    operator does (no namespace; the other keys' rows and the default stay)."""
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.all_jobs WHERE queue = %s "
                                  "AND ckey = %s AND status = 'succeeded'",
                            kl.TIERS_QUEUE, kl.PROMOTED) >= PROMOTE_AFTER,
             DRAIN_TIMEOUT, f"{PROMOTE_AFTER} jobs of {kl.PROMOTED}", *supervisors)
    db_before, before = scalar(conn, "SELECT clock_timestamp()"), time.time()
    report = Queue(conn).set_key_limits(
        None, kl.TIERS_QUEUE, {kl.PROMOTED: KeyLimit(max_active=kl.PROMOTED_LIMIT)},
        prune=False)
    after, db_after = time.time(), scalar(conn, "SELECT clock_timestamp()")
    assert report.created == [kl.PROMOTED] and report.pruned == [], report
    left = scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = %s AND ckey = %s "
                        "AND status = 'ready'", kl.TIERS_QUEUE, kl.PROMOTED)
    assert left >= 5 * kl.PROMOTED_LIMIT, f"only {left} jobs of {kl.PROMOTED} left to show it"
    return Change(db_before, db_after, before, after)


@pytest.mark.parametrize("claim", _claims(list(CLAIMS)))
def test_premium_and_free_keys_run_at_their_limits_and_a_promotion_takes_at_once(
        database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, tiers_backlog: int,
        claim: str) -> None:
    install(conn, claim)
    changes: list[Change] = []
    took = drain(database_url, conn, tmp_path, "_key_limits_app:tiers", kl.TIERS_QUEUE,
                 tiers_backlog, lambda supervisors: changes.append(promote(conn, supervisors)))
    (change,) = changes
    if claim == "intact":
        print(f"{tiers_backlog} jobs in {took:.1f} s: {check_tiers(conn, change)}")
        return
    with pytest.raises(AssertionError, match=EXPECTED[claim]) as failure:
        check_tiers(conn, change)
    print(f"{claim}: {str(failure.value).splitlines()[0][:300]}")
