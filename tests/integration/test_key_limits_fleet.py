"""Per-key limits exact under a fleet (issue #41 item 4, docs/design.md "Per-key limits"): four
supervisors, each its own OS process, drain 1,000 keys of one queue, 50 premium keys with their
own limit 3 and 950 at the set's default 1 (the policy's max_active_per_key is 5). From the jobs'
rows, the intervals [started_at, finished_at) that really happened, by the database's clock: no
key ever has more jobs running than its own limit, and the premium keys do reach theirs (the
limit is a limit, not an idle bound). The same checker fails on a claim that ignores the set's
default (the free keys then run 2 at once).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import _key_limits_app as kl
import psycopg
import pytest
from _backoff_harness import Supervisor, rows, scalar, stop_all, wait_for
from _integration import install_broken

from workhorse import Queue, _sql

pytestmark = [pytest.mark.slow, pytest.mark.fleet]

FREE = [f"f{i:03}" for i in range(950)]
PREMIUM_JOBS = 8  # a key's jobs are consecutive in admission order
FREE_JOBS = 2
SUPERVISORS = 4
OPTIONS = ("--slots", "1", "--concurrency", "16", "--lease", "30s", "--dequeue-timeout", "1s",
           "--grace", "10s")


def peaks(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Each key's most jobs running at once, from the intervals its jobs ran."""
    events: dict[str, list[tuple[Any, int]]] = defaultdict(list)
    for key, started, finished in rows(
            conn, "SELECT ckey, started_at, finished_at FROM workhorse.all_jobs "
                  "WHERE queue = %s AND status = 'succeeded'", kl.QUEUE):
        events[key] += [(started, 1), (finished, -1)]
    result = {}
    for key, changes in events.items():
        running = peak = 0
        for _, change in sorted(changes, key=lambda e: (e[0], e[1])):  # an end before a start
            running += change
            peak = max(peak, running)
        result[key] = peak
    return result


def check(conn: psycopg.Connection[Any]) -> str:
    observed = peaks(conn)
    assert len(observed) == len(kl.PREMIUM) + len(FREE), len(observed)
    over = {key: peak for key, peak in observed.items()
            if peak > (kl.PREMIUM_LIMIT if key in kl.PREMIUM else kl.DEFAULT_LIMIT)}
    assert over == {}, f"keys above their own limit: {dict(list(over.items())[:10])}"
    at_limit = [key for key in kl.PREMIUM if observed[key] == kl.PREMIUM_LIMIT]
    assert len(at_limit) >= 10, (
        f"only {len(at_limit)} premium keys ever ran {kl.PREMIUM_LIMIT} at once: the fleet did "
        "not test the limit")
    return f"{len(at_limit)} of {len(kl.PREMIUM)} premium keys reached {kl.PREMIUM_LIMIT}"


@pytest.fixture
def backlog(conn: psycopg.Connection[Any]) -> None:
    queue = Queue(conn)
    queue.sync_concurrency_policies(kl.app.name, kl.app.policy_definitions())
    for name, (limits, default) in kl.app.key_limit_definitions().items():
        queue.set_key_limits(kl.app.name, name, limits, default)
    with kl.app.using(conn):
        calls = [kl.work.call((n, key)) for key in kl.PREMIUM for n in range(PREMIUM_JOBS)]
        calls += [kl.work.call((n, key)) for key in FREE for n in range(FREE_JOBS)]
        kl.app.enqueue_many(calls)


@pytest.mark.usefixtures("backlog")
@pytest.mark.parametrize("claim", ["intact", "default ignored"])
def test_a_fleet_holds_every_key_to_its_own_limit(
        database_url: str, conn: psycopg.Connection[Any], tmp_path: Path, claim: str) -> None:
    if claim != "intact":  # the free keys get the policy's max_active_per_key (5)
        install_broken(conn, _sql.function_name("_choose_units"),
                       "> COALESCE(k_own_max[v_best], p_default_max, p_per_key, c_big)",
                       "> COALESCE(k_own_max[v_best], p_per_key, c_big)")
    total = len(kl.PREMIUM) * PREMIUM_JOBS + len(FREE) * FREE_JOBS
    supervisors = [Supervisor(database_url, "_key_limits_app:app", tmp_path / f"s{i}.log",
                              *OPTIONS) for i in range(SUPERVISORS)]
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.all_jobs "
                                      "WHERE queue = %s AND status = 'succeeded'",
                                kl.QUEUE) == total,
                 120, f"the fleet to run all {total} jobs", *supervisors)
    finally:
        codes = stop_all(supervisors)
    assert codes == [0] * SUPERVISORS, [s.output()[-3000:] for s in supervisors]
    # Every supervisor's slot ran jobs (each returns its process id).
    assert scalar(conn, "SELECT count(DISTINCT result) FROM workhorse.all_jobs WHERE queue = %s",
                  kl.QUEUE) == SUPERVISORS
    if claim == "intact":
        print(check(conn))
    else:
        with pytest.raises(AssertionError, match="keys above their own limit") as failure:
            check(conn)
        print(str(failure.value).splitlines()[0][:300])
