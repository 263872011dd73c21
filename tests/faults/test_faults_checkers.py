"""The fault suite's checkers fail when they should: fed fabricated journals (an overlap beyond
the limit, a stale result, a lost job, a lowered limit ignored), and a real fleet run with its
admission switched off (the queue left ungoverned)."""

from __future__ import annotations

from pathlib import Path

import _journal
import psycopg
import pytest
from _scenario import Scenario, limits

from workhorse import Queue

pytestmark = pytest.mark.slow


def _write(path: Path, lines: list[tuple[str, str, str, str, int, float]]) -> Path:
    path.write_text("".join(f"{k} {t} {key} {run} {pid} {mono:.6f} {mono + 1e9:.6f}\n"
                            for k, t, key, run, pid, mono in lines))
    return path


def test_the_overlap_checker_sees_one_admission_too_many(tmp_path):
    # Five jobs overlap at t=1.5: the sixth start is over max_active=5.
    lines = []
    for n in range(6):
        lines.append(("S", f"j{n}", f"k{n}", f"r{n}", 1, 1.0 + n * 0.1))
    for n in range(6):
        lines.append(("E", f"j{n}", f"k{n}", f"r{n}", 1, 2.0 + n * 0.1))
    seen = _journal.overlap(_journal.read(_write(tmp_path / "j", lines)).values(), limits(5, 2))
    assert seen.peak == 6 and len(seen.violations) == 1 and "6 running > max_active 5" in \
        seen.violations[0]
    # The same runs back to back (an end and a start at one instant) are fine.
    serial = [("S", "a", "k", "ra", 1, 1.0), ("E", "a", "k", "ra", 1, 2.0),
              ("S", "b", "k", "rb", 1, 2.0), ("E", "b", "k", "rb", 1, 3.0)]
    assert _journal.overlap(_journal.read(_write(tmp_path / "s", serial)).values(),
                            limits(1, 1)).violations == []


def test_the_overlap_checker_sees_a_key_over_its_limit(tmp_path):
    lines = [("S", f"j{n}", "hot", f"r{n}", 1, 1.0 + n * 0.1) for n in range(3)]
    seen = _journal.overlap(_journal.read(_write(tmp_path / "j", lines)).values(), limits(5, 2))
    assert seen.peak_per_key == 3 and any("key hot has 3 running > 2" in v
                                          for v in seen.violations)


def test_a_frozen_handler_counts_until_its_lease_could_expire(tmp_path):
    # r0 is frozen from 1.0 and returns at 9.0; r1..r5 start at 4.0 once its lease is gone.
    lines = [("S", "j0", "k0", "r0", 1, 0.5), ("E", "j0", "k0", "r0", 1, 9.0)]
    lines += [("S", f"j{n}", f"k{n}", f"r{n}", 2, 4.0) for n in range(1, 6)]
    executions = _journal.read(_write(tmp_path / "j", lines))
    assert _journal.overlap(executions.values(), limits(5, 2)).violations != []
    assert _journal.overlap(executions.values(), limits(5, 2), ends={"r0": 3.0}).violations == []
    # Truncated too late (after the others started), it still counts: a violation.
    assert _journal.overlap(executions.values(), limits(5, 2), ends={"r0": 4.5}).violations


def test_a_lowered_limit_applies_from_its_change(tmp_path):
    lines = [("S", f"j{n}", f"k{n}", f"r{n}", 1, 10.0 + n * 0.01) for n in range(3)]
    executions = _journal.read(_write(tmp_path / "j", lines))
    before = _journal.Limits([(0.0, 5, 2), (20.0, 2, 2)])
    after = _journal.Limits([(0.0, 5, 2), (5.0, 2, 2)])
    assert _journal.overlap(executions.values(), before).violations == []
    assert len(_journal.overlap(executions.values(), after).violations) == 1


def test_the_jobs_checker_sees_stale_lost_and_duplicate(tmp_path):
    lines = [("S", "a", "k", "old", 1, 1.0), ("E", "a", "k", "old", 1, 9.0),
             ("S", "a", "k", "new", 2, 5.0), ("E", "a", "k", "new", 2, 6.0),
             ("S", "b", "k", "rb", 1, 1.0), ("E", "b", "k", "rb", 1, 2.0)]
    executions = _journal.read(_write(tmp_path / "j", lines)).values()
    good = _journal.jobs([("a", "succeeded", "new", None), ("b", "succeeded", "rb", None)],
                         executions)
    assert (good.lost, good.stale, good.duplicates) == ([], [], {"a": 1})
    # The frozen execution's late result was recorded over the fresh one's: stale.
    bad = _journal.jobs([("a", "succeeded", "old", None), ("b", "active", None, None),
                         ("c", "succeeded", "x", None)], executions)
    assert bad.stale == ["a: result 'old', latest execution new"]
    assert bad.lost == ["b: active"] and bad.never_ran == ["c"]
    # A run that began after its job was recorded done is not the result's source, but is said.
    late = [("S", "d", "k", "first", 1, 1.0), ("E", "d", "k", "first", 1, 2.0),
            ("S", "d", "k", "late", 2, 8.0), ("E", "d", "k", "late", 2, 9.0)]
    runs = _journal.read(_write(tmp_path / "late", late)).values()
    done_at = 1e9 + 3.0  # the epoch column of _write is monotonic + 1e9
    found = _journal.jobs([("d", "succeeded", "first", done_at)], runs)
    assert found.stale == [] and [e.run for e in found.after_done] == ["late"]
    assert _journal.jobs([("d", "succeeded", "late", done_at)], runs).stale


def test_a_fleet_without_admission_fails_the_overlap_checker(cluster, tmp_path):
    """The broken variant for real: the same fleet on a queue whose policy was never stored
    (no admission in the claim) runs more than max_active at once, and the checker says so."""
    s = Scenario(cluster, tmp_path, "broken variant: no admission")
    with psycopg.connect(s.url, autocommit=True) as conn:
        Queue(conn).sync_concurrency_policies("faults", [], prune=True)
    s.enqueue(200)
    s.worker()
    try:
        s.wait_all_succeeded()
    finally:
        s.stop()
    _row, seen, _found = s.check(limits())
    assert seen.violations, "the checker missed an ungoverned fleet's overlap"
    assert seen.peak > 5
