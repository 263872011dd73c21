"""Claims against a model of fair share and job cost, over random histories (docs/design.md "Fair
share and job cost", invariants 9 and 10).

The model: the limits count units (a job's `cost` of max_active and of its key's
max_active_per_key, its `rate_cost` of both rate limits). A claim takes one job at a time, up to
its batch: FIFO, the first job in (priority desc, id) order of a key not passed over; fair
(fairness="key"), among those keys' first jobs of the best priority, the key with the smallest
active units / weight (the weight of its first job), ties to the older job. A job whose cost can
never fit the synced policy is held (CostExceedsLimitError); a key whose first job does not fit
the key's units or starts left is passed over for the rest of the claim; a job that does not fit
the queue's free units or starts ends the claim (no starvation). Keyless jobs are one key.

With task lists (issue #24 item 6: a worker never claims another app's jobs), two workers of
different apps claim in turn; a claim never takes a job of a task its app does not declare: a
queue without heads (FIFO with no per-key limit) is one stream of the known jobs; with heads, a
key whose first job is another app's is passed over, unless that job does not fit the free units
(then the claim ends, as for any job).

The comparison is shown to fail on claims that ignore weights, costs or task lists: a
deliberately broken copy of the choice is installed in the test's database."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, JobStatus, Queue, _ops, _sql
from workhorse.types import ClaimedJob

Policy = tuple[int, int | None, int | None, int | None, str]
POLICIES: list[Policy] = [
    (6, None, None, None, "fifo"), (6, None, None, None, "key"), (8, 3, None, None, "key"),
    (5, 2, None, None, "fifo"), (6, None, 20, None, "key"), (7, 4, None, 9, "fifo"),
    (4, None, None, None, "key"), (3, 2, None, None, "key"), (9, None, 30, 12, "key"),
]
CHOOSE = _sql.function_name("_choose_units")


@dataclass
class Job:
    priority: int
    key: str
    cost: int
    rate_cost: int
    weight: int
    task: str = "t"


@dataclass
class Model:
    policy: Policy
    ready: dict[int, Job] = field(default_factory=dict)
    active: dict[int, Job] = field(default_factory=dict)
    held: set[int] = field(default_factory=set)
    starts: dict[str, int] = field(default_factory=dict)  # units started: "" queue, else key

    def admit(self, limit: int, tasks: set[str] | None = None) -> list[int]:
        max_active, per_key, rate, rate_key, fairness = self.policy
        heads = per_key is not None or rate_key is not None or fairness == "key"
        units: dict[str, int] = {}
        for job in self.active.values():
            units[job.key] = units.get(job.key, 0) + job.cost
        free = max_active - sum(units.values())
        rate_left = None if rate is None else rate - self.starts.get("", 0)
        key_started: dict[str, int] = {}
        passed: set[str] = set()
        chosen: list[int] = []
        remaining = {i: job for i, job in self.ready.items()
                     if tasks is None or heads or job.task in tasks}
        if rate_left is not None and rate_left <= 0:
            return []
        while len(chosen) < limit and free > 0:
            firsts: dict[str, tuple[int, Job]] = {}
            for job_id, job in sorted(remaining.items(), key=lambda i: (-i[1].priority, i[0])):
                if job.key not in passed and job.key not in firsts:
                    firsts[job.key] = (job_id, job)
            if not firsts:
                break
            if fairness == "key":
                top = max(job.priority for _, job in firsts.values())
                job_id, job = min(
                    (c for c in firsts.values() if c[1].priority == top),
                    key=lambda c: (units.get(c[1].key, 0) / c[1].weight, c[0]))
            else:
                job_id, job = min(firsts.values(), key=lambda c: (-c[1].priority, c[0]))
            if tasks is not None and job.task not in tasks:
                if job.cost > free:
                    break
                passed.add(job.key)
                continue
            if (job.cost > max_active or (job.key and per_key is not None and job.cost > per_key)
                    or (rate is not None and job.rate_cost > rate)
                    or (job.key and rate_key is not None and job.rate_cost > rate_key)):
                self.held.add(job_id)
                del remaining[job_id], self.ready[job_id]
                continue
            if job.key and (
                (per_key is not None and units.get(job.key, 0) + job.cost > per_key)
                or (rate_key is not None and self.starts.get(job.key, 0)
                    + key_started.get(job.key, 0) + job.rate_cost > rate_key)):
                passed.add(job.key)
                continue
            if job.cost > free or (rate_left is not None and job.rate_cost > rate_left):
                break
            chosen.append(job_id)
            del remaining[job_id]
            free -= job.cost
            if rate_left is not None:
                rate_left -= job.rate_cost
            units[job.key] = units.get(job.key, 0) + job.cost
            key_started[job.key] = key_started.get(job.key, 0) + job.rate_cost
        return sorted(chosen, key=lambda i: (-self.ready[i].priority, i))

    def started(self, ids: list[int]) -> None:
        _, _, rate, rate_key, _ = self.policy
        for job_id in ids:
            job = self.ready.pop(job_id)
            self.active[job_id] = job
            if rate is not None:
                self.starts[""] = self.starts.get("", 0) + job.rate_cost
            if rate_key is not None and job.key:
                self.starts[job.key] = self.starts.get(job.key, 0) + job.rate_cost


def _definition(policy: Policy) -> ConcurrencyPolicyDefinition:
    max_active, per_key, rate, rate_key, fairness = policy
    return ConcurrencyPolicyDefinition(
        "q", max_active, per_key, None if rate is None else f"{rate}/h",
        None if rate_key is None else f"{rate_key}/h", fairness=fairness)


OURS, THEIRS = "b.job", "a.report"


def _run(queue: Queue, seed: int, steps: int = 140, *, apps: bool = False,
         filtered: bool = True) -> None:
    """One random history; AssertionError at the first claim the model disagrees with. With
    `apps`, jobs are of two apps' tasks and each claim is one app's worker's (with its task list,
    or, for ours, without one unless `filtered`)."""
    rng = random.Random(seed)
    model = Model(rng.choice(POLICIES))
    queue.sync_concurrency_policies("model", [_definition(model.policy)], prune=True)
    keys = [f"k{n}" for n in range(5)]
    claimed_jobs: dict[int, ClaimedJob] = {}
    for step in range(steps):
        action = rng.choices(["enqueue", "claim", "complete", "policy", "expire"],
                             weights=[4, 6, 4, 1, 1])[0]
        max_active, per_key, rate, rate_key, _ = model.policy
        if action == "enqueue":
            batch = []
            for _ in range(rng.randint(1, 5)):
                key = rng.choice([*keys, ""])
                cap = min(max_active, per_key or max_active) if key else max_active
                rate_cap = min(rate or 99, (rate_key or 99) if key else 99)
                batch.append(Job(rng.randint(0, 1), key,
                                 min(cap, rng.choice([1, 1, 2, 3])),
                                 min(rate_cap, rng.choice([1, 1, 2, 4])),
                                 rng.choice([1, 1, 2, 3])))
                if apps:
                    batch[-1].task = THEIRS if rng.random() < 0.3 else OURS
            ids = queue.enqueue_many([
                (j.task, {}, EnqueueOptions(queue="q", priority=j.priority,
                                         concurrency_key=j.key or None, cost=j.cost,
                                         rate_cost=j.rate_cost, weight=j.weight))
                for j in batch])
            model.ready.update(zip(ids, batch, strict=True))
        elif action in ("claim", "expire"):
            if action == "expire" and model.active:
                job_id = rng.choice(sorted(model.active))
                queue.conn.execute(
                    "UPDATE workhorse.jobs SET lease_until = clock_timestamp() - interval '1s'"
                    " WHERE id = %s", (job_id,))
                if claimed_jobs[job_id].attempts < claimed_jobs[job_id].max_attempts:
                    model.ready[job_id] = model.active.pop(job_id)
                else:
                    del model.active[job_id]
            limit = 1 if action == "expire" else rng.randint(1, 4)
            if apps:
                tasks = {THEIRS} if rng.random() < 0.3 else {OURS}
                expected = model.admit(limit, tasks)
                sent = sorted(tasks) if filtered or THEIRS in tasks else None
                claimed = _ops.execute(queue.conn, _ops.claim_batch("q", limit, 60, sent))[0]
            else:
                expected = model.admit(limit)
                claimed = queue.claim("q", limit, 60)
            assert [job.id for job in claimed] == expected, (
                f"seed {seed} step {step}: policy {model.policy}, limit {limit}, "
                f"starts {model.starts}")
            model.started(expected)
            claimed_jobs.update((job.id, job) for job in claimed)
        elif action == "complete" and model.active:
            job_id = rng.choice(sorted(model.active))
            del model.active[job_id]
            queue.complete(job_id, claimed_jobs[job_id].fence)
        elif action == "policy":
            model.policy = rng.choice(POLICIES)
            queue.sync_concurrency_policies("model", [_definition(model.policy)], prune=True)
            model.starts = {}  # a new policy: count its windows' starts afresh
            queue.conn.execute("DELETE FROM workhorse.rate_starts")
    held = {row[0] for row in queue.conn.execute(
        "SELECT id FROM workhorse.jobs WHERE status = 'held'")}
    assert held == model.held, f"seed {seed}: held"
    for job_id in held:
        job = queue.get_job(job_id)
        assert job is not None and job.status is JobStatus.HELD
        assert job.error is not None and job.error["type"] == "CostExceedsLimitError"


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8])
def test_claims_match_the_fair_share_and_cost_model(queue: Queue, seed: int) -> None:
    _run(queue, seed)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_claims_with_two_apps_task_lists_match_the_model(queue: Queue, seed: int) -> None:
    _run(queue, seed, apps=True)


def test_the_model_comparison_fails_on_a_claim_that_ignores_task_lists(
        queue: Queue, conn: psycopg.Connection[Any]) -> None:
    failures = 0
    for seed in range(1, 6):
        conn.execute("TRUNCATE workhorse.jobs, workhorse.key_heads, workhorse.key_hints, "
                     "workhorse.rate_starts, workhorse.queue_levels")
        try:
            _run(queue, seed, apps=True, filtered=False)
        except AssertionError:
            failures += 1
    assert failures > 0, "the comparison never noticed a claim that takes another app's jobs"


def _broken(conn: psycopg.Connection[Any], old: str, new: str) -> None:
    """Install a deliberately broken copy of the choice in this test's database."""
    text = _sql.function_files()[CHOOSE]
    assert old in text
    conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                 .replace(old, new))


@pytest.mark.parametrize("broken", ["weights", "costs", "starvation"])
def test_the_model_comparison_fails_on_a_claim_that_ignores_weights_or_costs(
        queue: Queue, conn: psycopg.Connection[Any], broken: str) -> None:
    if broken == "weights":
        _broken(conn, "v_ratio := CASE WHEN p_fair THEN k_units[v_i]::double precision / v_weight",
                "v_ratio := CASE WHEN p_fair THEN k_units[v_i]::double precision")
    elif broken == "costs":
        _broken(conn, "SELECT COALESCE(sum(j.cost), 0) INTO v_units",
                "SELECT COALESCE(count(*), 0) INTO v_units")
    else:
        _broken(conn, "EXIT;  -- no starvation",
                "v_passed := v_passed || v_key; CONTINUE;  -- starvation")
    failures = 0
    for seed in range(1, 9):
        conn.execute("TRUNCATE workhorse.jobs, workhorse.key_heads, workhorse.key_hints, "
                     "workhorse.rate_starts, workhorse.queue_levels")
        try:
            _run(queue, seed)
        except AssertionError:
            failures += 1
    assert failures > 0, f"the comparison never noticed a claim that ignores {broken}"
