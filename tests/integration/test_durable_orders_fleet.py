"""Durable execution under a fleet with kill -9s (issue #42's done-when): an order fulfilment with
three steps, a 2 s durable sleep, a signal wait and two children (_durable_orders_app.py)
completes, each step's side effect observed once per recorded step.

Three supervisors (`workhorse worker _durable_orders_app:app`, each its own OS process and process
group, --slots 1 --concurrency 2 --lease 2s) run 30 orders, half of them by a sync handler, half
by an async one, while

- a killer SIGKILLs a random supervisor's whole process group every 0.5-1.2 s and starts it again
  (some of these kills come while jobs are suspended on their sleep, signal or children);
- failpoints (rows of `durable_faults`) make a slot SIGKILL its own supervisor's group at one
  precise place, once each: inside a step's function after its side effect, after the function
  returned and before its record, after its record, before and after the sleep's record, once a
  wait consumed its signal, once the children were enqueued, before and after the children's
  outcome is recorded, inside a child's step, and after a child's step but before its outcome (a
  child ending); the killer starts a supervisor killed so again too;
- a signaller sends each order its `approval`, a third of them within the first 3 s (before the
  order reaches its wait, often before it started), a third as soon as the order's sleep is
  recorded (racing its wait: the wait finds it, or suspends and is woken by it), a third once the
  order is suspended on its wait; a third of them again, with the same key, within 2 s.

Every execution of a step's function appends a committed row (its job, its run's fence, a token
that is also its result, the database's clock) before it returns, so the test sees the
executions whose record a kill lost. The checker (`check`):

- no job lost: every order succeeded, with the summary its recorded steps make; each has exactly
  two children (spawned once), both succeeded with their recorded step's result;
- every `step.run` (reserve, charge, ship; a child's print) ran at least once and is recorded;
  its recorded result is the token of one of its executions, of the run that recorded it, which
  ran before the record; no execution started after the record ("a recorded step ran again"),
  except in a run whose fence is older than the record's (a stale run that outlived its lease:
  at-least-once, counted; not expected here, since a kill takes the whole process group);
- no step ran again in a run newer than one that had gone past it (its record, or any evidence
  of a later step under that fence: a later step's record, suspension or side effect, or the
  job's success): "a step a run had gone past ran again";
- the sleep ended no earlier than 2 s after the charge was recorded, and nothing after it ran
  before its end;
- every signal delivered once: each order holds exactly one `approval` (one key; a repeat
  returned False), consumed by the wait `approve`, whose recorded payload it is; the order's
  result has it.

The same checker fails on two deliberately broken runners, each on a small fleet with no kills
(the resumes alone rerun the steps): a `step.run` that ignores its record
(DURABLE_FLEET_BROKEN=replay in the app) makes "a recorded step ran again"; the live record-step
that records no `run` step (installed in the test's database) makes "a step a run had gone past
ran again" (and "never recorded").

The intact fleet takes 20-40 s on a 2-core machine (the more, the busier it is), each broken
one 4-8 s; the file, 30-50 s with `pytest -n 2`.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import _durable_orders_app as da
import psycopg
import pytest
from _integration import install_broken

from workhorse import App, _sql
from workhorse.errors import InvalidOptionsError

# A fleet with kills: CI's first pass; the intact runner also in its second (marker `fleet`), the
# broken ones (they test the checker, not the server) once.
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

SUPERVISORS = 3
OPTIONS = ("--slots", "1", "--concurrency", "2", "--lease", "2s", "--dequeue-timeout", "0.5s",
           "--prefetch", "0", "--grace", "2s")
ORDERS = 30
# When each order's approval is sent: within the fleet's first 3 s (before the order reaches its
# wait, often before it started); as soon as its sleep is recorded (racing the wait: it finds the
# signal, or it suspends and the signal wakes it); once it is suspended on the wait.
MODES = ("early", "racing", "waiting")
EARLY_WITHIN = 3.0
REPEAT_WITHIN = 2.0  # a repeat (same key) follows its first send within this
# At least 5 kills in any run of 6 s or more (the checks want 5): the fleet's 30 orders take 7-10 s
# on a 2-core machine, where kills every 1-2 s left 4 in some runs.
KILL_EVERY = (0.5, 1.2)
YOUNG = 5.0  # a supervisor started this recently may not handle SIGTERM yet
DONE_TIMEOUT = 150.0  # generous: a busy 2-core machine; a fleet that stalls fails after it

# Where a slot kills its supervisor's group, once per row: an order's (by job id) and a child's.
ORDER_POINTS = [
    "in:reserve", "before-record:reserve", "after-record:reserve",
    "in:charge", "before-record:charge", "after-record:charge",
    "before-record:cool-off", "after-record:cool-off",
    "after-signal", "after-spawn", "before-record:labels", "after-record:labels",
    "in:ship", "before-record:ship", "after-record:ship",
]
CHILD_POINTS = ["in:label-1", "child-end", "in:label-2", "child-end"]  # two orders' children


# ---- the fleet -------------------------------------------------------------------------------

class Fleet:
    """SUPERVISORS supervisors of `_durable_orders_app:app`, each leading its own process group
    (a kill takes it with its slots); `revive()` starts again whichever died."""

    def __init__(self, database_url: str, logs: Path, env: dict[str, str]) -> None:
        path = os.environ.get("PYTHONPATH")
        self.env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url,
                    "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO), **env}
        self.env.pop("WORKHORSE_DEFAULT_CONCURRENCY_LIMIT", None)
        self.logs = logs
        self.starts = 0
        self.lock = threading.Lock()
        self.started: dict[int, float] = {}  # pid: when
        self.procs = [self._start(index) for index in range(SUPERVISORS)]

    def _start(self, index: int) -> subprocess.Popen[bytes]:
        self.starts += 1
        with (self.logs / f"s{index}.log").open("ab") as out:
            out.write(f"==== start {self.starts} ====\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [sys.executable, "-m", "workhorse", "worker", "_durable_orders_app:app",
                 *OPTIONS],
                cwd=HERE, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        self.started[proc.pid] = time.monotonic()
        return proc

    def kill(self, index: int) -> None:
        """kill -9 of supervisor `index`'s group, and a new one in its place."""
        with self.lock:
            proc = self.procs[index]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            self.procs[index] = self._start(index)

    def revive(self) -> list[int]:
        """Start again the supervisors that died (a failpoint killed them): their exit codes."""
        codes = []
        with self.lock:
            for index, proc in enumerate(self.procs):
                code = proc.poll()
                if code is not None:
                    codes.append(code)
                    with contextlib.suppress(ProcessLookupError):  # what is left of its group
                        os.killpg(proc.pid, signal.SIGKILL)
                    self.procs[index] = self._start(index)
        return codes

    def stop(self) -> list[int | None]:
        """SIGTERM each (it drains); their exit codes, 0 for one that had not started its
        handlers yet (a supervisor started again a moment ago dies of the SIGTERM itself)."""
        with self.lock:
            now = time.monotonic()
            for proc in self.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            codes: list[int | None] = []
            for proc in self.procs:
                try:
                    code = proc.wait(30)
                    young = now - self.started[proc.pid] < YOUNG
                    codes.append(0 if code == -signal.SIGTERM and young else code)
                except subprocess.TimeoutExpired:
                    codes.append(None)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            return codes

    def output(self) -> str:
        return "\n".join(f"--- supervisor {i} ---\n"
                         f"{(self.logs / f's{i}.log').read_text(errors='replace')[-4000:]}"
                         for i in range(SUPERVISORS))


@dataclass
class Sent:
    """The approvals the signaller sent: order job id -> (key, payload, delivered); the
    repeats' answers (False: a duplicate; 'finished': the job had ended already)."""

    first: dict[int, tuple[str, Any, bool]] = field(default_factory=dict)
    repeats: dict[int, list[bool | str]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)


PROGRESS = """
SELECT j.id, j.status = 'suspended' AND j.suspended_on = 'signal',
       EXISTS (SELECT 1 FROM workhorse.job_steps s
               WHERE s.job_id = j.id AND s.name = 'cool-off' AND s.recorded_at IS NOT NULL)
FROM workhorse.jobs j WHERE j.id = ANY(%s)
"""


def signaller(app: App, database_url: str, orders: dict[int, int], sent: Sent,
              plan: dict[int, tuple[str, float, bool]], began: float,
              stop: threading.Event) -> None:
    """Send each order its approval when its plan (mode, early moment, repeat) says, and a
    planned repeat (the same key) within REPEAT_WITHIN after."""
    rng = random.Random(len(plan))
    waiting = dict(plan)
    repeats: dict[int, float] = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        while (waiting or repeats) and not stop.wait(0.05):
            now = time.monotonic()
            due = [job_id for job_id, at in repeats.items() if at <= now]
            progress = {job_id: (suspended, slept) for job_id, suspended, slept in conn.execute(
                PROGRESS, ([job_id for job_id, (mode, _, _) in waiting.items()
                            if mode != "early"],))}
            for job_id, (mode, at, _) in waiting.items():
                suspended, slept = progress.get(job_id, (False, False))
                if (mode == "early" and began + at <= now) or (mode == "racing" and slept) or (
                        mode == "waiting" and suspended):
                    due.append(job_id)
            for job_id in due:
                send(app, orders, sent, job_id)
                if waiting.pop(job_id, (None, None, False))[2]:
                    repeats[job_id] = time.monotonic() + rng.uniform(0.0, REPEAT_WITHIN)
                else:
                    repeats.pop(job_id, None)


def send(app: App, orders: dict[int, int], sent: Sent, job_id: int) -> None:
    """Send job `job_id` its approval (its first, or a repeat of the same key)."""
    order_no = orders[job_id]
    key, payload = f"approve-{order_no}", {"by": f"ops-{order_no % 7}", "order": order_no}
    try:
        delivered = app.signal(job_id, "approval", payload, key=key)
    except InvalidOptionsError as exc:  # the job has finished: only a repeat may find that
        if job_id not in sent.first:
            sent.errors.append(f"job {job_id}'s first approval: {exc}")
        sent.repeats[job_id].append("finished")
        return
    except Exception as exc:  # a failure here must show, not end the thread silently
        sent.errors.append(f"job {job_id}: {type(exc).__name__}: {exc}")
        return
    if job_id in sent.first:
        sent.repeats[job_id].append(delivered)
    else:
        sent.first[job_id] = (key, payload, delivered)


@dataclass
class Kills:
    at: list[float] = field(default_factory=list)  # the random kills, monotonic
    while_suspended: list[int] = field(default_factory=list)  # suspended jobs at each
    failpoints: int = 0  # supervisors found dead (a failpoint killed them), started again
    unexpected: list[int] = field(default_factory=list)  # their exit codes other than -9


def killer(fleet: Fleet, database_url: str, kills: Kills, rng: random.Random,
           stop: threading.Event, every: tuple[float, float] | None) -> None:
    """Every 0.5-1.2 s (with `every`), SIGKILL a random supervisor's group and start it again;
    every 0.1 s, start again those a failpoint killed."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        next_kill = time.monotonic() + rng.uniform(*every) if every else float("inf")
        while not stop.wait(0.1):
            for code in fleet.revive():
                kills.failpoints += 1
                if code != -signal.SIGKILL:
                    kills.unexpected.append(code)
            if every is not None and time.monotonic() >= next_kill:
                row = conn.execute("SELECT count(*) FROM workhorse.jobs "
                                   "WHERE status = 'suspended'").fetchone()
                fleet.kill(rng.randrange(SUPERVISORS))
                kills.at.append(time.monotonic())
                kills.while_suspended.append(int(row[0]) if row else 0)
                next_kill = time.monotonic() + rng.uniform(*every)


# ---- the checker -----------------------------------------------------------------------------

@dataclass
class Effect:
    job_id: int
    step: str  # as job_steps names it (a child's "print")
    fence: int
    token: str
    at: datetime


@dataclass
class StepRow:
    kind: str
    created_at: datetime
    recorded_at: datetime | None
    wake_at: datetime | None
    result: Any
    fence: int


@dataclass
class Found:
    problems: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    executions: int = 0
    reruns: int = 0  # executions beyond one per step (none after their step's record)
    stale: int = 0  # executions after a record, by a run older than the record's
    woken: int = 0  # waits that suspended, then took their signal (the others found it there)

    def add(self, what: str, detail: str) -> None:
        self.problems[what].append(detail)


Jobs = dict[int, tuple[str, str, Any, int | None, int]]  # id: task, status, result, parent, fence


def read(conn: psycopg.Connection[Any]) -> tuple[
        Jobs, dict[tuple[int, str], StepRow], dict[tuple[int, str], list[Effect]]]:
    jobs = {row[0]: row[1:] for row in conn.execute(
        "SELECT id, task, status, result, parent_id, fence FROM workhorse.all_jobs "
        "WHERE queue = %s", (da.QUEUE,))}
    steps = {(row[0], row[1]): StepRow(*row[2:]) for row in conn.execute(
        "SELECT job_id, name, kind, created_at, recorded_at, wake_at, result, fence "
        "FROM workhorse.job_steps")}
    effects: dict[tuple[int, str], list[Effect]] = defaultdict(list)
    for job_id, step, fence, token, at in conn.execute(
            "SELECT job_id, step, fence, token, at FROM durable_side_effects ORDER BY id"):
        name = "print" if step.startswith("label-") else step
        effects[(job_id, name)].append(Effect(job_id, name, fence, token, at))
    return jobs, steps, effects


def check_run_step(found: Found, job_id: int, name: str, steps: dict[tuple[int, str], StepRow],
                   effects: list[Effect], passed: int | None) -> StepRow | None:
    """One `step.run` of one job: ran, recorded from one of its executions, never again after
    its record, nor in a run newer than `passed` (the oldest fence that went past it)."""
    where = f"job {job_id} step {name!r}"
    found.executions += len(effects)
    found.reruns += max(len(effects) - 1, 0)
    if not effects:
        found.add("a step never ran", where)
    record = steps.get((job_id, name))
    if record is None or record.recorded_at is None:
        found.add("a step the job went past was never recorded", where)
        record = None
    if passed is not None:
        again = sorted({e.fence for e in effects if e.fence > passed})
        if again:
            found.add("a step a run had gone past ran again",
                      f"{where}: run {passed} went past it, runs {again} ran it again")
    if record is None:
        return None
    assert record.recorded_at is not None
    token = record.result.get("token") if isinstance(record.result, dict) else None
    source = [e for e in effects if e.token == token]
    if len(source) != 1 or source[0].fence != record.fence or \
            source[0].at >= record.recorded_at:
        found.add("a recorded result matches no execution of the run that recorded it",
                  f"{where}: recorded {record.result!r} under fence {record.fence}; "
                  f"executions {[(e.fence, e.token) for e in effects]}")
    for execution in effects:
        if execution.at <= record.recorded_at:
            continue
        if execution.fence < record.fence:
            found.stale += 1  # a run that outlived its lease: at-least-once, not a replay
        else:
            found.add("a recorded step ran again",
                      f"{where}: recorded at {record.recorded_at:%H:%M:%S.%f} under fence "
                      f"{record.fence}, ran again at {execution.at:%H:%M:%S.%f} under fence "
                      f"{execution.fence}")
    return record


def passed_fences(job_id: int, status: str, final_fence: int,
                  steps: dict[tuple[int, str], StepRow],
                  effects: dict[tuple[int, str], list[Effect]]) -> dict[str, int | None]:
    """For each step of an order, the oldest fence known to have gone past it: its record's, a
    later step's (recorded or pending: the run that suspended there), a later step's side
    effect's, or the job's own when it succeeded (the steps run in ORDER_STEPS's order)."""
    passed = {}
    for index, name in enumerate(da.ORDER_STEPS):
        fences = {final_fence} if status == "succeeded" else set()
        for later in da.ORDER_STEPS[index:]:
            row = steps.get((job_id, later))
            if row is not None and (later != name or row.recorded_at is not None):
                fences.add(row.fence)
            if later != name:
                fences |= {e.fence for e in effects.get((job_id, later), [])}
        passed[name] = min(fences, default=None)
    return passed


def check(conn: psycopg.Connection[Any], orders: dict[int, int], sent: Sent) -> str:
    """Every problem found, as one AssertionError whose first line names their kinds; else a
    summary of what was checked."""
    jobs, steps, effects = read(conn)
    found = Found()
    children: dict[int, list[int]] = defaultdict(list)
    for job_id, (task, _, _, parent, _) in sorted(jobs.items()):
        if job_id in orders:
            continue
        if task != "do.label" or parent not in orders:
            found.add("a job that is neither an order nor an order's child", f"{job_id} {task}")
            continue
        children[parent].append(job_id)
    signals: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for job_id, *stored in conn.execute(
            "SELECT job_id, signal_key, payload, consumed_at, consumed_by "
            "FROM workhorse.job_signals WHERE name = 'approval' ORDER BY id"):
        signals[job_id].append(tuple(stored))

    for job_id, order_no in sorted(orders.items()):
        task, status, result, _, final_fence = jobs[job_id]
        where = f"order {order_no} (job {job_id}, {task})"
        if status != "succeeded":
            found.add("a job was lost (it did not succeed)", f"{where}: {status}")
        passed = passed_fences(job_id, status, final_fence, steps, effects)
        recorded = {name: check_run_step(found, job_id, name, steps,
                                         effects.get((job_id, name), []), passed[name])
                    for name in da.RUN_STEPS}

        # The sleep: over no earlier than SLEEP after the charge's record; nothing later ran
        # before its end.
        sleep = steps.get((job_id, "cool-off"))
        charge = recorded["charge"]
        if sleep is None or sleep.recorded_at is None or sleep.wake_at is None:
            found.add("a step the job went past was never recorded", f"{where}: the sleep")
        else:
            later = [e.at for e in effects.get((job_id, "ship"), [])]
            later += [row.recorded_at for name in ("approve", "labels")
                      if (row := steps.get((job_id, name))) and row.recorded_at]
            earliest = (charge.recorded_at + timedelta(seconds=da.SLEEP - 0.05)
                        if charge is not None and charge.recorded_at is not None else None)
            if sleep.recorded_at < sleep.wake_at or any(at < sleep.wake_at for at in later) \
                    or (earliest is not None and sleep.wake_at < earliest):
                found.add("the sleep ended early",
                          f"{where}: wake_at {sleep.wake_at}, recorded {sleep.recorded_at}")

        # The signal: stored once (its repeats ignored), consumed by the wait, its payload
        # recorded and returned.
        key, payload, delivered = sent.first.get(job_id, (None, None, False))
        stored = signals.get(job_id, [])
        wait = steps.get((job_id, "approve"))
        if not delivered or [(k, p) for k, p, _, _ in stored] != [(key, payload)]:
            found.add("a signal was not stored exactly once",
                      f"{where}: sent {key} ({delivered}), stored {stored}")
        elif stored[0][2] is None or stored[0][3] != "approve":
            found.add("a wait did not consume its signal", f"{where}: {stored}")
        if any(answer is True for answer in sent.repeats.get(job_id, [])):
            found.add("a repeated signal was delivered again", where)
        if wait is None or wait.recorded_at is None or wait.result != payload:
            found.add("a wait did not record its signal's payload",
                      f"{where}: {wait} vs {payload}")
        elif wait.recorded_at - wait.created_at > timedelta(milliseconds=5):
            # the suspension wrote it pending first (a wait that found its signal wrote it once)
            found.woken += 1

        # The children: two, spawned once, each its step recorded once; their results, in
        # order, the children step's.
        kids = sorted(children.get(job_id, []))
        if len(kids) != len(da.LABELS):
            found.add("children were not spawned exactly once", f"{where}: children {kids}")
        kid_results = []
        for kid in kids:
            _, kid_status, kid_result, _, kid_fence = jobs[kid]
            if kid_status != "succeeded":
                found.add("a job was lost (it did not succeed)", f"child {kid}: {kid_status}")
            printed = check_run_step(
                found, kid, "print", steps, effects.get((kid, "print"), []),
                kid_fence if kid_status == "succeeded" else None)
            if printed is None or kid_result != printed.result or \
                    kid_result.get("order") != order_no:
                found.add("a child's result is not its recorded step's",
                          f"child {kid}: {kid_result} vs {printed}")
            kid_results.append(kid_result)
        labels = steps.get((job_id, "labels"))
        if labels is None or labels.recorded_at is None or labels.result != kid_results:
            found.add("the children step did not record its children's results",
                      f"{where}: {labels} vs {kid_results}")

        # The order's result: what its recorded steps say.
        reserve, ship = recorded["reserve"], recorded["ship"]
        if status == "succeeded" and reserve and charge and ship:
            expected = da.summary(order_no, reserve.result, charge.result, payload,
                                  kid_results, ship.result)
            if result != expected:
                found.add("an order's result is not its recorded steps'",
                          f"{where}: {result} vs {expected}")

    for problem in sent.errors:
        found.add("the signaller failed", problem)
    if found.problems:
        kinds = "; ".join(f"{what} ({len(details)})" for what, details in found.problems.items())
        lines = [f"{what}: {detail}" for what, details in found.problems.items()
                 for detail in details[:4]]
        raise AssertionError("\n".join([kinds, *lines]))
    repeats = sum(len(answers) for answers in sent.repeats.values())
    return (f"{len(orders)} orders and {sum(map(len, children.values()))} children succeeded; "
            f"{found.executions} step executions for {found.executions - found.reruns} "
            f"recorded steps ({found.reruns} reran before their record, {found.stale} by stale "
            f"runs, none after); {len(sent.first)} signals stored once ({repeats} repeats "
            f"ignored), each consumed once ({found.woken} by a suspended wait, the others "
            "there before their wait)")


# ---- the runs --------------------------------------------------------------------------------

@pytest.fixture
def orders_app(database_url: str) -> Iterator[App]:
    app = da.build(database_url)
    try:
        yield app
    finally:
        app.close()


def enqueue(app: App, conn: psycopg.Connection[Any], count: int) -> dict[int, int]:
    """`count` orders, alternately sync and async: job id -> order number."""
    da.setup(conn)
    calls = [app.tasks[da.TASKS[n % 2]].call((n,)) for n in range(count)]
    return {handle.id: n for handle, n in zip(app.enqueue_many(calls), range(count), strict=True)}


def run_fleet(database_url: str, conn: psycopg.Connection[Any], app: App, tmp_path: Path,
              orders: dict[int, int], *, env: dict[str, str],
              kill_every: tuple[float, float] | None, modes: tuple[str, ...],
              repeats: float, seed: int) -> tuple[Sent, Kills, float]:
    """Run the fleet (and the killer, the signaller) until every order ended; stop it."""
    rng = random.Random(seed)
    plan = {job_id: (modes[n % len(modes)], rng.uniform(0.0, EARLY_WITHIN),
                     rng.random() < repeats) for n, job_id in enumerate(sorted(orders))}
    sent, kills, stop = Sent(), Kills(), threading.Event()
    began = time.monotonic()
    fleet = Fleet(database_url, tmp_path, env)
    threads = [threading.Thread(target=signaller,
                                args=(app, database_url, orders, sent, plan, began, stop)),
               threading.Thread(target=killer, args=(fleet, database_url, kills, rng, stop,
                                                     kill_every))]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + DONE_TIMEOUT
        while True:
            ended = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
                "count(*) FILTER (WHERE status IN ('failed', 'held', 'canceled', 'expired')) "
                "FROM workhorse.all_jobs WHERE id = ANY(%s)", (list(orders),)).fetchone()
            assert ended is not None
            if ended[0] + ended[1] == len(orders):
                break
            assert time.monotonic() < deadline, (
                f"{ended[0]} of {len(orders)} orders succeeded after {DONE_TIMEOUT} s\n"
                f"{fleet.output()}")
            time.sleep(0.1)
        took = time.monotonic() - began
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        codes = fleet.stop()
    assert codes == [0] * SUPERVISORS, f"{codes}\n{fleet.output()}"
    assert kills.unexpected == [], f"supervisors exited {kills.unexpected}\n{fleet.output()}"
    return sent, kills, took


def faults(conn: psycopg.Connection[Any], orders: dict[int, int], rng: random.Random) -> None:
    """Each order failpoint for one order, each pair of child failpoints for one order's
    children, all different orders."""
    chosen = rng.sample(sorted(orders), len(ORDER_POINTS) + len(CHILD_POINTS) // 2)
    parents = chosen[len(ORDER_POINTS):]
    rows = [(str(job_id), point) for job_id, point in zip(chosen, ORDER_POINTS, strict=False)]
    rows += [(f"label-{orders[parents[n // 2]]}-{1 + n % 2}", point)
             for n, point in enumerate(CHILD_POINTS)]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO durable_faults (target, point) VALUES (%s, %s)", rows)


@pytest.mark.fleet
def test_orders_complete_under_kill_9s_each_step_once_per_record(
        database_url: str, conn: psycopg.Connection[Any], orders_app: App,
        tmp_path: Path) -> None:
    seed = int(os.environ.get("DURABLE_FLEET_SEED", random.randrange(1 << 30)))
    orders = enqueue(orders_app, conn, ORDERS)
    faults(conn, orders, random.Random(seed))
    sent, kills, took = run_fleet(
        database_url, conn, orders_app, tmp_path, orders, env={"DURABLE_FLEET_FAULTS": "1"},
        kill_every=KILL_EVERY, modes=MODES, repeats=1 / 3, seed=seed)
    fired = Counter(point for (point,) in conn.execute(
        "SELECT point FROM durable_faults WHERE fired_at IS NOT NULL"))
    report = check(conn, orders, sent)
    unfired = conn.execute("SELECT target, point FROM durable_faults "
                           "WHERE fired_at IS NULL").fetchall()
    # Every failpoint is on its order's path: each fires, unless a random kill took its order
    # past it first (a kill between a side effect and its record, say): a few at most.
    assert len(unfired) <= 3, f"seed {seed}: failpoints that never fired: {unfired}"
    assert len(kills.at) >= 5 and max(kills.while_suspended) > 0, (seed, kills)
    print(f"seed {seed}: {len(orders)} orders in {took:.1f} s, {len(kills.at)} random kills "
          f"({sum(n > 0 for n in kills.while_suspended)} while jobs were suspended), "
          f"{sum(fired.values())} failpoint kills ({kills.failpoints} supervisors found dead "
          f"and started again); {report}")


# ---- the checker fails on broken runners -----------------------------------------------------

RECORDS_NO_RUN = ("    IF NOT v_durable THEN",
                  "    IF p_kind = 'run' THEN\n        RETURN true;\n    END IF;\n"
                  "    IF NOT v_durable THEN")
BROKEN: dict[str, tuple[dict[str, str], tuple[str, str] | None, str]] = {
    "replay ignored": ({"DURABLE_FLEET_BROKEN": "replay"}, None, "a recorded step ran again"),
    "run steps never recorded": ({}, RECORDS_NO_RUN, "a step a run had gone past ran again"),
}


def install_broken_record(conn: psycopg.Connection[Any], old: str, new: str) -> None:
    """A deliberately broken copy of the live record-step function in this test's database."""
    install_broken(conn, _sql.function_name("record_step"), old, new)


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_checker_fails_on_a_broken_runner(
        database_url: str, conn: psycopg.Connection[Any], orders_app: App, tmp_path: Path,
        broken: str) -> None:
    env, sql, expected = BROKEN[broken]
    if sql is not None:
        install_broken_record(conn, *sql)
    orders = enqueue(orders_app, conn, 8)
    sent, _, took = run_fleet(database_url, conn, orders_app, tmp_path, orders, env=env,
                              kill_every=None, modes=("early",), repeats=0.5, seed=1)
    with pytest.raises(AssertionError, match=expected) as failure:
        check(conn, orders, sent)
    print(f"{broken} ({took:.1f} s): {str(failure.value).splitlines()[0][:300]}")
