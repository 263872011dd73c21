"""The fault suite's checkers: what ran (the handlers' journal) and what was recorded (the jobs).

Each checker returns what it found rather than asserting, so that a test can show it fails on a
fabricated bad journal (tests/faults/test_faults_checkers.py) as well as pass on a real run.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Execution:
    token: str
    key: str
    run: str
    pid: int
    start: float  # CLOCK_MONOTONIC
    end: float | None = None
    how: str | None = None  # "E" returned, "C" cancelled (lost lease), None: never ended
    start_epoch: float = 0.0  # the wall clock, to compare with the database's (same host)


def read(path: Path) -> dict[str, Execution]:
    """Executions by run id."""
    runs: dict[str, Execution] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return runs
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 7:
            continue  # a line torn by kill -9 mid-write cannot happen with one write(); be safe
        kind, token, key, run, pid, mono, epoch = parts
        if kind == "S":
            runs[run] = Execution(token, key, run, int(pid), float(mono),
                                  start_epoch=float(epoch))
        elif run in runs:
            runs[run].end, runs[run].how = float(mono), kind
    return runs


def finished(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.startswith("E "))
    except FileNotFoundError:
        return 0


@dataclass
class Limits:
    """The limits in force over time: `(from_monotonic, max_active, max_active_per_key)`."""

    changes: list[tuple[float, int | None, int | None]]

    def at(self, t: float) -> tuple[int | None, int | None]:
        i = bisect.bisect_right([c[0] for c in self.changes], t) - 1
        _, limit, per_key = self.changes[max(i, 0)]
        return limit, per_key


@dataclass
class Overlap:
    peak: int = 0
    peak_per_key: int = 0
    violations: list[str] = field(default_factory=list)


def overlap(
    executions: Iterable[Execution], limits: Limits, *,
    ends: Mapping[str, float] | None = None,
) -> Overlap:
    """The real overlap, and every admission beyond the limit in force at its start.

    `ends` overrides when an execution stops counting: a killed process's at its kill, a
    frozen or cut-off one's at the earliest moment its lease could have expired (from then on
    the contract lets its capacity be reused). An execution with no end counts for ever.
    """
    ends = ends or {}
    events: list[tuple[float, int, Execution]] = []
    for e in executions:
        end = ends.get(e.run, e.end if e.end is not None else math.inf)
        events.append((e.start, 1, e))
        events.append((end, -1, e))
    events.sort(key=lambda ev: (ev[0], ev[1]))  # at one instant, ends before starts
    result = Overlap()
    total = 0
    per_key: dict[str, int] = defaultdict(int)
    for t, step, e in events:
        total += step
        per_key[e.key] += step
        if step < 0:
            continue
        result.peak = max(result.peak, total)
        result.peak_per_key = max(result.peak_per_key, per_key[e.key])
        limit, key_limit = limits.at(t)
        if limit is not None and total > limit:
            result.violations.append(
                f"t={t:.3f}: {total} running > max_active {limit} (run {e.run} of {e.token})")
        if key_limit is not None and per_key[e.key] > key_limit:
            result.violations.append(
                f"t={t:.3f}: key {e.key} has {per_key[e.key]} running > {key_limit} "
                f"(run {e.run} of {e.token})")
    return result


@dataclass
class Jobs:
    lost: list[str]  # tokens not succeeded
    stale: list[str]  # tokens whose stored result is not from the execution of the last claim
    duplicates: dict[str, int]  # token -> extra executions
    never_ran: list[str]
    # Executions that began after their job was already recorded done: a claim that reached its
    # slot only after its lease had expired (a frozen or cut-off slot) and was started anyway.
    after_done: list[Execution] = field(default_factory=list)


def jobs(rows: Iterable[tuple[Any, ...]], executions: Iterable[Execution]) -> Jobs:
    """`rows` are `(token, status, result, finished_at epoch)` of every job. A result is
    recorded at `finished_at`, so it must come from the last execution to start before then:
    a job is claimed again only once its lease is gone, so that one holds the latest claim.
    (An execution that starts after `finished_at` cannot be the source; it is reported.)"""
    by_token: dict[str, list[Execution]] = defaultdict(list)
    for e in executions:
        by_token[e.token].append(e)
    lost, stale, never, after = [], [], [], []
    for token, status, result, finished in rows:
        if status != "succeeded":
            lost.append(f"{token}: {status}")
            continue
        runs = sorted(by_token.get(token, []), key=lambda e: e.start)
        before = [e for e in runs if finished is None or e.start_epoch <= finished]
        after += [e for e in runs if finished is not None and e.start_epoch > finished]
        if not before:
            never.append(token)
        elif result != before[-1].run:
            stale.append(f"{token}: result {result!r}, latest execution {before[-1].run}")
    duplicates = {t: len(r) - 1 for t, r in by_token.items() if len(r) > 1}
    return Jobs(lost, stale, duplicates, never, after)


def first_start_after(executions: Iterable[Execution], t: float) -> float | None:
    starts = [e.start for e in executions if e.start > t]
    return min(starts) if starts else None


def running_at(executions: Iterable[Execution], t: float, pids: set[int] | None = None,
               ) -> list[Execution]:
    return [e for e in executions if e.start <= t and (e.end is None or e.end > t)
            and (pids is None or e.pid in pids)]


def rerun_after(executions: Iterable[Execution], tokens: Iterable[str], t: float) -> float | None:
    """When the last of `tokens` started again after `t` (None if one never did)."""
    wanted = set(tokens)
    first: dict[str, float] = {}
    for e in executions:
        if e.token in wanted and e.start > t:
            first[e.token] = min(first.get(e.token, math.inf), e.start)
    if set(first) != wanted:
        return None
    return max(first.values(), default=t)
