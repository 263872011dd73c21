"""Fair share and job cost across a real fleet (docs/design.md "Fair share and job cost", invariants
9 and 10): two supervisor processes serve one fairness="key" queue of max_active=8, and the
handlers record when they ran (the database's clock). In one pass:

* k=4 keys backlogged at equal weight: each key's time-averaged share of the running units,
  while every key has backlog, is within 20% of 1/k (the absolute count, printed, is about
  max_active/k times the fleet's utilization);
* weights 3:1: within 20% of 3/4 and 1/4 of the units;
* a big job (cost 6) enqueued ahead of a stream of small ones starts before the stream drains;
* a key that starts sending late, behind a backlog of 10,000 of another key, is served from the
  first freed places;
* throughout, the running units (from the handlers' own timestamps) never exceed max_active.
The checkers are shown to fail on deliberately wrong inputs (the last tests, no fleet)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from apps import fair_share, probe
from apps.harness import Worker, scalar, wait_for

from workhorse import Queue

Run = tuple[str, int, datetime, datetime]  # key, cost, started, ended


def peak_units(runs: list[Run]) -> int:
    """The most units running at once: ends count before starts at the same instant."""
    events = sorted([(s, 1, c) for _, c, s, _ in runs] + [(e, 0, -c) for _, c, _, e in runs])
    running = peak = 0
    for _, _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def shares(runs: list[Run], keys: list[str]) -> dict[str, float]:
    """Each key's time-averaged running units while every key had backlog: from the first
    start to the last start of the key whose backlog drained first."""
    begin = min(s for _, _, s, _ in runs)
    end = min(max(s for k, _, s, _ in runs if k == key) for key in keys)
    length = (end - begin).total_seconds()
    assert length > 0
    result = {}
    for key in keys:
        busy = sum(max(0.0, (min(e, end) - max(s, begin)).total_seconds()) * c
                   for k, c, s, e in runs if k == key)
        result[key] = busy / length
    return result


def _runs(conn: Any, prefix: str) -> list[Run]:
    return conn.execute(
        "SELECT key, cost, started, ended FROM fair_runs WHERE token LIKE %s AND ended IS NOT NULL",
        (prefix + "%",)).fetchall()


def _done(conn: Any, n: int) -> bool:
    return scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'") >= n


@pytest.mark.slow
@pytest.mark.fleet
def test_a_fleet_shares_a_fair_queue_by_key_and_weight_and_counts_costs(
        database_url, conn, tmp_path):
    probe.setup(conn)
    conn.execute(fair_share.SCHEMA)
    app, work, limit = fair_share.app, fair_share.work, fair_share.MAX_ACTIVE
    Queue(conn).sync_concurrency_policies(app.name, app.policy_definitions())
    options = ["--slots", "2", "--concurrency", "8", "--lease", "10s", "--dequeue-timeout", "5s"]
    workers = [Worker(database_url, "apps.fair_share:app", tmp_path / f"f{i}.log", *options)
               for i in range(2)]
    done = 0
    try:
        for w in workers:
            w.wait_for_slots(2)
        # 1. Four keys at equal weight, 80 jobs each, enqueued key by key.
        equal = [f"e{n}" for n in range(4)]
        with app.using(conn):
            app.enqueue_many(work.call((f"eq-{key}-{i}", key)) for key in equal for i in range(80))
        done += 320
        wait_for(lambda: _done(conn, done), 180, "the equal-weight jobs", *workers, interval=0.2)

        # 2. Weights 3:1 (the call site's weight=), 120 jobs each.
        with app.using(conn):
            app.enqueue_many([work.call((f"w-heavy-{i}", "heavy"), weight=3) for i in range(120)]
                             + [work.call((f"w-light-{i}", "light")) for i in range(120)])
        done += 240
        wait_for(lambda: _done(conn, done), 180, "the weighted jobs", *workers, interval=0.2)

        # 3. A stream of small jobs holds the queue; a big job (cost 6) comes ahead of more of
        # them, and starts before the stream drains.
        with app.using(conn):
            app.enqueue_many(work.call((f"s-a-{i}", "small")) for i in range(20))
            app.enqueue_many([work.call(("big", "big", 6))]
                             + [work.call((f"s-b-{i}", "small")) for i in range(100)])
        done += 121
        wait_for(lambda: _done(conn, done), 180, "the big job and the stream", *workers,
                 interval=0.2)

        # 4. A late key behind a backlog of 10,000 of another key.
        with app.using(conn):
            app.enqueue_many(work.call((f"flood-{i}", "flood")) for i in range(10_000))
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM fair_runs WHERE key = 'flood'") > 50,
                 60, "the flood to run", *workers, interval=0.1)
        with app.using(conn):
            late = work.delay("late-0", "late")
        wait_for(lambda: Queue(conn).get_job(late.id).started_at is not None, 30,  # type: ignore[union-attr]
                 "the late key to start", *workers, interval=0.05)
        conn.execute("UPDATE workhorse.jobs SET status = 'canceled', finished_at = now() "
                     "WHERE status = 'ready'")
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE status = 'active'") == 0,
                 60, "the fleet to finish", *workers, interval=0.2)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]

    everything = _runs(conn, "")
    assert peak_units(everything) <= limit, "running units above max_active"
    assert peak_units(everything) == limit, "the fleet never filled the queue: proves nothing"

    # Each key's share of the units running while every key had backlog, within 20% of its due:
    # 1/k, or weight / sum of weights. (As a fraction of what ran: the absolute running count
    # also depends on how busy the machine is, between a handler's end and the next claim.)
    equal_shares = shares(_runs(conn, "eq-"), equal)
    total = sum(equal_shares.values())
    for share in equal_shares.values():
        assert abs(share / total - 1 / 4) <= 0.2 / 4, equal_shares
    weighted = shares(_runs(conn, "w-"), ["heavy", "light"])
    total = weighted["heavy"] + weighted["light"]
    assert abs(weighted["heavy"] / total - 0.75) <= 0.2 * 0.75, weighted
    assert abs(weighted["light"] / total - 0.25) <= 0.2 * 0.25, weighted

    big = conn.execute("SELECT started FROM fair_runs WHERE token = 'big'").fetchone()[0]
    last_small = conn.execute(
        "SELECT max(started) FROM fair_runs WHERE token LIKE 's-b-%'").fetchone()[0]
    assert big < last_small, "the big job waited for the stream to drain"

    job = Queue(conn).get_job(late.id)
    assert job is not None and job.started_at is not None
    flood_between = conn.execute(
        "SELECT count(*) FROM workhorse.jobs WHERE ckey = 'flood' AND started_at > %s "
        "AND started_at < %s", (job.enqueued_at, job.started_at)).fetchone()[0]
    # Served from the first freed places: fewer flood starts in between than one turnover.
    assert flood_between < limit, (flood_between, job.started_at - job.enqueued_at)
    print(f"late key: first start {(job.started_at - job.enqueued_at).total_seconds():.3f} s "
          f"after its enqueue, {flood_between} flood starts in between; shares {equal_shares} "
          f"{weighted}")


T0 = datetime(2026, 1, 1)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_peak_checker_fails_on_overlapping_units():
    fits = [("a", 4, _at(0), _at(1)), ("b", 4, _at(1), _at(2)), ("c", 4, _at(0), _at(2))]
    assert peak_units(fits) == 8
    over = [*fits, ("d", 1, _at(0.5), _at(0.6))]
    assert peak_units(over) == 9


def test_the_share_checker_fails_on_an_unfair_split():
    fair = [(k, 1, _at(i), _at(i + 1)) for i in range(10) for k in ("a", "b")]
    assert shares(fair, ["a", "b"]) == {"a": 1.0, "b": 1.0}
    unfair = [*fair, *[("a", 1, _at(i), _at(i + 1)) for i in range(10)]]
    got = shares(unfair, ["a", "b"])
    assert abs(got["a"] - 2 * got["b"]) < 1e-9
