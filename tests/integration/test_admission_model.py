"""Claims against a model of admission, over random histories.

The model is the definition in docs/design.md: a claim takes, in priority-descending then id order,
every ready job it may admit (queue limit, then the job's key limit; keyless jobs use the queue
limit only), passing over the ones it may not, up to its batch size. The key heads, hints and
the three claim paths must together produce exactly that, whatever happened before: enqueues of
new and old keys at any priority, completions, failures, leases that expire (the job is claimable
again, or ends once its attempts are spent), scheduled jobs that fall due, and policies that
change, appear and disappear (turning per-key limits on rebuilds the heads; turning them off drops
them). Time is moved by rewriting `lease_until` and `run_at`, so the test needs no sleeps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue
from workhorse.types import ClaimedJob

ERROR = {"type": "E", "message": "m", "traceback": None}
POLICIES: list[tuple[int | None, int | None] | None] = [
    None, (3, None), (5, 2), (2, 1), (None, 1), (None, 2), (4, 4), (1, 1),
]


@dataclass
class Model:
    policy: tuple[int | None, int | None] | None = None
    ready: dict[int, tuple[int, str]] = field(default_factory=dict)  # id -> (priority, key)
    active: dict[int, ClaimedJob] = field(default_factory=dict)
    scheduled: dict[int, tuple[int, str]] = field(default_factory=dict)

    def admit(self, limit: int) -> list[int]:
        max_active, per_key = self.policy or (None, None)
        total = len(self.active)
        per: dict[str, int] = {}
        for job in self.active.values():
            key = job.concurrency_key or ""
            per[key] = per.get(key, 0) + 1
        chosen: list[int] = []
        for job_id, (_, key) in sorted(self.ready.items(), key=lambda i: (-i[1][0], i[0])):
            if len(chosen) == limit or (max_active is not None and total >= max_active):
                break
            if key and per_key is not None and per.get(key, 0) >= per_key:
                continue
            chosen.append(job_id)
            total += 1
            per[key] = per.get(key, 0) + 1
        return chosen


# Seeds 110 (fast path) and 100, 127, 157 (per-key path) each found an expired-lease ordering
# bug of the original claim; more seeds were run once, these stay as regressions.
@pytest.mark.parametrize("seed", [100, 110, 127, 157, 1, 2])
def test_claims_match_the_model(queue: Queue, seed: int) -> None:
    rng = random.Random(seed)
    model = Model()
    keys = [f"k{n}" for n in range(6)]
    for step in range(150):
        action = rng.choices(
            ["enqueue", "claim", "complete", "fail", "policy", "expire", "due"],
            weights=[4, 5, 3, 1, 1, 1, 1],
        )[0]
        if action == "enqueue":
            batch = [(rng.randint(-1, 2), rng.choice([*keys, ""]))
                     for _ in range(rng.randint(1, 5))]
            later = rng.random() < 0.2
            ids = queue.enqueue_many(
                [("t", {}, EnqueueOptions(queue="q", priority=p, concurrency_key=k or None,
                                          delay=3600 if later else None))
                 for p, k in batch]
            )
            (model.scheduled if later else model.ready).update(zip(ids, batch, strict=True))
        elif action == "expire" and model.active:
            # One expired lease at a time: the fast path looks at the `limit` earliest-expired
            # leases only (see the report); with one, admission order is exact on every path.
            job = model.active.pop(rng.choice(sorted(model.active)))
            queue.conn.execute(
                "UPDATE workhorse.jobs SET lease_until = clock_timestamp() - interval '1 second'"
                " WHERE id = %s", (job.id,)
            )
            if job.attempts < job.max_attempts:
                model.ready[job.id] = (job.priority, job.concurrency_key or "")
            expected = model.admit(1)
            claimed = queue.claim("q", 1, 60)
            assert [c.id for c in claimed] == expected, f"seed {seed} step {step}: after expiry"
            for c in claimed:
                del model.ready[c.id]
                model.active[c.id] = c
        elif action == "due" and model.scheduled:
            job_id = rng.choice(sorted(model.scheduled))
            queue.conn.execute(
                "UPDATE workhorse.jobs SET run_at = now() - interval '1 second' WHERE id = %s",
                (job_id,),
            )
            model.ready[job_id] = model.scheduled.pop(job_id)
        elif action == "claim":
            limit = rng.randint(1, 4)
            expected = model.admit(limit)
            claimed = queue.claim("q", limit, 60)
            assert [job.id for job in claimed] == expected, (
                f"seed {seed} step {step}: policy {model.policy}, limit {limit}"
            )
            for job in claimed:
                del model.ready[job.id]
                model.active[job.id] = job
        elif action in ("complete", "fail") and model.active:
            job = model.active.pop(rng.choice(sorted(model.active)))
            if action == "complete":
                queue.complete(job.id, job.fence)
            else:
                queue.fail(job.id, job.fence, ERROR)
        elif action == "policy":
            model.policy = rng.choice(POLICIES)
            definitions = [] if model.policy is None else [
                ConcurrencyPolicyDefinition("q", *model.policy)
            ]
            queue.sync_concurrency_policies("model", definitions, prune=True)
    # Drain: with every job completed as soon as it is claimed, everything comes out, in order.
    while model.ready:
        expected = model.admit(4)
        claimed = queue.claim("q", 4, 60)
        assert [job.id for job in claimed] == expected
        for job in claimed:
            del model.ready[job.id]
            queue.complete(job.id, job.fence)
        for job in list(model.active.values()):
            queue.complete(job.id, job.fence)
            del model.active[job.id]


# Admission v2. Rate limits are per hour, so no window ends during a test: the model counts every
# start made while a rate limit is in force at that scope (the queue, or the job's key).
RATED: list[tuple[int | None, int | None, int | None, int | None] | None] = [
    None, (3, None, None, None), (None, None, 4, None), (None, None, None, 2), (5, 2, 6, None),
    (None, 1, None, 3), (4, None, 8, 2), (2, 1, None, None),
]
OVERRIDES: list[dict[str, int]] = [
    {"max_active": 1}, {"max_active_per_key": 1}, {"rate_limit": 2}, {"rate_limit_per_key": 1},
    {"max_active": 6, "rate_limit": 9},
]


@dataclass
class RatedModel:
    policy: tuple[int | None, int | None, int | None, int | None] | None = None
    override: dict[str, int] = field(default_factory=dict)
    paused: bool = False
    ready: dict[int, tuple[int, str]] = field(default_factory=dict)
    active: dict[int, ClaimedJob] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)  # "" = the queue; else per key

    def limits(self) -> tuple[int | None, int | None, int | None, int | None]:
        base = self.policy or (None, None, None, None)
        names = ("max_active", "max_active_per_key", "rate_limit", "rate_limit_per_key")
        merged = [self.override.get(name, value) for name, value in zip(names, base, strict=True)]
        return merged[0], merged[1], merged[2], merged[3]

    def admit(self, limit: int) -> list[int]:
        if self.paused:
            return []
        max_active, per_key, rate, rate_key = self.limits()
        total = len(self.active)
        per: dict[str, int] = {}
        for job in self.active.values():
            key = job.concurrency_key or ""
            per[key] = per.get(key, 0) + 1
        room = limit
        if rate is not None:
            room = min(room, rate - self.starts.get("", 0))
        chosen: list[int] = []
        started: dict[str, int] = {}
        for job_id, (_, key) in sorted(self.ready.items(), key=lambda i: (-i[1][0], i[0])):
            if len(chosen) >= room or (max_active is not None and total >= max_active):
                break
            if key and per_key is not None and per.get(key, 0) >= per_key:
                continue
            if key and rate_key is not None and (
                self.starts.get(key, 0) + started.get(key, 0) >= rate_key
            ):
                continue
            chosen.append(job_id)
            total += 1
            per[key] = per.get(key, 0) + 1
            started[key] = started.get(key, 0) + 1
        return chosen

    def started(self, jobs: list[ClaimedJob]) -> None:
        _, _, rate, rate_key = self.limits()
        for job in jobs:
            if rate is not None:
                self.starts[""] = self.starts.get("", 0) + 1
            if rate_key is not None and job.concurrency_key:
                key = job.concurrency_key
                self.starts[key] = self.starts.get(key, 0) + 1


def _rated(spec: tuple[int | None, int | None, int | None, int | None]
           ) -> ConcurrencyPolicyDefinition:
    max_active, per_key, rate, rate_key = spec
    return ConcurrencyPolicyDefinition(
        "q", max_active, per_key, None if rate is None else f"{rate}/h",
        None if rate_key is None else f"{rate_key}/h",
    )


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_rate_limits_pauses_and_overrides_match_the_model(queue: Queue, seed: int) -> None:
    rng = random.Random(seed)
    model = RatedModel()
    keys = [f"k{n}" for n in range(5)]
    for step in range(160):
        action = rng.choices(
            ["enqueue", "claim", "complete", "policy", "override", "clear", "pause", "resume",
             "expire"],
            weights=[4, 6, 3, 1, 1, 1, 1, 1, 1],
        )[0]
        if action == "enqueue":
            batch = [(rng.randint(-1, 2), rng.choice([*keys, ""]))
                     for _ in range(rng.randint(1, 5))]
            ids = queue.enqueue_many(
                [("t", {}, EnqueueOptions(queue="q", priority=p, concurrency_key=k or None))
                 for p, k in batch]
            )
            model.ready.update(zip(ids, batch, strict=True))
        elif action in ("claim", "expire"):
            if action == "expire" and model.active:
                job = model.active.pop(rng.choice(sorted(model.active)))
                queue.conn.execute(
                    "UPDATE workhorse.jobs SET lease_until = clock_timestamp() - interval '1s'"
                    " WHERE id = %s", (job.id,)
                )
                if job.attempts < job.max_attempts:
                    model.ready[job.id] = (job.priority, job.concurrency_key or "")
            limit = 1 if action == "expire" else rng.randint(1, 4)
            expected = model.admit(limit)
            claimed = queue.claim("q", limit, 60)
            assert [job.id for job in claimed] == expected, (
                f"seed {seed} step {step}: policy {model.policy}, override {model.override}, "
                f"paused {model.paused}, starts {model.starts}, limit {limit}"
            )
            model.started(claimed)
            for job in claimed:
                del model.ready[job.id]
                model.active[job.id] = job
        elif action == "complete" and model.active:
            job = model.active.pop(rng.choice(sorted(model.active)))
            queue.complete(job.id, job.fence)
        elif action == "policy":
            model.policy = rng.choice(RATED)
            definitions = [] if model.policy is None else [_rated(model.policy)]
            queue.sync_concurrency_policies("model", definitions, prune=True)
        elif action == "override":
            fields = rng.choice(OVERRIDES)
            model.override.update(fields)
            queue.override_policy("q", **{
                name: f"{value}/h" if name.startswith("rate") else value
                for name, value in fields.items()
            })
        elif action == "clear":
            model.override = {}
            queue.clear_override("q")
        elif action == "pause":
            model.paused = True
            queue.pause("q")
        elif action == "resume":
            model.paused = False
            queue.resume("q")
    # Lift every limit, then drain: everything comes out, in order, none lost to the limits.
    queue.sync_concurrency_policies("model", [], prune=True)
    queue.clear_override("q")
    queue.resume("q")
    model.policy, model.override, model.paused = None, {}, False
    for job in list(model.active.values()):
        queue.complete(job.id, job.fence)
    model.active.clear()
    while model.ready:
        expected = model.admit(4)
        claimed = queue.claim("q", 4, 60)
        assert [job.id for job in claimed] == expected
        for job in claimed:
            del model.ready[job.id]
            queue.complete(job.id, job.fence)
