"""Issue #24's bad-input sweep: hostile values (NUL, lone surrogates, 10,000-character names, ids
beyond bigint, NaN and infinity, deeply nested payloads) sent through the public API (Queue,
AsyncQueue, App, tasks, JobHandle, the option types), the CLI and every dashboard route. Each one
gets a typed error (a WorkhorseError), a one-line CLI error (exit 1, or 2 for a usage error), or a
4xx, and the database is unchanged afterwards (every table of the schema compared).

Per-key limits (issue #41 item 2) have cases of their own, met by a stored set that each must
leave as it is: KeyLimit's fields, set_key_limits' keys, values, default, namespace and queue,
clear_key_limits' keys, key_limits, the async twins (InvalidPolicyError, PolicyConflictError for
another namespace), App.key_limits (refused, the last good declaration kept) and a sync that
declares them on a queue without limits (refused before anything is written).

Valid but awkward names (markup, quotes, `<script>`, right-to-left text, emoji, SQL) work
through the same surfaces and come back literally: from the API and `--json` as they were
stored, in the dashboard HTML-escaped (never as markup).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from markupsafe import escape

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient

from workhorse import (
    App,
    AsyncQueue,
    BudgetDefinition,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidPolicyError,
    KeyLimit,
    PolicyConflictError,
    Queue,
    ScheduleDefinition,
    Unique,
    WorkhorseError,
)
from workhorse.cli import main
from workhorse.dashboard import create_app
from workhorse.handle import JobHandle

NUL = "a\x00b"
SURROGATE = "a\ud800b"
HUGE = "q" * 10_000
TOO_LONG = "q" * 256
BIG = 2**70
BEYOND = 2**63
BELOW = -(2**63) - 1
NAN = math.nan
TOKEN = "sweep-token-with-more-than-32-characters"

AWKWARD = [
    "<script>alert(1)</script>",
    "quote\"double'single`back",
    "[bold red]x[/bold red]",
    "broken[/]markup",
    "עברית RTL \u202eevil\u202c",
    "emoji 🐎🔥 ünïcödé",
    "&amp; &lt;entity&gt;",
    "{{ 7*7 }} {% if %}",
    "' OR 1=1 -- ;DROP TABLE jobs",
    "back\\slash %s %(x)s _%",
]


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def _state(url: str) -> dict[str, str]:
    """Every table of the workhorse schema, as a digest of its rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'workhorse' AND c.relkind IN ('r', 'p') ORDER BY 1")]
        found = {}
        for table in tables:
            row = conn.execute(psycopg.sql.SQL(
                "SELECT count(*), md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), ''))"
                " FROM workhorse.{} t").format(psycopg.sql.Identifier(table))).fetchone()
            found[table] = f"{row[0]}:{row[1]}"
        return found


@pytest.fixture
def world(database_url: str, queue: Queue) -> Iterator[dict[str, Any]]:
    """A governed queue with a ready job, a failed one and a schedule, and an app over it."""
    queue.sync_concurrency_policies("sweep", [ConcurrencyPolicyDefinition("api", max_active=3)])
    ready = queue.enqueue("sweep.task", {"args": [1], "kwargs": {}}, EnqueueOptions(queue="api"))
    failing = queue.enqueue("sweep.task", {"args": [2], "kwargs": {}},
                            EnqueueOptions(queue="api", max_attempts=1, priority=5))
    (claimed,) = queue.claim("api", 1, 60)
    assert claimed.id == failing
    queue.fail(claimed.id, claimed.fence, {"type": "E", "message": "m", "traceback": ""})
    queue.sync_schedules("sweep", [ScheduleDefinition("nightly", "sweep.task",
                                                      cron="0 3 * * *")])
    app = App("sweep", database_url)

    @app.task(name="sweep.task", queue="api")
    def task(n: int) -> None: ...

    @app.task(name="sweep.keyed", queue="keyed", concurrency_key=lambda k: k)
    def keyed(k: str) -> None: ...

    try:
        yield {"app": app, "task": task, "keyed": keyed, "ready": ready, "url": database_url}
    finally:
        app.close()


def _api_cases(world: dict[str, Any], q: Queue, aq_run: Callable[[Any], Any]
               ) -> list[tuple[str, Callable[[], Any]]]:
    app, task, keyed = world["app"], world["task"], world["keyed"]
    ok = {"args": [], "kwargs": {}}
    ready = world["ready"]
    cases: list[tuple[str, Callable[[], Any]]] = []

    def add(name: str, call: Callable[[], Any]) -> None:
        cases.append((name, call))

    for label, bad in (("NUL", NUL), ("surrogate", SURROGATE), ("10k", HUGE), ("256", TOO_LONG),
                       ("empty", "")):
        add(f"enqueue task {label}", lambda bad=bad: q.enqueue(bad, ok))
        add(f"EnqueueOptions queue {label}", lambda bad=bad: EnqueueOptions(queue=bad))
        add(f"EnqueueOptions key {label}", lambda bad=bad: EnqueueOptions(concurrency_key=bad))
        add(f"list_jobs queue {label}", lambda bad=bad: q.list_jobs(queue=bad))
        add(f"pause {label}", lambda bad=bad: q.pause(bad))
        # Named budgets (issue #30).
        add(f"EnqueueOptions budget {label}", lambda bad=bad: EnqueueOptions(budget=bad))
        add(f"BudgetDefinition name {label}",
            lambda bad=bad: BudgetDefinition(bad, max_active=1))
        add(f"sync_budgets namespace {label}",
            lambda bad=bad: q.sync_budgets(bad, [BudgetDefinition("b", max_active=1)]))
        add(f"override_budget {label}", lambda bad=bad: q.override_budget(bad, max_active=1))
        add(f"app.budget {label}", lambda bad=bad: app.budget(bad, max_active=1))
        add(f"apply_async budget {label}",
            lambda bad=bad: task.apply_async((1,), budget=bad))
    add("BudgetDefinition no limit", lambda: BudgetDefinition("b"))
    add("BudgetDefinition burst above N",
        lambda: BudgetDefinition("b", rate_limit="5/s", rate_burst=6))
    add("BudgetDefinition burst without a rate",
        lambda: BudgetDefinition("b", max_active=1, rate_burst=1))
    add("BudgetDefinition max_active NaN",
        lambda: BudgetDefinition("b", max_active=NAN))  # type: ignore[arg-type]
    add("override_budget burst with no rate in force",
        lambda: q.override_budget("nobody", rate_burst=1))
    add("override_budget expires NaN", lambda: q.override_budget("b", max_active=1,
                                                                 expires_in=NAN))
    add("override_policy burst above N", lambda: q.override_policy("api", rate_limit="5/s",
                                                                   rate_burst=6))
    add("policy burst 2**70", lambda: ConcurrencyPolicyDefinition(
        "api", rate_limit="5/s", rate_burst=BIG))
    add("EnqueueOptions idempotency NUL", lambda: EnqueueOptions(idempotency_key=NUL))
    add("EnqueueOptions priority huge", lambda: EnqueueOptions(priority=BIG))
    add("EnqueueOptions priority NaN", lambda: EnqueueOptions(priority=NAN))  # type: ignore[arg-type]
    add("EnqueueOptions max_attempts bool", lambda: EnqueueOptions(max_attempts=True))
    add("EnqueueOptions delay NaN", lambda: EnqueueOptions(delay=NAN))
    add("EnqueueOptions delay inf", lambda: EnqueueOptions(delay=math.inf))
    add("EnqueueOptions delay 10**400", lambda: EnqueueOptions(delay=10**400))
    add("override rate 5000 digits", lambda: q.override_policy("api", rate_limit="9" * 5000 + "/m"))
    add("policy rate 5000 digits", lambda: ConcurrencyPolicyDefinition("x", rate_limit="9" * 5000
                                                                        + "/s"))
    add("schedule every 10**400", lambda: ScheduleDefinition("s", "t", every=10**400))
    add("schedule cron 5000 digits", lambda: ScheduleDefinition("s", "t", cron="9" * 5000
                                                                + " * * * *"))
    add("App retention 10**400", lambda: App("r", retention={"failed": 10**400}))
    add("task timeout 10**400", lambda: App("t").task(timeout=10**400)(lambda: None))
    add("payload NaN", lambda: q.enqueue("t", {"args": [NAN], "kwargs": {}}))
    add("payload inf", lambda: q.enqueue("t", {"x": -math.inf}))
    add("payload nested 100k deep", lambda: q.enqueue("t", _nested(100_000)))
    add("payload NUL", lambda: q.enqueue("t", {"x": "\x00"}))
    add("payload surrogate", lambda: q.enqueue("t", {"x": "\udfff"}))
    add("payload surrogate key", lambda: q.enqueue("t", {"\ud800": 1}))
    add("payload over 1 MiB", lambda: q.enqueue("t", {"x": "x" * (1024 * 1024 + 1)}))
    add("payload not JSON", lambda: q.enqueue("t", {"x": object()}))
    add("enqueue_many bad item", lambda: q.enqueue_many([("t", ok, None), ("only-two", ok)]))
    add("enqueue_many NaN in second", lambda: q.enqueue_many([("t", ok, None),
                                                              ("t", [NAN], None)]))
    for label, bad in (("2**70", BIG), ("2**63", BEYOND), ("below bigint", BELOW),
                       ("bool", True), ("float", 1.0), ("str", "1"), ("NaN", NAN)):
        add(f"get_job {label}", lambda bad=bad: q.get_job(bad))
        add(f"cancel_jobs {label}", lambda bad=bad: q.cancel_jobs([ready, bad]))
        add(f"retry_jobs {label}", lambda bad=bad: q.retry_jobs([bad]))
    add("cancel_jobs a string", lambda: q.cancel_jobs("12"))  # type: ignore[arg-type]
    add("cancel_jobs an int", lambda: q.cancel_jobs(12))  # type: ignore[arg-type]
    add("list_jobs key surrogate", lambda: q.list_jobs(key=SURROGATE))
    add("list_jobs task 10k", lambda: q.list_jobs(task=HUGE))
    add("list_jobs status unknown", lambda: q.list_jobs(status="nope"))
    add("list_jobs status NUL", lambda: q.list_jobs(status=NUL))
    add("list_jobs limit huge", lambda: q.list_jobs(limit=BIG))
    add("list_jobs limit NaN", lambda: q.list_jobs(limit=NAN))  # type: ignore[arg-type]
    add("resume surrogate", lambda: q.resume(SURROGATE))
    add("clear_override NUL", lambda: q.clear_override(NUL))
    add("override 10k name", lambda: q.override_policy(HUGE, max_active=1))
    add("override max_active huge", lambda: q.override_policy("api", max_active=BIG))
    add("override max_active NaN", lambda: q.override_policy("api", max_active=NAN))  # type: ignore[arg-type]
    add("override expires_in NaN", lambda: q.override_policy("api", max_active=1,
                                                              expires_in=NAN))
    add("override expires_in inf", lambda: q.override_policy("api", max_active=1,
                                                              expires_in=math.inf))
    add("override rate nan/m", lambda: q.override_policy("api", rate_limit="nan/m"))
    add("override rate huge", lambda: q.override_policy("api", rate_limit=f"{BIG}/m"))
    add("policy queue surrogate", lambda: ConcurrencyPolicyDefinition(SURROGATE, max_active=1))
    add("policy max_active huge", lambda: ConcurrencyPolicyDefinition("x", max_active=BIG))
    add("sync namespace NUL", lambda: q.sync_concurrency_policies(NUL, []))
    add("sync namespace 10k", lambda: q.sync_concurrency_policies(HUGE, []))
    add("list policies NUL", lambda: q.list_concurrency_policies(NUL))
    add("list schedules surrogate", lambda: q.list_schedules(SURROGATE))
    add("schedule name NUL", lambda: ScheduleDefinition(NUL, "t", cron="* * * * *"))
    add("schedule every NaN", lambda: ScheduleDefinition("s", "t", every=NAN))
    add("schedule tz NUL", lambda: ScheduleDefinition("s", "t", cron="* * * * *", tz=NUL))
    add("schedule args NaN", lambda: q.sync_schedules("sweep", [
        ScheduleDefinition("s", "t", cron="* * * * *", args=[NAN])]))
    add("sync_schedules namespace surrogate", lambda: q.sync_schedules(SURROGATE, []))
    add("prune older_than NaN", lambda: q.prune_jobs(older_than=NAN))
    add("prune limit huge", lambda: q.prune_jobs(limit=BIG))
    add("claim queue NUL", lambda: q.claim(NUL, 1, 30))
    add("claim limit huge", lambda: q.claim("api", BIG, 30))
    add("claim lease NaN", lambda: q.claim("api", 1, NAN))
    add("complete id huge", lambda: q.complete(BIG, 1))
    add("fail id huge", lambda: q.fail(BIG, 1, {"type": "E", "message": "", "traceback": ""}))
    add("heartbeat id huge", lambda: q.heartbeat([(BIG, 1, 30.0)]))
    add("heartbeat lease NaN", lambda: q.heartbeat([(ready, 1, NAN)]))
    # AsyncQueue: the same operations, awaited.
    add("async cancel_jobs 2**70", lambda: aq_run(lambda aq: aq.cancel_jobs([BIG])))
    add("async list_jobs NUL", lambda: aq_run(lambda aq: aq.list_jobs(queue=NUL)))
    add("async enqueue task surrogate", lambda: aq_run(lambda aq: aq.enqueue(SURROGATE, ok)))
    add("async get_job 2**63", lambda: aq_run(lambda aq: aq.get_job(BEYOND)))
    add("async pause 10k", lambda: aq_run(lambda aq: aq.pause(HUGE)))
    # The app layer.
    add("App name NUL", lambda: App(NUL))
    add("App name surrogate", lambda: App(SURROGATE))
    add("app.queue 10k", lambda: app.queue(HUGE, max_active=1))
    add("app.task name surrogate", lambda: app.task(name=SURROGATE)(lambda: None))
    add("apply_async queue NUL", lambda: task.apply_async(args=(1,), queue=NUL))
    add("apply_async key 10k", lambda: task.apply_async(args=(1,), concurrency_key=HUGE))
    add("apply_async priority NaN", lambda: task.apply_async(args=(1,), priority=NAN))
    add("delay payload NaN", lambda: task.delay(NAN))
    add("delay payload nested", lambda: task.delay(_nested(5000)))
    add("key callable gives NUL", lambda: keyed.delay(NUL))
    add("key callable gives surrogate", lambda: keyed.delay(SURROGATE))
    add("send_task name NUL", lambda: app.send_task(NUL, args=[1]))
    add("app.cancel 2**70", lambda: app.cancel([BIG]))
    add("app.retry bool", lambda: app.retry([True]))
    add("app.get_job below bigint", lambda: app.get_job(BELOW))
    add("app.handle 2**70", lambda: app.handle(BIG))
    add("JobHandle 2**63", lambda: JobHandle(BEYOND, app))
    add("JobHandle(str)", lambda: JobHandle("1", app))  # type: ignore[arg-type]
    # Job keys (issue #27): each refused, typed, before anything is written.
    for label, bad in (("empty", ""), ("256", TOO_LONG), ("NUL", NUL), ("surrogate", SURROGATE),
                       ("int", 7)):
        add(f"EnqueueOptions job_key {label}", lambda bad=bad: EnqueueOptions(job_key=bad))
        add(f"apply_async job_key {label}", lambda bad=bad: task.apply_async((1,), job_key=bad))
    add("job_key_mode unknown", lambda: task.apply_async((1,), job_key="k", job_key_mode="merge"))
    add("job_key_mode None", lambda: EnqueueOptions(job_key="k", job_key_mode=None))  # type: ignore[arg-type]
    add("Unique by unknown", lambda: Unique(by=("args", "payload")))
    add("Unique by a str", lambda: Unique(by="args"))  # type: ignore[arg-type]
    add("Unique by empty", lambda: Unique(by=()))
    add("Unique period 0", lambda: Unique(period=0))
    add("Unique period '0s'", lambda: Unique(period="0s"))
    add("Unique period negative", lambda: Unique(period=-1))
    add("Unique period NaN", lambda: Unique(period=NAN))
    add("Unique period bool", lambda: Unique(period=True))
    add("Unique states unknown", lambda: Unique(states=("ready", "sleeping")))
    add("Unique keys without args", lambda: Unique(by=("queue",), keys=("n",)))
    add("Unique keys the task lacks", lambda: task.apply_async((1,), unique=Unique(keys=("m",))))
    add("unique not a Unique", lambda: EnqueueOptions(unique="args"))  # type: ignore[arg-type]
    add("idempotency_key and unique", lambda: task.apply_async(
        (1,), idempotency_key="i", unique=Unique()))
    add("idempotency_key and job_key", lambda: EnqueueOptions(idempotency_key="i", job_key="k"))
    add("unique and job_key", lambda: q.enqueue("sweep.task", ok, EnqueueOptions(
        unique=Unique(), job_key="k")))
    add("unique keys on a list payload", lambda: q.enqueue("sweep.task", [1], EnqueueOptions(
        unique=Unique(keys=("n",)))))
    add("app.task unique keys it lacks", lambda: app.task(name="sweep.u", unique=Unique(
        keys=("nope",)))(lambda n: None))
    return cases


def _wrong_outcomes(cases: Iterable[tuple[str, Callable[[], Any], type[BaseException]]]
                    ) -> list[str]:
    """The cases that did not raise their error type: another type, or nothing at all."""
    wrong = []
    for name, call, error in cases:
        try:
            got = call()
        except error:
            continue
        except Exception as exc:  # any other type is the failure looked for
            wrong.append(f"{name}: {type(exc).__module__}.{type(exc).__name__}: {exc!s:.100}")
        else:
            wrong.append(f"{name}: no error, got {got!r:.100}")
    return wrong


def test_the_public_api_refuses_bad_input_typed_and_writes_nothing(world, conn):
    q = Queue(conn)

    def aq_run(call: Callable[[AsyncQueue], Any]) -> Any:
        async def run() -> Any:
            async with await psycopg.AsyncConnection.connect(world["url"],
                                                             autocommit=True) as aconn:
                return await call(AsyncQueue(aconn))
        return asyncio.run(run())

    cases = _api_cases(world, q, aq_run)
    before = _state(world["url"])
    wrong = _wrong_outcomes((name, call, WorkhorseError) for name, call in cases)
    assert wrong == [], "\n".join(wrong)
    assert _state(world["url"]) == before
    assert q.get_job(world["ready"]).status.value == "ready"  # the connection still works


# ---- per-key limits as data (issue #41 item 2, docs/design.md "Per-key limits") ----------------

# The set the key-limit cases meet on queue "api": each bad call must leave it as it is (a call
# that wrote its good keys, pruned the others or cleared some before failing would show).
STORED = {"acme": KeyLimit(max_active=2), "7": KeyLimit(weight=3),
          "globex": KeyLimit(rate_limit="5/m")}
STORED_DEFAULT = KeyLimit(max_active=1)


def _key_limit_cases(q: Queue, aq_run: Callable[[Any], Any]
                     ) -> list[tuple[str, Callable[[], Any], type[Exception]]]:
    """(name, call, the error it must raise): InvalidPolicyError, or PolicyConflictError for
    another namespace's write."""
    cases: list[tuple[str, Callable[[], Any], type[Exception]]] = []

    def add(name: str, call: Callable[[], Any],
            error: type[Exception] = InvalidPolicyError) -> None:
        cases.append((name, call, error))

    for label, fields in (("max_active huge", {"max_active": BIG}),
                          ("max_active NaN", {"max_active": NAN}),
                          ("max_active inf", {"max_active": math.inf}),
                          ("max_active bool", {"max_active": True}),
                          ("max_active 0", {"max_active": 0}),
                          ("max_active negative", {"max_active": -1}),
                          ("max_active float", {"max_active": 1.5}),
                          ("max_active str", {"max_active": "3"}),
                          ("weight 1001", {"weight": 1001}), ("weight 0", {"weight": 0}),
                          ("weight NaN", {"weight": NAN}), ("weight bool", {"weight": True}),
                          ("weight float", {"weight": 1.5}), ("weight str", {"weight": "2"}),
                          ("weight huge", {"weight": BIG}),
                          ("rate nan/m", {"rate_limit": "nan/m"}),
                          ("rate huge", {"rate_limit": f"{BIG}/m"}),
                          ("rate 5000 digits", {"rate_limit": "9" * 5000 + "/m"}),
                          ("rate NUL", {"rate_limit": NUL}),
                          ("rate surrogate", {"rate_limit": "5/m\ud800"}),
                          ("rate an int", {"rate_limit": 5}),
                          ("rate bytes", {"rate_limit": b"5/m"}),
                          ("rate 0/s", {"rate_limit": "0/s"}),
                          ("rate 5/0s", {"rate_limit": "5/0s"}),
                          ("rate -1/m", {"rate_limit": "-1/m"}),
                          ("rate 5/infs", {"rate_limit": "5/infs"}),
                          ("rate 5/1e400s", {"rate_limit": "5/1e400s"}),
                          ("empty", {})):
        add(f"KeyLimit {label}", lambda fields=fields: KeyLimit(**fields))
    one = {"acme": KeyLimit(max_active=5)}  # a change of a stored key: written if anything is
    for label, bad in (("NUL", NUL), ("surrogate", SURROGATE), ("10k", HUGE),
                       ("256", TOO_LONG), ("empty", ""), ("bool", True), ("float", 1.5),
                       ("None", None), ("tuple", ("a",)), ("bytes", b"acme")):
        add(f"set_key_limits key {label}",
            lambda bad=bad: q.set_key_limits(None, "api", {bad: KeyLimit(max_active=1)}))
        add(f"set_key_limits a good key and key {label}",
            lambda bad=bad: q.set_key_limits(None, "api", {**one, bad: KeyLimit(max_active=1)}))
        add(f"set_key_limits prune=False, key {label}", lambda bad=bad: q.set_key_limits(
            None, "api", {**one, bad: KeyLimit(weight=1)}, prune=False))
        add(f"clear_key_limits key {label}", lambda bad=bad: q.clear_key_limits("api", [bad]))
        add(f"clear_key_limits a stored key and key {label}",
            lambda bad=bad: q.clear_key_limits("api", ["acme", bad]))
    add("set_key_limits key given twice (7 and '7')", lambda: q.set_key_limits(
        None, "api", {7: KeyLimit(max_active=1), "7": KeyLimit(max_active=2)}))
    add("set_key_limits 100,001 keys", lambda: q.set_key_limits(
        None, "api", {f"k{i}": KeyLimit(weight=1) for i in range(100_001)}))
    add("set_key_limits value an int", lambda: q.set_key_limits(None, "api", {"a": 3}))
    add("set_key_limits value None", lambda: q.set_key_limits(None, "api", {"a": None}))
    add("set_key_limits value a dict", lambda: q.set_key_limits(
        None, "api", {"a": {"max_active": 1}}))
    add("set_key_limits default an int",
        lambda: q.set_key_limits(None, "api", one, default=1))  # type: ignore[arg-type]
    add("set_key_limits default a dict", lambda: q.set_key_limits(
        None, "api", one, default={"max_active": 1}))  # type: ignore[arg-type]
    add("set_key_limits prune=False, default a str", lambda: q.set_key_limits(
        None, "api", one, default="1", prune=False))  # type: ignore[arg-type]
    add("set_key_limits limits a list",
        lambda: q.set_key_limits(None, "api", [("a", KeyLimit(weight=1))]))  # type: ignore[arg-type]
    add("set_key_limits limits None",
        lambda: q.set_key_limits(None, "api", None))  # type: ignore[arg-type]
    for label, bad in (("NUL", NUL), ("surrogate", SURROGATE), ("10k", HUGE), ("empty", ""),
                       ("int", 5)):
        add(f"set_key_limits namespace {label}", lambda bad=bad: q.set_key_limits(bad, "api", one))
        add(f"clear_key_limits namespace {label}",
            lambda bad=bad: q.clear_key_limits("api", ["acme"], namespace=bad))
    for label, bad in (("NUL", NUL), ("surrogate", SURROGATE), ("10k", HUGE), ("empty", ""),
                       ("None", None), ("int", 5)):
        add(f"set_key_limits queue {label}", lambda bad=bad: q.set_key_limits(None, bad, one))
        add(f"clear_key_limits queue {label}", lambda bad=bad: q.clear_key_limits(bad))
        add(f"key_limits queue {label}", lambda bad=bad: q.key_limits(bad))
    add("set_key_limits on a queue with no policy", lambda: q.set_key_limits(None, "nopolicy", one))
    add("set_key_limits by another namespace", lambda: q.set_key_limits("intruder", "api", one),
        PolicyConflictError)
    add("clear_key_limits by another namespace",
        lambda: q.clear_key_limits("api", namespace="intruder"), PolicyConflictError)
    add("clear_key_limits keys a str", lambda: q.clear_key_limits("api", "acme"))
    add("clear_key_limits keys bytes", lambda: q.clear_key_limits("api", b"acme"))
    add("clear_key_limits 100,001 keys",
        lambda: q.clear_key_limits("api", [f"k{i}" for i in range(100_001)]))
    add("clear_key_limits a generator with a bad key",
        lambda: q.clear_key_limits("api", (key for key in ["acme", SURROGATE])))
    add("key_limits key NUL", lambda: q.key_limits("api", key=NUL))
    add("key_limits key 10k", lambda: q.key_limits("api", key=HUGE))
    add("async set_key_limits key NUL", lambda: aq_run(
        lambda aq: aq.set_key_limits(None, "api", {**one, NUL: KeyLimit(max_active=1)})))
    add("async set_key_limits default an int",
        lambda: aq_run(lambda aq: aq.set_key_limits(None, "api", one, default=1)))
    add("async set_key_limits by another namespace",
        lambda: aq_run(lambda aq: aq.set_key_limits("intruder", "api", one)), PolicyConflictError)
    add("async clear_key_limits key surrogate",
        lambda: aq_run(lambda aq: aq.clear_key_limits("api", ["acme", SURROGATE])))
    add("async key_limits queue NUL", lambda: aq_run(lambda aq: aq.key_limits(NUL)))
    return cases


def _app_key_limit_cases(app: App, spec: Any) -> list[tuple[str, Callable[[], Any]]]:
    """Declarations `app.key_limits` refuses (InvalidPolicyError); `spec` is a queue of `app`'s
    with limits of its own."""
    cases: list[tuple[str, Callable[[], Any]]] = []
    for label, bad in (("NUL", NUL), ("surrogate", SURROGATE), ("10k", HUGE),
                       ("1001", "k" * 1001), ("empty", ""), ("bool", True), ("float", 1.5),
                       ("None", None)):
        cases.append((f"app.key_limits key {label}", lambda bad=bad: app.key_limits(
            spec, {"acme": KeyLimit(max_active=1), bad: KeyLimit(max_active=1)})))
    for label, bad in (("NUL", NUL), ("surrogate", SURROGATE), ("10k", HUGE), ("empty", ""),
                       ("None", None), ("int", 5)):
        cases.append((f"app.key_limits queue {label}",
                       lambda bad=bad: app.key_limits(bad, {"a": KeyLimit(max_active=1)})))
    cases += [
        ("app.key_limits key given twice",
         lambda: app.key_limits(spec, {7: KeyLimit(max_active=1), "7": KeyLimit(weight=2)})),
        ("app.key_limits value an int", lambda: app.key_limits(spec, {"a": 3})),
        ("app.key_limits default an int",
         lambda: app.key_limits(spec, {}, default=1)),  # type: ignore[arg-type]
        ("app.key_limits a list", lambda: app.key_limits(
            spec, [("a", KeyLimit(max_active=1))])),  # type: ignore[arg-type]
        ("app.key_limits 100,001 keys", lambda: app.key_limits(
            spec, {f"k{i}": KeyLimit(weight=1) for i in range(100_001)})),
    ]
    return cases


@pytest.fixture
def stored_key_limits(world: dict[str, Any], queue: Queue) -> None:
    queue.set_key_limits("sweep", "api", STORED, default=STORED_DEFAULT)


@pytest.mark.usefixtures("stored_key_limits")
def test_key_limit_input_is_refused_typed_and_writes_nothing(world, conn):
    q = Queue(conn)

    def aq_run(call: Callable[[AsyncQueue], Any]) -> Any:
        async def run() -> Any:
            async with await psycopg.AsyncConnection.connect(world["url"],
                                                             autocommit=True) as aconn:
                return await call(AsyncQueue(aconn))
        return asyncio.run(run())

    before = _state(world["url"])
    wrong = _wrong_outcomes(_key_limit_cases(q, aq_run))
    assert wrong == [], "\n".join(wrong)
    assert _state(world["url"]) == before
    stored = q.key_limits("api")
    assert stored is not None and (stored.limits, stored.default) == (STORED, STORED_DEFAULT)


def test_app_key_limits_refuses_bad_declarations_and_keeps_the_last_good_one(world):
    app = App("sweep-kl")  # declarations only: nothing is connected to
    spec = app.queue("kq", max_active=5, max_active_per_key=1)
    app.key_limits(spec, {"acme": KeyLimit(max_active=3)}, default=KeyLimit(max_active=1))
    declared = dict(app.declared_key_limits)
    wrong = []
    for name, call in _app_key_limit_cases(app, spec):
        try:
            got = call()
        except InvalidPolicyError:
            if app.declared_key_limits != declared:
                wrong.append(f"{name}: the declaration changed: {app.declared_key_limits!r:.100}")
            continue
        except Exception as exc:
            wrong.append(f"{name}: {type(exc).__module__}.{type(exc).__name__}: {exc!s:.100}")
        else:
            wrong.append(f"{name}: no error, got {got!r:.100}")
    assert wrong == [], "\n".join(wrong)


def test_a_sync_with_key_limits_on_a_queue_without_limits_writes_nothing(world):
    before = _state(world["url"])
    app = App("sweep-kl", world["url"])
    try:
        app.queue("kq", max_active=5, max_active_per_key=1)
        app.key_limits("plain", {"acme": KeyLimit(max_active=1)})
        with pytest.raises(InvalidPolicyError, match="no limits of the queue's own"):
            app.sync()
    finally:
        app.close()
    assert _state(world["url"]) == before  # not even kq's policy


@pytest.mark.parametrize("keys", [5, object()], ids=["int", "object"])
@pytest.mark.usefixtures("stored_key_limits")
def test_clear_key_limits_keys_not_iterable_is_refused_typed(world, conn, keys):
    before = _state(world["url"])
    try:
        with pytest.raises(InvalidPolicyError):
            Queue(conn).clear_key_limits("api", keys)
    finally:
        assert _state(world["url"]) == before


# ---- signals (docs/design.md "Signals"): Queue.signal, AsyncQueue.signal, app.signal ----------

# Names and keys PostgreSQL cannot store: the durable owner's check_step_name/check_signal_key
# (workhorse/_ops/durable.py) check only type and length, so these reach the database.
_UNSTORABLE = (("NUL", NUL), ("surrogate", SURROGATE))


def _signal_cases(world: dict[str, Any], q: Queue | None, aq_run: Callable[[Any], Any] | None
                  ) -> list[tuple[str, Callable[[], Any]]]:
    """Each refused typed (a WorkhorseError: InvalidOptionsError, PayloadError) and before
    anything is written; `world["ready"]` is a live job that could take a signal."""
    app, ready = world["app"], world["ready"]
    cases: list[tuple[str, Callable[[], Any]]] = []
    senders: list[tuple[str, Callable[..., Any]]] = [
        ("Queue.signal", lambda *a, **k: q.signal(*a, **k)),  # type: ignore[union-attr]
        ("app.signal", lambda *a, **k: app.signal(*a, **k)),
        ("AsyncQueue.signal", lambda *a, **k: aq_run(  # type: ignore[misc]
            lambda aq: aq.signal(*a, **k))),
    ]
    for label, send in senders:
        def add(name: str, *args: Any, send: Callable[..., Any] = send, label: str = label,
                **kwargs: Any) -> None:
            cases.append((f"{label} {name}", lambda: send(*args, **kwargs)))

        for id_label, bad in (("2**70", BIG), ("2**63", BEYOND), ("below bigint", BELOW),
                              ("bool", True), ("float", 1.0), ("str", "1"), ("NaN", NAN),
                              ("None", None), ("unknown", 10**12)):
            add(f"id {id_label}", bad, "approval")
        for name_label, bad in (("empty", ""), ("201", "s" * 201), ("10k", HUGE), ("int", 7),
                                ("None", None), ("bytes", b"approval")):
            add(f"name {name_label}", ready, bad)
        for key_label, bad in (("256", "k" * 256), ("empty", ""), ("int", 7),
                               ("bytes", b"k")):
            add(f"key {key_label}", ready, "approval", key=bad)
        for payload_label, bad in (("object", object()), ("NaN", NAN), ("inf", math.inf),
                                   ("nested 100k", _nested(100_000)), ("NUL", {"x": "\x00"}),
                                   ("surrogate", {"x": "\udfff"}),
                                   ("over 1 MiB", "x" * (1024 * 1024 + 1))):
            add(f"payload {payload_label}", ready, "approval", payload=bad)
    return cases


def _unstorable_signal_cases(world: dict[str, Any], q: Queue
                             ) -> list[tuple[str, Callable[[], Any]]]:
    app, ready = world["app"], world["ready"]
    cases: list[tuple[str, Callable[[], Any]]] = []
    for label, bad in _UNSTORABLE:
        cases.append((f"Queue.signal name {label}", lambda bad=bad: q.signal(ready, bad)))
        cases.append((f"app.signal name {label}", lambda bad=bad: app.signal(ready, bad)))
        cases.append((f"Queue.signal key {label}",
                      lambda bad=bad: q.signal(ready, "approval", key=bad)))
    return cases


def _aq_runner(url: str) -> Callable[[Callable[[AsyncQueue], Any]], Any]:
    def aq_run(call: Callable[[AsyncQueue], Any]) -> Any:
        async def run() -> Any:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
                return await call(AsyncQueue(aconn))
        return asyncio.run(run())
    return aq_run


def test_signals_refuse_bad_input_typed_and_write_nothing(world, conn):
    cases = _signal_cases(world, Queue(conn), _aq_runner(world["url"]))
    before = _state(world["url"])
    wrong = _wrong_outcomes((name, call, WorkhorseError) for name, call in cases)
    assert wrong == [], "\n".join(wrong)
    assert _state(world["url"]) == before
    assert Queue(conn).signal(world["ready"], "approval")  # a good one is taken


def test_signal_names_and_keys_postgresql_cannot_store_are_refused_typed(world, conn):
    before = _state(world["url"])
    wrong = _wrong_outcomes((name, call, WorkhorseError)
                            for name, call in _unstorable_signal_cases(world, Queue(conn)))
    assert _state(world["url"]) == before
    assert wrong == [], "\n".join(wrong)


_CLI_CASES: list[tuple[str, list[str]]] = [
    ("jobs show 2**70", ["jobs", "show", str(BIG)]),
    ("jobs show below bigint", ["jobs", "show", str(BELOW)]),
    ("jobs cancel 2**70", ["jobs", "cancel", "1", str(BIG)]),
    ("jobs cancel 2**63", ["jobs", "cancel", str(BEYOND)]),
    ("jobs retry 2**63", ["jobs", "retry", str(BEYOND)]),
    ("jobs retry NaN", ["jobs", "retry", "nan"]),
    ("jobs list --queue surrogate", ["jobs", "list", "--queue", SURROGATE]),
    ("jobs list --queue NUL", ["jobs", "list", "--queue", NUL]),
    ("jobs list --key 10k", ["jobs", "list", "--key", HUGE]),
    ("jobs list --task surrogate", ["jobs", "list", "--task", SURROGATE]),
    ("jobs list --limit huge", ["jobs", "list", "--limit", str(BIG)]),
    ("jobs list --status bogus", ["jobs", "list", "--status", "bogus"]),
    ("queues pause surrogate", ["queues", "pause", SURROGATE]),
    ("queues pause 10k", ["queues", "pause", HUGE]),
    ("queues resume NUL", ["queues", "resume", NUL]),
    ("policies override 10k", ["policies", "override", HUGE, "--max-active", "1"]),
    ("policies override --rate-limit nan/m", ["policies", "override", "api", "--rate-limit",
                                              "nan/m"]),
    ("policies override --for nan", ["policies", "override", "api", "--max-active", "1",
                                     "--for", "nan"]),
    ("policies override --max-active huge", ["policies", "override", "api", "--max-active",
                                             str(BIG)]),
    ("policies clear-override surrogate", ["policies", "clear-override", SURROGATE]),
    ("policies --namespace NUL", ["policies", "--namespace", NUL]),
    ("policies override --rate-burst huge", ["policies", "override", "api", "--rate-burst",
                                             str(BIG)]),
    ("budgets override 10k", ["budgets", "override", HUGE, "--max-active", "1"]),
    ("budgets override surrogate", ["budgets", "override", SURROGATE, "--max-active", "1"]),
    ("budgets override --rate-limit nan/m", ["budgets", "override", "b", "--rate-limit",
                                             "nan/m"]),
    ("budgets override --rate-burst 0", ["budgets", "override", "b", "--rate-burst", "0"]),
    ("budgets override burst, no rate", ["budgets", "override", "b", "--rate-burst", "1"]),
    ("budgets clear-override NUL", ["budgets", "clear-override", NUL]),
    ("schedules --namespace 10k", ["schedules", "--namespace", HUGE]),
    ("jobs retry --held --queue 10k", ["jobs", "retry", "--held", "--queue", HUGE]),
    ("jobs prune --older-than nan", ["jobs", "prune", "--older-than", "nan"]),
    ("jobs prune --older-than inf", ["jobs", "prune", "--older-than", "inf"]),
    ("keys set queue NUL", ["keys", "set", NUL, "acme", "--max-active", "1"]),
    ("keys set key surrogate", ["keys", "set", "api", SURROGATE, "--max-active", "1"]),
    ("keys set key 10k", ["keys", "set", "api", HUGE, "--max-active", "1"]),
    ("keys set --max-active huge", ["keys", "set", "api", "acme", "--max-active", str(BIG)]),
    ("keys set --weight 1001", ["keys", "set", "api", "acme", "--weight", "1001"]),
    ("keys set --rate-limit nan/m", ["keys", "set", "api", "acme", "--rate-limit", "nan/m"]),
    ("keys set no limit", ["keys", "set", "api", "acme"]),
    ("keys clear key NUL", ["keys", "clear", "api", NUL]),
    ("keys list queue 10k", ["keys", "list", HUGE]),
    ("keys set --max-active 0", ["keys", "set", "api", "acme", "--max-active", "0"]),
    ("keys set --weight 0", ["keys", "set", "api", "acme", "--weight", "0"]),
    ("keys set --rate-limit 5/0s", ["keys", "set", "api", "acme", "--rate-limit", "5/0s"]),
    ("keys set key 1001", ["keys", "set", "api", "k" * 1001, "--max-active", "1"]),
    ("keys set a good key and key NUL", ["keys", "set", "api", "acme", NUL, "--max-active", "9"]),
    ("keys set --default and a key", ["keys", "set", "api", "acme", "--default",
                                      "--max-active", "1"]),
    ("keys set no key", ["keys", "set", "api", "--max-active", "1"]),
    ("keys set queue empty", ["keys", "set", "", "acme", "--max-active", "1"]),
    ("keys set on a queue with no policy", ["keys", "set", "nopolicy", "acme",
                                            "--max-active", "1"]),
    ("keys clear no key", ["keys", "clear", "api"]),
    ("keys clear --all and a key", ["keys", "clear", "api", "acme", "--all"]),
    ("keys clear a stored key and key surrogate", ["keys", "clear", "api", "acme", SURROGATE]),
    ("keys list --key NUL", ["keys", "list", "api", "--key", NUL]),
    # Signals (docs/design.md "Signals"): job 1 is the world's ready job.
    ("jobs signal 2**70", ["jobs", "signal", str(BIG), "approval"]),
    ("jobs signal 2**63", ["jobs", "signal", str(BEYOND), "approval"]),
    ("jobs signal below bigint", ["jobs", "signal", str(BELOW), "approval"]),
    ("jobs signal id NaN", ["jobs", "signal", "nan", "approval"]),
    ("jobs signal unknown job", ["jobs", "signal", str(10**12), "approval"]),
    ("jobs signal name empty", ["jobs", "signal", "1", ""]),
    ("jobs signal name 201", ["jobs", "signal", "1", "s" * 201]),
    ("jobs signal name 10k", ["jobs", "signal", "1", HUGE]),
    ("jobs signal name NUL", ["jobs", "signal", "1", NUL]),
    ("jobs signal name surrogate", ["jobs", "signal", "1", SURROGATE]),
    ("jobs signal --key 256", ["jobs", "signal", "1", "approval", "--key", "k" * 256]),
    ("jobs signal --key NUL", ["jobs", "signal", "1", "approval", "--key", NUL]),
    ("jobs signal --key empty", ["jobs", "signal", "1", "approval", "--key", ""]),
    ("jobs signal --payload not JSON", ["jobs", "signal", "1", "approval", "--payload", "{x"]),
    ("jobs signal --payload NaN", ["jobs", "signal", "1", "approval", "--payload", "NaN"]),
    ("jobs signal --payload NUL", ["jobs", "signal", "1", "approval", "--payload",
                                   '"\\u0000"']),
    ("jobs signal --payload lone surrogate", ["jobs", "signal", "1", "approval", "--payload",
                                              '"\\ud800"']),
    ("jobs signal --payload 100k deep", ["jobs", "signal", "1", "approval", "--payload",
                                         "[" * 100_000 + "]" * 100_000]),
]


@pytest.mark.usefixtures("stored_key_limits")
def test_the_cli_refuses_bad_input_in_one_line_and_writes_nothing(world):
    url = world["url"]
    before = _state(url)
    wrong = []
    for name, args in _CLI_CASES:
        result = CliRunner().invoke(main, ["--database-url", url, *args])
        lines = (result.stderr or result.output).strip().splitlines()
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            wrong.append(f"{name}: raised {type(result.exception).__name__}: "
                         f"{result.exception!s:.100}")
        elif result.exit_code not in (1, 2):
            wrong.append(f"{name}: exit {result.exit_code}: {result.output[:100]}")
        elif "Traceback" in result.output or "database error" in result.output:
            wrong.append(f"{name}: {lines[-1][:150] if lines else ''}")
        elif result.exit_code == 1 and len(lines) != 1:
            wrong.append(f"{name}: {len(lines)} lines: {result.output[:200]}")
    assert wrong == [], "\n".join(wrong)
    assert _state(url) == before


def test_a_real_cli_process_refuses_a_name_that_is_not_utf8(world):
    """A byte string that is not UTF-8 on the command line becomes a lone surrogate in
    Python (surrogateescape): one line, exit 1, nothing written."""
    before = _state(world["url"])
    done = subprocess.run([sys.executable.encode(), b"-m", b"workhorse", b"--database-url",
                           world["url"].encode(), b"queues", b"pause", b"caf\xe9"],
                          capture_output=True, timeout=60)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 1, stderr
    assert len(stderr.strip().splitlines()) == 1 and "surrogate" in stderr, stderr
    assert _state(world["url"]) == before


def _dashboard_cases(ready: int) -> list[tuple[str, str, str, dict[str, Any], set[int]]]:
    """(name, method, path, form, acceptable statuses); the form's csrf is filled in."""
    long_ids = [str(i) for i in range(1, 10_002)]
    return [
        ("queue NUL", "GET", "/queue?name=a%00b", {}, {400}),
        ("queue 300", "GET", "/queue?name=" + "q" * 300, {}, {400}),
        ("queue 10k", "GET", "/queue?name=" + HUGE, {}, {400}),
        ("queue empty", "GET", "/queue?name=", {}, {400}),
        ("queue blank", "GET", "/queue?name=%20%20", {}, {400}),
        ("queue live NUL", "GET", "/queue?name=%00&live=1", {}, {400}),
        ("jobs key NUL", "GET", "/jobs?key=a%00b", {}, {400}),
        ("jobs queue 10k", "GET", "/jobs?queue=" + HUGE, {}, {400}),
        ("jobs task NUL", "GET", "/jobs?task=%00", {}, {400}),
        ("jobs status bogus", "GET", "/jobs?status=bogus", {}, {400}),
        ("jobs status NUL", "GET", "/jobs?status=%00", {}, {400}),
        ("jobs id 2**70", "GET", f"/jobs?id={BIG}", {}, {400}),
        ("jobs id NaN", "GET", "/jobs?id=NaN", {}, {400}),
        ("jobs id superscript", "GET", "/jobs?id=%C2%B2", {}, {400}),
        ("jobs id negative", "GET", "/jobs?id=-1", {}, {400}),
        ("jobs before 2**63", "GET", f"/jobs?before={BEYOND}", {}, {400}),
        ("jobs live and NUL", "GET", "/jobs?key=%00&live=1", {}, {400}),
        ("job 2**70", "GET", f"/jobs/{BIG}", {}, {404}),
        ("job 40 digits", "GET", "/jobs/" + "9" * 40, {}, {404}),
        ("job not a number", "GET", "/jobs/NaN", {}, {404, 405}),
        ("job 5000 digits", "GET", "/jobs/" + "9" * 5000, {}, {404}),
        ("jobs id 5000 digits", "GET", "/jobs?id=" + "9" * 5000, {}, {400}),
        ("jobs before 5000 digits", "GET", "/jobs?before=" + "9" * 5000, {}, {400}),
        ("reveal 5000 digits", "POST", "/jobs/" + "9" * 5000 + "/reveal", {}, {303, 404}),
        ("cancel 5000 digits", "POST", "/jobs/cancel", {"id": "9" * 5000}, {400}),
        ("static traversal", "GET", "/static/../../../etc/passwd", {}, {404}),
        ("static missing", "GET", "/static/%00", {}, {404}),
        ("overview POST", "POST", "/", {}, {405}),
        ("workers POST", "POST", "/workers", {}, {405}),
        ("schedules POST", "POST", "/schedules", {}, {405}),
        ("pause NUL", "POST", "/queue/pause", {"queue": NUL}, {400}),
        ("pause 10k", "POST", "/queue/pause", {"queue": HUGE}, {400}),
        ("pause missing queue", "POST", "/queue/pause", {}, {400}),
        ("resume 300", "POST", "/queue/resume", {"queue": "q" * 300}, {400}),
        ("clear-override NUL", "POST", "/queue/clear-override", {"queue": NUL}, {400}),
        ("override max_active NaN", "POST", "/queue/override",
         {"queue": "api", "max_active": "NaN"}, {400}),
        ("override max_active huge", "POST", "/queue/override",
         {"queue": "api", "max_active": str(BIG)}, {400}),
        ("override max_active 5000 digits", "POST", "/queue/override",
         {"queue": "api", "max_active": "9" * 5000}, {400}),
        ("override for nan", "POST", "/queue/override",
         {"queue": "api", "max_active": "1", "for": "nan"}, {400}),
        ("override rate nan/m", "POST", "/queue/override",
         {"queue": "api", "rate_limit": "nan/m"}, {400}),
        ("override rate huge", "POST", "/queue/override",
         {"queue": "api", "rate_limit": f"{BIG}/m"}, {400}),
        ("queue verb unknown", "POST", "/queue/drop", {"queue": "api"}, {404}),
        ("cancel 2**70", "POST", "/jobs/cancel", {"id": [str(ready), str(BIG)]}, {400}),
        ("cancel NaN", "POST", "/jobs/cancel", {"id": "NaN"}, {400}),
        ("cancel negative", "POST", "/jobs/cancel", {"id": "-1"}, {400}),
        ("retry superscript", "POST", "/jobs/retry", {"id": "²"}, {400}),
        ("retry 10,001 ids", "POST", "/jobs/retry", {"id": long_ids}, {400}),
        ("jobs verb unknown", "POST", "/jobs/drop", {"id": str(ready)}, {404}),
        ("reveal 2**70", "POST", f"/jobs/{BIG}/reveal", {"token": TOKEN}, {303, 404}),
        # Issue #32: a queue that has no policy, no control and no job is refused (never
        # created); bulk actions on everything matching take the Jobs page's filters.
        ("queue typo", "GET", "/queue?name=no-such-queue", {}, {404}),
        ("pause typo", "POST", "/queue/pause", {"queue": "no-such-queue"}, {404}),
        ("override typo", "POST", "/queue/override",
         {"queue": "no-such-queue", "max_active": "1"}, {404}),
        ("jobs queue substring surrogate", "GET", "/jobs?queue=%ED%A0%80", {}, {200, 400}),
        ("retry all, status bogus", "POST", "/jobs/retry", {"match": "all", "status": "bogus"},
         {400}),
        ("retry all, queue NUL", "POST", "/jobs/retry", {"match": "all", "queue": NUL}, {400}),
        ("cancel all, task 10k", "POST", "/jobs/cancel", {"match": "all", "task": HUGE},
         {400}),
        ("cancel all, key NUL", "POST", "/jobs/cancel", {"match": "all", "key": NUL}, {400}),
        ("cancel all, id NaN", "POST", "/jobs/cancel", {"match": "all", "id": "NaN"}, {400}),
    ]


def _refusals(client: TestClient, cases: list[tuple[str, str, str, dict[str, Any], set[int]]],
              csrf: str) -> list[str]:
    wrong = []
    for name, method, path, form, statuses in cases:
        if method == "GET":
            response = client.get(path, follow_redirects=False)
        else:
            response = client.post(path, data={**form, "csrf": csrf}, follow_redirects=False)
        if response.status_code not in statuses:
            wrong.append(f"{name}: {response.status_code} {response.text[:120]!r}")
        elif response.status_code == 400 and not response.text.strip():
            wrong.append(f"{name}: 400 without a message")
    return wrong


# Every action route with a forged or NUL CSRF token, or the right one from another origin.
_CSRF_CASES = [(path, form, headers, sent)
               for path, form in (("/queue/pause", {"queue": "api"}),
                                  ("/queue/override", {"queue": "api", "max_active": "1"}),
                                  ("/jobs/cancel", {"id": "1"}), ("/jobs/retry", {"id": "2"}),
                                  ("/logout", {}))
               for headers, sent in (({}, "forged"), ({}, NUL),
                                     ({"Origin": "http://evil.example"}, None))]
# With a token (and --redact): bad tokens on the login form and in a bearer header.
_LOGIN_CASES = [("login 10k token", {"token": HUGE}, 401),
                ("login NUL token", {"token": NUL}, 401),
                ("login no csrf", {"token": TOKEN, "csrf": ""}, 403)]
_BEARER_PATHS = ["/", "/workers", "/schedules", "/jobs/1?reveal=1"]


def test_every_dashboard_route_refuses_bad_input_with_a_4xx_and_writes_nothing(world):
    url = world["url"]
    before = _state(url)
    with TestClient(create_app(url)) as client:
        csrf = re.search(r'data-csrf="([^"]+)"', client.get("/").text).group(1)
        wrong = _refusals(client, _dashboard_cases(world["ready"]), csrf)
        for path, form, headers, sent in _CSRF_CASES:
            response = client.post(path, data={**form, "csrf": csrf if sent is None else sent},
                                   headers=headers, follow_redirects=False)
            if response.status_code != 403:
                wrong.append(f"{path} csrf={sent!r:.10} {headers}: {response.status_code}")
    with TestClient(create_app(url, token=TOKEN, redact=True)) as client:
        login_csrf = re.search(r'data-csrf="([^"]+)"', client.get("/login").text).group(1)
        for name, form, status in _LOGIN_CASES:
            response = client.post("/login", data={"csrf": login_csrf, **form},
                                   follow_redirects=False)
            if response.status_code != status:
                wrong.append(f"{name}: {response.status_code}")
        for path in _BEARER_PATHS:
            response = client.get(path, headers={"Authorization": "Bearer " + "x" * 40})
            if response.status_code not in (401, 429):
                wrong.append(f"bearer {path}: {response.status_code}")
    assert wrong == [], "\n".join(wrong)
    assert _state(url) == before


def test_awkward_but_valid_names_work_and_are_shown_literally(world, conn):
    url = world["url"]
    q = Queue(conn)
    ids = {}
    for name in AWKWARD:
        ids[name] = q.enqueue(name, {"args": [name], "kwargs": {}},
                              EnqueueOptions(queue=name, concurrency_key=name,
                                             idempotency_key=name))
        q.sync_concurrency_policies(name, [ConcurrencyPolicyDefinition(name, max_active=2)])
        assert q.pause(name).paused
    for name, job_id in ids.items():
        job = q.get_job(job_id)
        assert (job.task, job.queue, job.concurrency_key, job.payload["args"]) == (
            name, name, name, [name])
        assert [j.id for j in q.list_jobs(queue=name, key=name, task=name)] == [job_id]
        assert [p.queue for p in q.list_concurrency_policies(name)] == [name]
    assert {s.queue for s in q.list_queues()} >= set(AWKWARD)
    assert {p.queue for p in q.health().policies if p.paused} >= set(AWKWARD)
    # The CLI's JSON gives them back whole and exact.
    for name, job_id in ids.items():
        shown = CliRunner().invoke(main, ["--database-url", url, "jobs", "show", str(job_id),
                                          "--json"])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["queue"] == name
        listed = CliRunner().invoke(main, ["--database-url", url, "jobs", "list", "--queue",
                                           name, "--key", name, "--json"])
        assert [j["id"] for j in json.loads(listed.stdout)] == [job_id], listed.output
        resumed = CliRunner().invoke(main, ["--database-url", url, "queues", "resume", name,
                                            "--json"])
        assert resumed.exit_code == 0 and json.loads(resumed.stdout)["queue"] == name
    queues = json.loads(CliRunner().invoke(main, ["--database-url", url, "queues",
                                                  "--json"]).stdout)
    assert {row["queue"] for row in queues} >= set(AWKWARD)
    # The dashboard: escaped everywhere, never markup; actions on them work.
    with TestClient(create_app(url)) as client:
        csrf = re.search(r'data-csrf="([^"]+)"', client.get("/").text).group(1)
        pages = ["/", "/jobs"]
        for name, job_id in ids.items():
            pages += [f"/queue?{_query(name=name)}", f"/jobs/{job_id}",
                      f"/jobs?{_query(queue=name, key=name, task=name)}"]
            response = client.post("/queue/pause", data={"queue": name, "csrf": csrf},
                                   follow_redirects=False)
            assert response.status_code == 303, (name, response.text)
        for path in pages:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text[:300])
            html = response.text
            assert "<script>alert(1)</script>" not in html, path
        for name, job_id in ids.items():
            detail = client.get(f"/jobs/{job_id}").text
            assert str(escape(name)) in detail, name
            queue_page = client.get(f"/queue?{_query(name=name)}").text
            assert str(escape(name)) in queue_page, name
            listed = client.get(f"/jobs?{_query(queue=name, key=name, task=name)}").text
            assert f'data-job="{job_id}"' in listed, name
    assert {p.queue for p in q.health().policies if p.paused} >= set(AWKWARD)


def test_awkward_but_valid_keys_keep_their_limits_literally(world, conn):
    """Per-key limits on keys named with markup, quotes, SQL, right-to-left text: stored and
    read back exactly (API, `keys list --json`), shown escaped by the dashboard, cleared by
    name."""
    url = world["url"]
    q = Queue(conn)
    limits = {name: KeyLimit(max_active=n + 1) for n, name in enumerate(AWKWARD)}
    assert sorted(q.set_key_limits("sweep", "api", limits).created) == sorted(["", *AWKWARD])
    stored = q.key_limits("api")
    assert stored is not None and stored.limits == limits
    for name in AWKWARD:
        one = q.key_limits("api", key=name)
        assert one is not None and one.limits == {name: limits[name]}
    listed = CliRunner().invoke(main, ["--database-url", url, "keys", "list", "api", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {key: row["max_active"] for key, row in json.loads(listed.stdout)["limits"].items()
            } == {name: limit.max_active for name, limit in limits.items()}
    with TestClient(create_app(url)) as client:
        html = client.get(f"/queue?{_query(name='api')}").text
    assert "<script>alert(1)</script>" not in html
    assert all(str(escape(name)) in html for name in AWKWARD), html[:300]
    assert sorted(q.clear_key_limits("api", AWKWARD).pruned) == sorted(AWKWARD)
    stored = q.key_limits("api")
    assert stored is not None and stored.limits == {}


def _query(**params: str) -> str:
    from urllib.parse import urlencode

    return urlencode(params)


def test_the_sweep_has_at_least_80_cases():
    stub: dict[str, Any] = {"app": None, "task": None, "keyed": None, "ready": 1}
    counts = {
        "api": len(_api_cases(stub, None, None)),  # type: ignore[arg-type]
        "key limits": (len(_key_limit_cases(None, None))  # type: ignore[arg-type]
                       + len(_app_key_limit_cases(None, None))),  # type: ignore[arg-type]
        "cli": len(_CLI_CASES) + 1,  # and the real process with a non-UTF-8 name
        "signals": len(_signal_cases(stub, None, None)),
        "dashboard": (len(_dashboard_cases(1)) + len(_CSRF_CASES) + len(_LOGIN_CASES)
                      + len(_BEARER_PATHS)),
    }
    assert counts["api"] >= 80 and counts["cli"] >= 20 and counts["dashboard"] >= 40, counts
    assert counts["key limits"] >= 100, counts
    assert sum(counts.values()) >= 80


def _durable_state(url: str) -> tuple[Any, ...]:
    """What a step call may write: the steps, the signals, the jobs (children) and their tags."""
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(conn.execute(
            "SELECT (SELECT count(*) || md5(coalesce(string_agg(s::text, ',' ORDER BY s::text),"
            " '')) FROM workhorse.job_steps s),"
            " (SELECT count(*) FROM workhorse.job_signals),"
            " (SELECT count(*) FROM workhorse.jobs),"
            " (SELECT count(*) FROM workhorse.job_tags)").fetchone() or ())


def test_durable_steps_refuse_bad_input_typed_and_write_nothing(database_url: str) -> None:
    """Inside a running job (docs/design.md "Durable execution"): each bad step call raises its
    own typed error before anything is written: names (empty, 201 characters, NUL, a
    surrogate, not a str, used twice in one run), durations, a naive datetime, results that are
    not JSON, retry policies, children that are no signatures or of another app's task, signal
    names; the job then goes on."""
    import datetime as dt

    from workhorse import InvalidOptionsError, PayloadError, current_job
    from workhorse.retry import RetryPolicy
    from workhorse.testing import drain

    app = App("sweep-durable", database_url)
    other = App("sweep-other", database_url)

    @other.task
    def foreign() -> None:
        return None

    @app.task
    def kid() -> int:
        return 1

    outcomes: list[str] = []

    @app.task(max_attempts=1)
    def durable() -> str:
        step = current_job().step
        step.run("good", lambda: 1)
        cases: list[tuple[str, Callable[[], Any], type[WorkhorseError]]] = [
            ("run name empty", lambda: step.run("", lambda: 1), InvalidOptionsError),
            ("run name 201", lambda: step.run("s" * 201, lambda: 1), InvalidOptionsError),
            ("run name NUL", lambda: step.run(NUL, lambda: 1), InvalidOptionsError),
            ("run name surrogate", lambda: step.run(SURROGATE, lambda: 1), InvalidOptionsError),
            ("run name int", lambda: step.run(7, lambda: 1), InvalidOptionsError),
            ("run name used twice", lambda: step.run("good", lambda: 2), InvalidOptionsError),
            ("run result object", lambda: step.run("obj", object), PayloadError),
            ("run result NaN", lambda: step.run("nan", lambda: math.nan), PayloadError),
            ("run result over 1 MiB", lambda: step.run("big", lambda: "x" * (1 << 20)),
             PayloadError),
            ("run retry not a policy", lambda: step.run("r", lambda: 1, retry=3),
             InvalidOptionsError),
            ("RetryPolicy max_attempts 0", lambda: RetryPolicy(max_attempts=0),
             InvalidOptionsError),
            ("RetryPolicy retry_on not types", lambda: RetryPolicy(retry_on=("E",)),  # type: ignore[arg-type]
             InvalidOptionsError),
            ("sleep bad duration", lambda: step.sleep("s1", "soon"), InvalidOptionsError),
            ("sleep negative", lambda: step.sleep("s2", -1), InvalidOptionsError),
            ("sleep 400 days", lambda: step.sleep("s3", "400d"), InvalidOptionsError),
            ("sleep naive datetime", lambda: step.sleep("s4", dt.datetime(2030, 1, 1)),
             InvalidOptionsError),
            ("wait signal empty", lambda: step.wait_for("w1", signal=""), InvalidOptionsError),
            ("wait signal 201", lambda: step.wait_for("w2", signal="s" * 201),
             InvalidOptionsError),
            ("wait timeout bad", lambda: step.wait_for("w3", signal="go", timeout="later"),
             InvalidOptionsError),
            ("children empty", lambda: step.children("c1", []), InvalidOptionsError),
            ("children not signatures", lambda: step.children("c2", ["kid"]),
             InvalidOptionsError),
            ("children a str", lambda: step.children("c3", "kid"), InvalidOptionsError),
            ("child of another app's task", lambda: step.child("c4", foreign.s()),
             InvalidOptionsError),
            ("children one of another app's task",
             lambda: step.children("c5", [kid.s(), foreign.s()]), InvalidOptionsError),
        ]
        for label, call, expected in cases:
            before = _durable_state(database_url)
            try:
                call()
            except expected:
                pass
            except BaseException as exc:  # any other outcome is the finding
                outcomes.append(f"{label}: {type(exc).__name__}: {exc}")
            else:
                outcomes.append(f"{label}: no error")
            if _durable_state(database_url) != before:
                outcomes.append(f"{label}: wrote something")
        return "went on"

    handle = durable.delay()
    drain(app, timeout=30)
    assert outcomes == []
    assert handle.get(timeout=5) == "went on"
    assert [s.name for s in handle.steps()] == ["good"]
