"""Workflows on a real fleet (issue #28): two supervisors run a chord of 200 and a group of 100
on a max_active=5 queue; the handlers' own overlap counters never pass 5, and the database's
release counts say every member was released at most once, the callback exactly once, with
every result. Released members keep a rate limit (an exact sliding window over their starts)
and share a fair queue by key and weight (the method of test_worker_fair_share.py), each
checker shown failing on the same canvas without the budget."""

from __future__ import annotations

import bisect

import pytest
from apps import probe
from apps import workflows as wf
from apps.harness import Worker, scalar, wait_for
from test_worker_fair_share import peak_units, shares

from workhorse import Queue, chain, chord, group

pytestmark = [pytest.mark.slow, pytest.mark.fleet]


def _fleet(database_url, tmp_path):
    options = ["--slots", "2", "--concurrency", "8", "--lease", "10s", "--dequeue-timeout", "5s"]
    return [Worker(database_url, "apps.workflows:app", tmp_path / f"w{i}.log", *options)
            for i in range(2)]


def _released_once(conn, workflow_id):
    """Every member released at most once; returns {member id: releases}."""
    rows = conn.execute("SELECT job_id, releases FROM workhorse.workflow_members "
                        "WHERE workflow_id = %s", (workflow_id,)).fetchall()
    releases = dict(rows)
    assert all(n <= 1 for n in releases.values()), {k: n for k, n in releases.items() if n > 1}
    return releases


def test_chord_of_200_released_once_under_the_budget(database_url, conn, tmp_path):
    probe.setup(conn, {"queue": wf.MAX_ACTIVE})
    Queue(conn).sync_concurrency_policies(wf.app.name, wf.app.policy_definitions())
    workers = _fleet(database_url, tmp_path)
    try:
        for w in workers:
            w.wait_for_slots(2)
        with wf.app.using(conn):
            h = chord(group(wf.member.s(f"m{n}") for n in range(200)), wf.join.s()).delay()
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE workflow_id = %s AND status = 'succeeded'",
                                h.id) == 201,
                 180, "the chord to finish", *workers, interval=0.25)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    releases = _released_once(conn, h.id)
    callback = max(releases)
    assert releases[callback] == 1
    assert sum(releases.values()) == 1  # only the callback waits for anything
    with wf.app.using(conn):
        assert h.get(timeout=5) == 200
    assert scalar(conn, "SELECT count(*) FROM probe_runs WHERE token = 'join'") == 1
    (violations, peak) = conn.execute(
        "SELECT violations, peak FROM probe_counters WHERE name = 'queue'").fetchone()
    assert violations == 0 and peak <= wf.MAX_ACTIVE


def test_group_of_100_never_runs_more_than_5(database_url, conn, tmp_path):
    probe.setup(conn, {"queue": wf.MAX_ACTIVE})
    Queue(conn).sync_concurrency_policies(wf.app.name, wf.app.policy_definitions())
    workers = _fleet(database_url, tmp_path)
    try:
        for w in workers:
            w.wait_for_slots(2)
        # Released all at once by one success: the head's.
        with wf.app.using(conn):
            h = (wf.member.s("head") | group(wf.member.si(f"g{n}") for n in range(100))).delay()
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE workflow_id = %s AND status = 'succeeded'",
                                h.id) == 101,
                 180, "the group to finish", *workers, interval=0.25)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    releases = _released_once(conn, h.id)
    assert sum(releases.values()) == 100
    (violations, peak) = conn.execute(
        "SELECT violations, peak FROM probe_counters WHERE name = 'queue'").fetchone()
    assert violations == 0 and peak <= wf.MAX_ACTIVE
    # Handler timestamps: at no start were more than 5 others running (peak from the probe);
    # the runs are one per member.
    assert scalar(conn, "SELECT count(DISTINCT token) FROM probe_runs") == 101


# ---- budgets apply to released members: a rate limit, fair share (docs/design.md "Workflows") ----

RATED = 20


def most_in_a_window(times: list[float], period: float) -> int:
    """The most starts in any window (t - period, t]: an exact sliding window over every start."""
    ordered = sorted(times)
    return max((i + 1 - bisect.bisect_right(ordered, t - period) for i, t in enumerate(ordered)),
               default=0)


def _starts(conn, workflow_id, queue):
    return [row[0] for row in conn.execute(
        "SELECT extract(epoch FROM started_at)::float8 FROM workhorse.jobs "
        "WHERE workflow_id = %s AND queue = %s", (workflow_id, queue)).fetchall()]


def test_released_members_keep_a_rate_limit(database_url, conn, tmp_path):
    """A group of 20 released at once (by its head's success) onto a queue of rate_limit 5/2s:
    their starts (started_at, the database's clock) never exceed 5 in any 2 s window. The same
    group on a queue without the limit, run by the same fleet, breaks the checker."""
    probe.setup(conn, {"queue": wf.MAX_ACTIVE})
    Queue(conn).sync_concurrency_policies(wf.app.name, wf.app.policy_definitions())
    workers = _fleet(database_url, tmp_path)
    try:
        for w in workers:
            w.wait_for_slots(2)
        with wf.app.using(conn):
            rated = chain(wf.head.s("h"),
                          group(wf.rated_member.si(f"r{n}") for n in range(RATED))).delay()
            free = chain(wf.head.s("h"),
                         group(wf.free_member.si(f"f{n}") for n in range(RATED))).delay()
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE workflow_id = ANY(%s) AND status = 'succeeded'",
                                [rated.id, free.id]) == 2 * (RATED + 1),
                 180, "the two groups to finish", *workers, interval=0.25)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    assert sum(_released_once(conn, rated.id).values()) == RATED
    starts = _starts(conn, rated.id, "wf-rated")
    assert len(starts) == RATED
    peak = most_in_a_window(starts, wf.PERIOD)
    assert peak <= wf.RATE, sorted(starts)
    assert peak == wf.RATE, "never at the limit: the check proves nothing"
    # The broken variant (no limit on the released members' queue): the checker fails on it.
    assert most_in_a_window(_starts(conn, free.id, "wf-free"), wf.PERIOD) > wf.RATE
    print(f"rate: at most {peak} starts in any {wf.PERIOD:g} s; released over "
          f"{max(starts) - min(starts):.2f} s")


def test_the_window_checker_fails_on_six_starts_in_two_seconds():
    kept = [0.0, 0.25, 0.5, 0.75, 1.0, 2.0, 2.25, 2.5, 2.75, 3.0]  # exact in binary
    assert most_in_a_window(kept, 2.0) == 5
    assert most_in_a_window([*kept, 1.5], 2.0) == 6


def _fair_runs(conn, prefix):
    return conn.execute("SELECT key, cost, started, ended FROM wf_fair_runs "
                        "WHERE token LIKE %s AND ended IS NOT NULL", (prefix + "%",)).fetchall()


def check_fair(runs, due):
    """Each key's share of the units running while every key had backlog, within 20% of its due
    share (the method of test_worker_fair_share.py); the units never above max_active."""
    assert peak_units(runs) <= wf.FAIR_MAX, "running units above max_active"
    got = shares(runs, list(due))
    total = sum(got.values())
    for key, share in due.items():
        assert abs(got[key] / total - share) <= 0.2 * share, got
    return got


def test_released_members_share_a_fair_queue_by_key_and_weight(database_url, conn, tmp_path):
    """Chords whose 60 members carry two concurrency keys, released by a head's success onto a
    fairness="key" queue (max_active=4), the keys' members inserted one key after the other:
    equal weights share 1/2 each, weights 3:1 (`.set(weight=3)`) 3/4 and 1/4; the same chord on
    a FIFO queue of the same budget (the broken variant) fails the checker."""
    probe.setup(conn, {"queue": wf.MAX_ACTIVE})
    conn.execute(wf.FAIR_SCHEMA)
    Queue(conn).sync_concurrency_policies(wf.app.name, wf.app.policy_definitions())
    workers = _fleet(database_url, tmp_path)

    def canvas(prefix, task, weights):
        members = [task.si(f"{prefix}-{key}-{i}", key).set(weight=weight)
                   for key, weight in weights.items() for i in range(30)]
        return chain(wf.head.s(prefix), group(members), wf.collect.s())

    def finished(h, n):
        return lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE workflow_id = %s "
                                    "AND status = 'succeeded'", h.id) == n

    try:
        for w in workers:
            w.wait_for_slots(2)
        handles = []
        for prefix, task, weights in (("eq", wf.fair_member, {"a": 1, "b": 1}),
                                      ("w", wf.fair_member, {"heavy": 3, "light": 1}),
                                      ("fifo", wf.fifo_member, {"a": 1, "b": 1})):
            with wf.app.using(conn):
                h = canvas(prefix, task, weights).delay()
            wait_for(finished(h, 62), 180, f"the {prefix} chord", *workers, interval=0.25)
            handles.append(h)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    for h in handles:
        releases = _released_once(conn, h.id)
        assert sum(releases.values()) == 61  # 60 members by the head, the callback by them
        with wf.app.using(conn):
            assert h.get(timeout=5) == 60
    equal = check_fair(_fair_runs(conn, "eq-"), {"a": 0.5, "b": 0.5})
    weighted = check_fair(_fair_runs(conn, "w-"), {"heavy": 0.75, "light": 0.25})
    assert peak_units(_fair_runs(conn, "eq-") + _fair_runs(conn, "w-")) == wf.FAIR_MAX, \
        "the fleet never filled the queue: proves nothing"
    with pytest.raises(AssertionError):
        check_fair(_fair_runs(conn, "fifo-"), {"a": 0.5, "b": 0.5})
    print(f"fair shares of released members: {equal} {weighted}")
