"""Invariant 1 the hard way: many OS processes, each with its own connection, claim at once.

Two independent checkers judge every run:

* **Live overlap** (`_claimer.CHECKER_SQL`): each claimer bumps a counter for the queue and for
  the job's key right after its claim committed, and lowers it before it completes the job, under a
  row lock that puts every bump in one order. Each job's checker interval lies inside its real
  active interval, so the overlap counted never exceeds the real one: a violation it records is
  real. It is judged against the highest limit that was ever in force.

* **Replay at claim time**: from the jobs' `started_at` (the server clock inside the claim, taken
  while the claim holds the queue's admission lock) and `finished_at` (taken inside complete, before
  its commit), count for each claim the jobs active at that instant. Every job counted was seen as
  active by that claim (its claim committed before ours took the lock, its completion committed
  after our count), so a claim that admits beyond the limit in force is caught, and a correct one
  never is. The limit in force is the last `policy_log` row before the claim: the flipper writes
  that row with the server clock inside its sync's transaction, while it holds the same lock, so
  the two clocks order claims and policy changes exactly as the lock did. Lowering a limit does
  not preempt, and that is consistent with this check: a claim after a lowering may only admit
  when the count, old jobs included, is below the new limit.
"""

from __future__ import annotations

import random
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from _claim_comparison import install_reference
from _claimer import BROKEN_CLAIM_SQL, CHECKER_SQL
from _integration import collect, spawn, start

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue

QUEUE = "governed"
NAMESPACE = "contention"


@dataclass
class Replay:
    claims: int = 0
    max_active: int = 0
    max_key: int = 0
    max_active_at_limit: dict[int, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def _setup(conn: Any, jobs: int, keys: int, policy: tuple[int, int] | None) -> list[int]:
    conn.execute(CHECKER_SQL)
    conn.execute(BROKEN_CLAIM_SQL)
    q = Queue(conn)
    if policy is not None:
        q.sync_concurrency_policies(NAMESPACE, [ConcurrencyPolicyDefinition(QUEUE, *policy)])
        conn.execute("INSERT INTO policy_log VALUES (clock_timestamp(), %s, %s)", policy)
    rng = random.Random(7)
    items = [
        ("t", {"n": n}, EnqueueOptions(
            queue=QUEUE, concurrency_key=None if n % 10 == 0 else f"k{rng.randrange(keys)}"))
        for n in range(jobs)
    ]
    return _enqueue_analyzed(q, items)


def _enqueue_analyzed(q: Queue, items: list[Any]) -> list[int]:
    ids: list[int] = []
    for first in range(0, len(items), 1000):
        ids += q.enqueue_many(items[first:first + 1000])
    q.conn.execute("ANALYZE workhorse.jobs")
    return ids


def _replay(conn: Any, after: Any = None) -> Replay:
    """Count, at each claim's instant, the jobs active then; judge against the limit in force."""
    jobs = conn.execute(
        "SELECT id, ckey, started_at, finished_at FROM workhorse.jobs"
        " WHERE queue = %s AND started_at IS NOT NULL ORDER BY started_at", (QUEUE,)
    ).fetchall()
    log = conn.execute("SELECT at, max_active, per_key FROM policy_log ORDER BY at").fetchall()
    log_times = [row[0] for row in log]
    never = datetime.max.replace(tzinfo=UTC)  # a job that never finished is active to the end
    starts = sorted(job[2] for job in jobs)
    finishes = sorted(job[3] or never for job in jobs)
    key_starts: dict[str, list[Any]] = defaultdict(list)
    key_finishes: dict[str, list[Any]] = defaultdict(list)
    for _, key, started, finished in jobs:
        key_starts[key].append(started)
        key_finishes[key].append(finished or never)
    for key in key_starts:
        key_starts[key].sort()
        key_finishes[key].sort()

    replay = Replay()
    for job_id, key, started, _ in jobs:
        if after is not None and started <= after:
            continue
        replay.claims += 1
        active = bisect_right(starts, started) - bisect_right(finishes, started)
        in_force = bisect_left(log_times, started) - 1
        limit, per_key = (log[in_force][1], log[in_force][2]) if in_force >= 0 else (None, None)
        replay.max_active = max(replay.max_active, active)
        if limit is not None:
            seen = replay.max_active_at_limit.get(limit, 0)
            replay.max_active_at_limit[limit] = max(seen, active)
            if active > limit:
                replay.violations.append(f"job {job_id}: {active} active > {limit}")
        if key:
            in_key = (bisect_right(key_starts[key], started)
                      - bisect_right(key_finishes[key], started))
            replay.max_key = max(replay.max_key, in_key)
            if per_key is not None and in_key > per_key:
                replay.violations.append(f"job {job_id}: key {key} {in_key} active > {per_key}")
    return replay


def _live(conn: Any) -> tuple[int, int, list[tuple[Any, ...]]]:
    """(queue peak, highest key peak, violations) from the live checker."""
    peaks = dict(conn.execute("SELECT scope, peak FROM overlap").fetchall())
    queue_peak = peaks.pop("")
    violations = conn.execute("SELECT scope, n, lim FROM violations ORDER BY at").fetchall()
    return queue_peak, max(peaks.values(), default=0), violations


def _all_succeeded_once(conn: Any, ids: list[int], reports: list[dict[str, Any]]) -> None:
    completed = [job_id for report in reports for job_id in report.get("completed", [])]
    assert sorted(completed) == sorted(ids), "each job completed by exactly one claimer"
    rows = conn.execute(
        "SELECT status, attempts, count(*) FROM workhorse.jobs WHERE queue = %s"
        " GROUP BY 1, 2", (QUEUE,)
    ).fetchall()
    assert rows == [("succeeded", 1, len(ids))]
    assert sum(report.get("stale", 0) for report in reports) == 0


def test_budget_holds_with_8_processes(conn: Any, database_url: str) -> None:
    ids = _setup(conn, jobs=2000, keys=20, policy=(5, 2))
    claimers = [
        spawn("claim", database_url, queue=QUEUE, check_max=5, check_per=2) for _ in range(8)
    ]
    start_at = start(claimers)
    reports = collect(claimers)
    elapsed = time.time() - start_at

    queue_peak, key_peak, live_violations = _live(conn)
    replay = _replay(conn)
    print(f"\n8 claimers, 2,000 jobs, max_active 5 / per key 2, {elapsed:.1f}s: live overlap "
          f"peak {queue_peak} (key {key_peak}), {len(live_violations)} violations; replay over "
          f"{replay.claims} claims: peak {replay.max_active} (key {replay.max_key}), "
          f"{len(replay.violations)} violations; {sum(r['claims'] for r in reports)} claims, "
          f"{sum(r['empty'] for r in reports)} empty")
    assert live_violations == []
    assert replay.violations == []
    # Not vacuous: the limits were reached, so exceeding them was possible.
    assert queue_peak == 5 and key_peak == 2
    assert replay.max_active == 5 and replay.max_key == 2
    _all_succeeded_once(conn, ids, reports)


def test_budget_holds_with_reference_claimers_beside_the_product_claim(
    conn: Any, database_url: str
) -> None:
    """Two claim functions at once: four processes claim through the reference claim (0.1's
    last, kept as a test fixture; each batch's successes riding on its next claim), four through
    the product's. Both serialize on the same admission lock and count the same active jobs, so
    the limits hold: what a rolling upgrade to a new claim version relies on."""
    ids = _setup(conn, jobs=2000, keys=20, policy=(5, 2))
    install_reference(conn)
    claimers = [
        spawn("claim", database_url, queue=QUEUE, check_max=5, check_per=2, reference=i % 2 == 0)
        for i in range(8)
    ]
    start(claimers)
    reports = collect(claimers)

    queue_peak, key_peak, live_violations = _live(conn)
    replay = _replay(conn)
    print(f"\n4 reference + 4 product claimers: live overlap peak {queue_peak} (key {key_peak}), "
          f"{len(live_violations)} violations; replay over {replay.claims} claims: peak "
          f"{replay.max_active} (key {replay.max_key}), {len(replay.violations)} violations")
    assert live_violations == []
    assert replay.violations == []
    assert queue_peak == 5 and key_peak == 2
    assert replay.max_active == 5 and replay.max_key == 2
    assert all(report["claims"] > 0 for report in reports), "every claimer took part"
    _all_succeeded_once(conn, ids, reports)


def test_budget_holds_while_the_policy_flips(conn: Any, database_url: str) -> None:
    ids = _setup(conn, jobs=1000, keys=20, policy=(5, 2))
    claimers = [
        spawn("claim", database_url, queue=QUEUE, check_max=5, check_per=2) for _ in range(8)
    ]
    flipper = spawn("flip", database_url, queue=QUEUE, namespace=NAMESPACE,
                    values=[[5, 2], [3, 1]])
    start([*claimers, flipper])
    reports = collect([*claimers, flipper])
    flips = reports[-1]["flips"]

    queue_peak, key_peak, live_violations = _live(conn)
    replay = _replay(conn)
    print(f"\n8 claimers + flipper (5/2 <-> 3/1, {flips} flips): live overlap peak {queue_peak} "
          f"(key {key_peak}), {len(live_violations)} violations; replay over {replay.claims} "
          f"claims: peak per limit in force {replay.max_active_at_limit}, key {replay.max_key}, "
          f"{len(replay.violations)} violations")
    assert live_violations == []
    assert replay.violations == [], replay.violations[:10]
    assert flips >= 2, "both limits were installed while the claimers ran"
    assert replay.max_active_at_limit.get(5) == 5 and replay.max_active_at_limit.get(3) == 3
    assert replay.max_key == 2
    _all_succeeded_once(conn, ids, reports[:-1])


def test_the_checker_catches_an_unlocked_claim(conn: Any, database_url: str) -> None:
    """The same checkers, on a claim that counts then claims without the lock: they must fire.
    The claimers' first claims meet at a barrier between the count and the update (see
    `_claimer.BROKEN_CLAIM_SQL`) and hold their jobs until all of them hold one, so the race
    happens in every run: 12 jobs active at once at a limit of 5, seen live and replayed."""
    processes = 12
    ids = _setup(conn, jobs=300, keys=20, policy=None)
    claimers = [
        spawn("claim", database_url, queue=QUEUE, check_max=5, check_per=2, broken=True,
              broken_max=5, broken_per=2, idle_sleep=0, hold_ms=[1, 3], meet=processes)
        for _ in range(processes)
    ]
    start(claimers)
    reports = collect(claimers)
    queue_peak, key_peak, live_violations = _live(conn)
    conn.execute("INSERT INTO policy_log VALUES ('2000-01-01', 5, 2)")
    replay = _replay(conn)
    print(f"\nunlocked claim, {processes} processes: live overlap peak {queue_peak} (key "
          f"{key_peak}), {len(live_violations)} violations; replay peak {replay.max_active} "
          f"(key {replay.max_key}), {len(replay.violations)} violations")
    _all_succeeded_once(conn, ids, reports)
    assert queue_peak >= processes, "every claimer held a job of the first round at once"
    assert live_violations, "the live checker must record the overshoot"
    assert replay.max_active >= processes
    assert replay.violations, "the replay must see what the live checker saw"


def test_installing_a_policy_on_a_live_queue_does_not_overshoot(
    conn: Any, database_url: str
) -> None:
    """Fast-path claimers run; a policy arrives. No claim after the install commits may admit
    beyond it, even though the fast-path jobs admitted before it keep running (no preemption).
    Five rounds of install and removal, each install landing while the fast path runs wide; the
    replay judges each claim against the policy in force (none between a removal and the next
    install)."""
    ids = _setup(conn, jobs=600, keys=20, policy=None)
    claimers = [spawn("claim", database_url, queue=QUEUE, hold_ms=[5, 20]) for _ in range(8)]
    start(claimers)
    q = Queue(conn)
    wide_installs = 0
    for _ in range(5):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # wait until more jobs run than the coming limit
            active = conn.execute(
                "SELECT count(*) FROM workhorse.jobs WHERE queue = %s AND status = 'active'",
                (QUEUE,),
            ).fetchone()
            if active is not None and active[0] >= 6:
                break
            time.sleep(0.002)
        with conn.transaction():
            q.sync_concurrency_policies(NAMESPACE, [ConcurrencyPolicyDefinition(QUEUE, 3, 1)])
            conn.execute("INSERT INTO policy_log VALUES (clock_timestamp(), 3, 1)")
            row = conn.execute(
                "SELECT count(*) FROM workhorse.jobs WHERE queue = %s AND status = 'active'",
                (QUEUE,),
            ).fetchone()
        wide_installs += row is not None and row[0] > 3
        time.sleep(0.15)
        with conn.transaction():  # and back to the fast path (which also drains the rest fast)
            q.sync_concurrency_policies(NAMESPACE, [], prune=True)
            conn.execute("INSERT INTO policy_log VALUES (clock_timestamp(), NULL, NULL)")
    reports = collect(claimers)

    replay = _replay(conn)
    print(f"\nlive installs: {wide_installs} of 5 landed with more than 3 active; replay over "
          f"{replay.claims} claims: peak under the policy {replay.max_active_at_limit}, "
          f"{len(replay.violations)} violations")
    assert replay.violations == [], replay.violations[:10]
    # Not vacuous: at least one install landed while more jobs ran than it allows (how many of
    # the five do depends on how busy the machine is).
    assert wide_installs >= 1, "an install should land while the fast path runs wide"
    assert replay.max_active_at_limit.get(3) == 3
    _all_succeeded_once(conn, ids, reports)


def test_per_key_installs_during_enqueues_strand_no_job(conn: Any, database_url: str) -> None:
    """Enqueuers and claimers run while per-key limits turn on and off, again and again. An enqueue
    that read "no per-key policy" writes no hint, so unless installs wait for such enqueues
    before they rebuild the heads, its job has no head and no claim ever sees it. Almost every
    job has a key of its own, so no later enqueue of the same key heals a missing head."""
    conn.execute(CHECKER_SQL)
    enqueuers = [
        spawn("enqueue", database_url, queue=QUEUE, seconds=2, keys=10**9) for _ in range(3)
    ]
    claimers = [
        spawn("claim", database_url, queue=QUEUE, hold_ms=[0, 1], max_seconds=20, producers=True)
        for _ in range(3)
    ]
    flipper = spawn("flip", database_url, queue=QUEUE, namespace=NAMESPACE, seconds=2,
                    values=[[None, 1], [50, None]], pause_ms=[0, 2])
    start([*enqueuers, *claimers, flipper])
    enqueued = [job_id for report in collect(enqueuers) for job_id in report["ids"]]
    [flipped] = collect([flipper])
    conn.execute("INSERT INTO producers_done DEFAULT VALUES")
    reports = collect(claimers)
    print(f"\n{len(enqueued)} jobs enqueued across {flipped['flips']} policy flips")
    remaining = conn.execute(
        "SELECT status, count(*) FROM workhorse.jobs WHERE status <> 'succeeded' GROUP BY 1"
    ).fetchall()
    assert remaining == [], "jobs that no claim could see"
    completed = sorted(job_id for report in reports for job_id in report["completed"])
    assert completed == sorted(enqueued)
    assert flipped["flips"] >= 2, "per-key limits turned on and off while jobs were enqueued"
