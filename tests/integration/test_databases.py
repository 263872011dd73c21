"""Several databases (issue #44, docs/design.md "Several databases"), the app's side, on two real
databases of the test server: the test's fixture database (`default`) and a second fresh copy of
the template (`eu`), each read directly (its own connection) to see where every row went.

- Placement by `app.queue(database=)`, `@app.task(database=)` and `QueueSpec(database=)`; a
  queue placed nowhere lives in `default`. Two placements that disagree, a database the app does
  not have (with `databases=` in code) and a budget whose queues span databases are each an
  InvalidPolicyError at declaration, and a refused declaration leaves the app as it was.
- WORKHORSE_DATABASES read through App at first use (beside WORKHORSE_DATABASE_URL), and its bad
  values refused typed with nothing written.
- Enqueues routed to their queue's database; a batch, a workflow (chain, group, an error callback,
  a `depends_on` of another database's job) across databases, and a `budget=` of the other
  database, refused with InvalidOptionsError and nothing written in either database.
- Handles of either database (the two databases' ids collide: both start at 1): status, get,
  cancel, retry and attempts through JobHandle and `app.job(id, database=)`.
- `app.using(conn, database=)`: an enqueue to the other database inside the block is refused,
  reads of it take a pooled connection.
- `app.sync()` creates each database's policies, budgets and schedules only there, and prunes
  a queue moved from one database to the other.
- `drain(app)` runs both databases' jobs, including a job that enqueues onto the other one.
- Holds go to their budget's database, and both are renewed while held together.
- The bad-input sweep of the new options: database names empty, too long, with NUL, spaces, not
  a str; `databases=` not a dict, or with empty URLs: each typed, nothing written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from workhorse import (
    App,
    InvalidOptionsError,
    InvalidPolicyError,
    JobStatus,
    QueueSpec,
    TaskFailedError,
    WorkhorseError,
    chain,
    group,
)
from workhorse.testing import drain, eager
from workhorse.worker.supervisor import served_databases

# ---- the two databases ---------------------------------------------------------------------


def rows(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params or None).fetchall()


def jobs(url: str) -> list[tuple[Any, ...]]:
    """(id, task, queue, status) of every job of one database, by id."""
    return rows(url, "SELECT id, task, queue, status FROM workhorse.jobs ORDER BY id")


def state(url: str) -> dict[str, str]:
    """Every table of the workhorse schema, as a digest of its rows (what 'nothing written'
    compares)."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'workhorse' AND c.relkind IN ('r', 'p') ORDER BY 1")]
        found = {}
        for table in tables:
            row = conn.execute(psycopg.sql.SQL(
                "SELECT count(*), md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), ''))"
                " FROM workhorse.{} t").format(psycopg.sql.Identifier(table))).fetchone()
            assert row is not None
            found[table] = f"{row[0]}:{row[1]}"
        return found


class World:
    """An app over the two databases: queue `mail` (max_active 2) in default, `eu-mail`
    (max_active 3) in eu, and tasks on each."""

    def __init__(self, default_url: str, eu_url: str) -> None:
        self.default_url, self.eu_url = default_url, eu_url
        app = self.app = App("multi", databases={"default": default_url, "eu": eu_url})
        self.mail = app.queue("mail", max_active=2)
        self.eu_mail = app.queue("eu-mail", max_active=3, database="eu")

        @app.task(name="m.add", queue=self.mail)
        def add(x: int, y: int) -> int:
            return x + y

        @app.task(name="m.mul", queue=self.eu_mail)
        def mul(x: int, y: int) -> int:
            return x * y

        @app.task(name="m.boom", queue=self.eu_mail, max_attempts=1)
        def boom() -> None:
            raise RuntimeError("boom")

        @app.task(name="m.to_eu", queue=self.mail)
        def to_eu(x: int) -> int:
            # A default job that enqueues onto the other database, from its handler.
            return mul.delay(x, 10).id

        @app.task(name="m.to_default", queue=self.eu_mail)
        def to_default(x: int) -> int:
            return add.delay(x, 100).id

        self.add, self.mul, self.boom, self.to_eu, self.to_default = (
            add, mul, boom, to_eu, to_default)

    def states(self) -> tuple[dict[str, str], dict[str, str]]:
        return state(self.default_url), state(self.eu_url)


@pytest.fixture(autouse=True)
def _no_databases_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own WORKHORSE_DATABASES is never read by accident (the tests that read
    it set it)."""
    monkeypatch.delenv("WORKHORSE_DATABASES", raising=False)


@pytest.fixture
def world(database_url: str, eu_url: str) -> Iterator[World]:
    w = World(database_url, eu_url)
    try:
        yield w
    finally:
        w.app.close()


def test_the_nothing_written_checker_sees_a_write_in_either_database(world: World) -> None:
    """`World.states()` (what every "writes nothing" below compares) is not blind: a job in eu
    changes eu's and only eu's, a sync changes both."""
    before = world.states()
    world.mul.delay(1, 1)
    after = world.states()
    assert after[0] == before[0] and after[1] != before[1]
    assert after[1]["jobs"] != before[1]["jobs"]
    world.app.sync()
    synced = world.states()
    assert synced[0]["policies"] != after[0]["policies"]
    assert synced[1]["policies"] != after[1]["policies"]


# ---- placement ---------------------------------------------------------------------------------


def test_placement_by_queue_task_and_queue_spec(world: World) -> None:
    app = world.app
    spec = QueueSpec("eu-spec", max_active=4, database="eu")

    @app.task(name="p.by_task", queue="eu-bytask", database="eu")
    def by_task() -> None: ...

    @app.task(name="p.by_spec", queue=spec)
    def by_spec() -> None: ...

    @app.task(name="p.own", database="eu")  # its own queue, named after it, in eu
    def own() -> None: ...

    @app.task(name="p.nowhere", queue="plain")
    def nowhere() -> None: ...

    # The same placement again agrees: no error.
    app.queue("eu-mail", max_active=3, database="eu")
    app.task(name="p.again", queue="eu-mail", database="eu")(lambda: None)

    assert {q: app.database_of(q) for q in
            ("mail", "eu-mail", "eu-bytask", "eu-spec", "p.own", "plain")} == {
        "mail": "default", "eu-mail": "eu", "eu-bytask": "eu", "eu-spec": "eu",
        "p.own": "eu", "plain": "default"}
    assert app.queues_by_database() == {
        "default": ["mail", "plain"], "eu": ["eu-mail", "eu-bytask", "eu-spec", "p.own"]}

    # Where their jobs go: read in each database.
    handles = [by_task.delay(), by_spec.delay(), own.delay(), nowhere.delay()]
    assert [h.database for h in handles] == ["eu", "eu", "eu", "default"]
    assert jobs(world.eu_url) == [(1, "p.by_task", "eu-bytask", "ready"),
                                  (2, "p.by_spec", "eu-spec", "ready"),
                                  (3, "p.own", "p.own", "ready")]
    assert jobs(world.default_url) == [(1, "p.nowhere", "plain", "ready")]


def test_conflicting_and_unknown_placements_are_refused_at_declaration(world: World) -> None:
    app = world.app
    cases: list[tuple[str, Callable[[], Any], str]] = [
        ("queue placed in default, then in eu",
         lambda: (app.queue("d-q", database="default"), app.queue("d-q", database="eu")),
         "'d-q' is placed in database 'default' and in 'eu'"),
        ("queue in eu, then default",
         lambda: app.queue("eu-mail", max_active=3, database="default"), "exactly one database"),
        ("task's database against its QueueSpec's",
         lambda: app.task(name="c.spec", queue=QueueSpec("c-spec", database="eu"),
                          database="default")(lambda: None), "exactly one database"),
        ("task's database against the queue's",
         lambda: app.task(name="c.q", queue="eu-mail", database="default")(lambda: None),
         "exactly one database"),
        ("unknown database: queue", lambda: app.queue("c-unknown", database="us"),
         "does not have"),
        ("unknown database: task",
         lambda: app.task(name="c.unknown", database="us")(lambda: None), "does not have"),
        ("unknown database: QueueSpec",
         lambda: app.task(name="c.unknown2", queue=QueueSpec("c-un", database="us"))(
             lambda: None), "does not have"),
        ("unknown database: budget",
         lambda: app.budget("c-budget", max_active=1, database="us"), "does not have"),
    ]
    for name, call, match in cases:
        with pytest.raises(InvalidPolicyError, match=match):
            call()
        print(f"{name}: refused")
    # As they were, and the unknown ones placed nowhere.
    assert app.database_of("d-q") == "default"
    assert app.database_of("eu-mail") == "eu"
    assert "c-unknown" not in app.placement and "c.unknown" not in app.tasks


def _fresh(world: World) -> App:
    """A second app over the same two databases (declarations only here): each refusal below
    meets an app that nothing else was refused in."""
    return App("span", databases={"default": world.default_url, "eu": world.eu_url})


def test_a_budget_whose_queues_span_databases_is_refused(world: World) -> None:
    # Tasks on two databases naming one budget: the second is refused, and not registered.
    app = _fresh(world)
    app.task(name="b.home", queue="mail", budget="partner")(lambda: None)
    with pytest.raises(InvalidPolicyError, match="'partner' would live in 2 databases"):
        app.task(name="b.away", queue=QueueSpec("eu-q", database="eu"),
                 budget="partner")(lambda: None)
    assert "b.away" not in app.tasks

    # The budget placed in eu while the queue naming it lives in default.
    app = _fresh(world)
    app.task(name="b.home", queue="mail", budget="partner")(lambda: None)
    with pytest.raises(InvalidPolicyError, match="'partner' would live in 2 databases"):
        app.budget("partner", max_active=2, database="eu")

    # A budget placed in eu first, then a default queue's task naming it.
    app = _fresh(world)
    app.budget("eu-partner", max_active=2, database="eu")
    with pytest.raises(InvalidPolicyError, match="'eu-partner' would live in 2 databases"):
        app.task(name="b.wrong", queue="mail", budget="eu-partner")(lambda: None)
    assert "b.wrong" not in app.tasks

    # A budget placed in two databases.
    app = _fresh(world)
    app.budget("eu-partner", max_active=2, database="eu")
    with pytest.raises(InvalidPolicyError, match="exactly one database"):
        app.budget("eu-partner", database="default")

    # A queue that names the budget moved to the other database afterwards.
    app = _fresh(world)
    app.task(name="b.home", queue="mail", budget="partner")(lambda: None)
    app.budget("partner", max_active=2, database="default")
    with pytest.raises(InvalidPolicyError, match="'partner' would live in 2 databases"):
        app.queue("mail", database="eu")

    # All in eu: accepted, and the budget lives there.
    app = _fresh(world)
    app.task(name="b.eu", queue=QueueSpec("eu-q", database="eu"), budget="eu-only")(
        lambda: None)
    app.budget("eu-only", max_active=1, database="eu")
    assert app.database_of_budget("eu-only") == "eu"


def test_a_refused_placement_leaves_the_app_as_it_was(world: World) -> None:
    """docs/design.md: two placements that disagree are an InvalidPolicyError at declaration.
    A declaration refused must not take effect: the queue keeps its database (its jobs would
    otherwise go to the other database, away from the budget that governs them), and the app
    can still declare other queues."""
    app = world.app
    app.budget("partner", max_active=2, database="default")

    @app.task(name="r.partner", queue="partner-q", budget="partner")
    def partner() -> None: ...

    with pytest.raises(InvalidPolicyError, match="would live in 2 databases"):
        app.queue("partner-q", database="eu")  # its budget lives in default
    assert app.database_of("partner-q") == "default", (
        "the refused placement of 'partner-q' in eu took effect: "
        f"placement={app.placement}")
    app.queue("later", database="eu")  # the app still accepts a good declaration
    assert app.database_of("later") == "eu"


def test_a_refused_budget_placement_leaves_the_app_as_it_was(world: World) -> None:
    """The same for `app.budget(name, database=)`: refused, the budget must still live with its
    queues, and the app accept other declarations."""
    app = world.app

    @app.task(name="r.partner", queue="mail", budget="partner")
    def partner() -> None: ...

    with pytest.raises(InvalidPolicyError, match="would live in 2 databases"):
        app.budget("partner", max_active=2, database="eu")  # its queue lives in default
    assert app.database_of_budget("partner") == "default", (
        "the refused placement of budget 'partner' in eu took effect: "
        f"budget_placement={app.budget_placement}")
    app.queue("later", database="eu")
    assert app.database_of("later") == "eu"


# ---- WORKHORSE_DATABASES ---------------------------------------------------------------------


def test_workhorse_databases_is_read_through_app(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = world.default_url, world.eu_url
    monkeypatch.setenv("WORKHORSE_DATABASES", f"default={a}, eu={b}")
    app = App("env-app")  # nothing in code: the environment names both, read at first use
    try:
        eu_queue = app.queue("env-eu", database="eu")  # not checked yet: read at first use

        @app.task(name="e.eu", queue=eu_queue)
        def on_eu() -> None: ...

        @app.task(name="e.default")
        def on_default() -> None: ...

        assert app.database_names == ["default", "eu"]
        assert app.database_url_of("eu") == b and app.database_url == a
        assert (on_eu.delay().database, on_default.delay().database) == ("eu", "default")
        assert jobs(b) == [(1, "e.eu", "env-eu", "ready")]
        assert jobs(a) == [(1, "e.default", "e.default", "ready")]
    finally:
        app.close()

    # A mapping without `default`: the default database follows the rule
    # (WORKHORSE_DATABASE_URL here); eu is the environment's.
    monkeypatch.setenv("WORKHORSE_DATABASES", f"eu={b}")
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", a)
    app = App("env-app2")
    try:
        app.queue("env2-eu", database="eu")

        @app.task(name="e2.eu", queue="env2-eu")
        def on_eu2() -> None: ...

        @app.task(name="e2.default")
        def on_default2() -> None: ...

        assert app.database_names == ["default", "eu"]
        assert (on_eu2.delay().id, on_default2.delay().id) == (2, 2)
        assert jobs(b)[-1] == (2, "e2.eu", "env2-eu", "ready")
        assert jobs(a)[-1] == (2, "e2.default", "e2.default", "ready")
    finally:
        app.close()

    # databases= in code wins over the environment, which is then never read (even broken).
    monkeypatch.setenv("WORKHORSE_DATABASES", "this is not a mapping")
    app = App("env-app3", databases={"default": a, "eu": b})
    assert app.database_names == ["default", "eu"]
    app.close()


def test_a_placement_in_a_database_the_environment_lacks_is_refused_at_sync(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASES", f"default={world.default_url},eu={world.eu_url}")
    app = App("env-sync")
    try:
        app.queue("ok", max_active=1, database="eu")
        app.queue("lost", max_active=1, database="us")  # accepted now: read at first use
        before = world.states()
        with pytest.raises(InvalidPolicyError, match="'us', which app 'env-sync' does not have"):
            app.sync()
        with pytest.raises(InvalidPolicyError, match="does not have"):
            served_databases(app, ["ok", "lost"], None)  # the worker's start

        @app.task(name="es.lost", queue="lost")
        def lost() -> None: ...

        with pytest.raises(InvalidOptionsError, match="has no database 'us'"):
            lost.delay()
        assert world.states() == before
    finally:
        app.close()


def test_two_names_for_one_database_are_refused_at_sync_and_worker_start(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/design.md: two names for one database are an InvalidOptionsError (each name's sync
    would prune the other's policies). The same database spelled another way (a URI, not a
    key=value string) is still one database."""
    params = conninfo_to_dict(world.default_url)
    again = "postgresql://{user}@{host}:{port}/{dbname}".format(
        user=params.get("user", ""), host=quote(str(params.get("host", "")), safe=""),
        port=params.get("port", 5432), dbname=params["dbname"])
    with psycopg.connect(again) as check:  # it is the fixture's database
        assert check.info.dbname == params["dbname"]
    before = world.states()
    apps = [App("twice", databases={"default": world.default_url, "eu": again})]
    monkeypatch.setenv("WORKHORSE_DATABASES", f"default={world.default_url},copy={again}")
    apps.append(App("twice-env"))
    try:
        for app in apps:
            app.queue("q", max_active=1)
            app.queue("q-other", max_active=1, database=app.database_names[1])
            with pytest.raises(InvalidOptionsError, match="names one database twice"):
                app.sync()
            with pytest.raises(InvalidOptionsError, match="names one database twice"):
                served_databases(app, ["q", "q-other"], None)
        assert world.states() == before
    finally:
        for app in apps:
            app.close()


BAD_ENVIRONMENTS = [
    "eu",  # no name=
    "eu=",  # no URL
    "default=postgresql://a/x,eu=",  # an empty URL
    "eu=postgresql://a/x,eu=postgresql://b/y",  # a name twice
    "1eu=postgresql://a/x",  # a name that starts with a digit
    "=postgresql://a/x",
    "e u=postgresql://a/x",
    "x" * 64 + "=postgresql://a/x",  # a name too long
]


@pytest.mark.parametrize("value", BAD_ENVIRONMENTS)
def test_bad_workhorse_databases_is_refused_typed_and_writes_nothing(
        world: World, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASES", value)
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", world.default_url)
    app = App("env-bad")
    try:
        @app.task(name="eb.t")
        def t() -> None: ...

        before = world.states()
        with pytest.raises(InvalidOptionsError, match="WORKHORSE_DATABASES"):
            app.database_names  # noqa: B018  (read at first use)
        with pytest.raises(InvalidOptionsError, match="WORKHORSE_DATABASES"):
            t.delay()
        with pytest.raises(InvalidOptionsError, match="WORKHORSE_DATABASES"):
            app.sync()
        assert world.states() == before
    finally:
        app.close()


# ---- enqueues: routing and refusals ------------------------------------------------------------


def test_enqueues_go_to_their_queues_database(world: World) -> None:
    app = world.app
    h_add = world.add.delay(2, 3)
    h_mul = world.mul.delay(2, 3)
    h_redirected = world.add.apply_async((1, 1), queue="eu-mail")  # the call's queue decides
    h_sent = app.send_task("m.mul", args=[4, 5])
    batch = app.enqueue_many([world.mul.call((n, n)) for n in range(3)])
    mapped = world.add.map([(n, n) for n in range(2)])
    assert (h_add.database, h_mul.database, h_redirected.database, h_sent.database) == (
        "default", "eu", "eu", "eu")
    assert [h.database for h in batch] == ["eu"] * 3
    assert [h.database for h in mapped] == ["default"] * 2
    assert jobs(world.default_url) == [(1, "m.add", "mail", "ready"),
                                       (2, "m.add", "mail", "ready"),
                                       (3, "m.add", "mail", "ready")]
    assert jobs(world.eu_url) == [(1, "m.mul", "eu-mail", "ready"),
                                  (2, "m.add", "eu-mail", "ready"),
                                  (3, "m.mul", "eu-mail", "ready"),
                                  (4, "m.mul", "eu-mail", "ready"),
                                  (5, "m.mul", "eu-mail", "ready"),
                                  (6, "m.mul", "eu-mail", "ready")]
    # A chain in one database goes there whole, with its error callback of that database.
    flow = chain(world.mul.s(2, 3), world.mul.s(4), on_error=world.mul.s(0)).apply_async()
    assert len(rows(world.eu_url, "SELECT 1 FROM workhorse.workflows WHERE id = %s",
                    flow.id)) == 1
    assert rows(world.default_url, "SELECT count(*) FROM workhorse.workflows") == [(0,)]
    assert [j[1] for j in jobs(world.eu_url)[-2:]] == ["m.mul", "m.mul"]


def test_a_batch_or_workflow_across_databases_is_refused_and_writes_nothing(
        world: World) -> None:
    app, add, mul = world.app, world.add, world.mul
    add.delay(1, 1)
    mul.delay(1, 1)
    before = world.states()
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("enqueue_many", lambda: app.enqueue_many([add.call((1, 2)), mul.call((1, 2))])),
        ("enqueue_many, eu first", lambda: app.enqueue_many([mul.call((1, 2)),
                                                               add.call((1, 2))])),
        ("enqueue_calls", lambda: app.enqueue_calls([add.call((1, 2)),
                                                     add.call((1, 2), queue="eu-mail")])),
        ("chain", lambda: chain(add.s(1, 2), mul.s(3)).apply_async()),
        ("group", lambda: group(add.s(1, 2), mul.s(3, 4)).apply_async()),
        ("chain with `|`", lambda: (add.s(1, 2) | mul.s(3)).delay()),
        # (An error callback gets the failed member's id first: mul.s(0) is mul(id, 0).)
        ("chain in default, its error callback in eu",
         lambda: chain(add.s(1, 2), add.s(3), on_error=mul.s(0)).apply_async()),
        ("group in eu, its error callback in default",
         lambda: group(mul.s(1, 2), mul.s(3, 4), on_error=add.s(0)).apply_async()),
    ]
    wrong = []
    for under in ("", "under eager(): "):  # eager() refuses them as the database does
        with eager(app) if under else contextlib.nullcontext():
            for name, call in cases:
                try:
                    got = call()
                except InvalidOptionsError as exc:  # refused, and for its databases
                    if "live on two" not in str(exc):
                        wrong.append(f"{under}{name}: refused for another reason: {exc}")
                    continue
                except Exception as exc:
                    wrong.append(f"{under}{name}: {type(exc).__name__}: {exc}")
                else:
                    wrong.append(f"{under}{name}: accepted, got {got!r}")
    after = world.states()
    assert wrong == [], "\n".join(wrong)
    assert after == before, "a refused enqueue wrote something"


@pytest.mark.parametrize("parent", ["JobHandle", "WorkflowHandle"])
def test_a_dependency_on_another_databases_job_is_refused(world: World, parent: str) -> None:
    """`depends_on=` makes a workflow of the new job and its parents, and a workflow's members
    must share a database (docs/design.md "Several databases": refused with InvalidOptionsError
    before anything is written). A handle of eu's job names its database; the enqueue in
    default must not take its id for a job of default (both databases have a job 1: the
    dependency would silently be on an unrelated job)."""
    add, mul = world.add, world.mul
    # default's job 1 (or workflow 1), and eu's
    unrelated: Any = (add.delay(1, 1) if parent == "JobHandle"
                      else chain(add.s(1, 2), add.s(3)).apply_async())
    handle: Any = (mul.delay(1, 1) if parent == "JobHandle"
                   else chain(mul.s(1, 2), mul.s(3)).apply_async())
    assert (handle.id, handle.enqueuer.database) == (1, "eu")
    before = world.states()
    try:
        got = add.apply_async((1, 2), depends_on=[handle])
    except InvalidOptionsError as exc:
        assert "its own database" in str(exc), exc
        assert world.states() == before
        return
    deps = rows(world.default_url, "SELECT job_id, parent_id FROM workhorse.job_deps")
    raise AssertionError(
        f"a default job depending on eu's {parent} {handle.id} was accepted: {got!r} in "
        f"database {got.database!r}, its dependencies in default {deps} (default's "
        f"{parent} {unrelated.id} is an unrelated one), written: "
        f"{jobs(world.default_url)}")


def test_a_budget_of_the_other_database_is_refused(world: World) -> None:
    app = world.app
    app.budget("eu-api", max_active=2, database="eu")
    app.budget("default-api", max_active=2)
    app.sync()
    before = world.states()
    with pytest.raises(InvalidOptionsError, match="'eu-api' lives in database 'eu'"):
        world.add.apply_async((1, 2), budget="eu-api")
    with pytest.raises(InvalidOptionsError, match="'default-api' lives in database 'default'"):
        world.mul.apply_async((1, 2), budget="default-api")
    with pytest.raises(InvalidOptionsError, match="lives in database"):
        app.enqueue_many([world.mul.call((1, 2)), world.mul.call((3, 4), budget="default-api")])
    assert world.states() == before
    # Its own database's budget is taken.
    h = world.mul.apply_async((1, 2), budget="eu-api")
    assert rows(world.eu_url, "SELECT budget FROM workhorse.jobs WHERE id = %s", h.id) == [
        ("eu-api",)]


def test_async_enqueues_reads_and_sync_go_to_their_database(world: World) -> None:
    """The async twins take the same routes (their own code: async pools, one a database)."""
    app = world.app

    async def run() -> None:
        try:
            report = await app.sync_async()
            assert sorted(report.created) == ["eu-mail", "mail"]
            h_mul = await world.mul.delay_async(2, 3)
            h_add = await world.add.enqueue_async((2, 3))
            h_sent = await app.send_task_async("m.mul", args=[1, 1])
            assert (h_mul.database, h_add.database, h_sent.database) == ("eu", "default", "eu")
            on_eu = await app.get_job_async(1, database="eu")
            on_default = await app.get_job_async(1)
            assert on_eu is not None and on_eu.task == "m.mul"
            assert on_default is not None and on_default.task == "m.add"
            assert await h_mul.status_async() == JobStatus.READY
            before = world.states()
            with pytest.raises(InvalidOptionsError, match="one transaction on one database"):
                await app.enqueue_calls_async([world.add.call((1, 2)), world.mul.call((1, 2))])
            with pytest.raises(InvalidOptionsError, match="share a database"):
                await chain(world.add.s(1, 2), world.mul.s(3)).enqueue_async()
            assert world.states() == before
        finally:
            await app.close_async()

    asyncio.run(run())
    assert jobs(world.eu_url) == [(1, "m.mul", "eu-mail", "ready"),
                                  (2, "m.mul", "eu-mail", "ready")]
    assert jobs(world.default_url) == [(1, "m.add", "mail", "ready")]
    assert _policies(world.default_url) == [("multi", "mail", 2)]
    assert _policies(world.eu_url) == [("multi", "eu-mail", 3)]


# ---- handles ---------------------------------------------------------------------------------


def test_handles_of_either_database(world: World) -> None:
    app = world.app
    h_add = world.add.delay(2, 3)  # default, id 1
    h_mul = world.mul.delay(2, 3)  # eu, id 1
    h_boom = world.boom.delay()  # eu, id 2
    h_spare = world.add.delay(7, 7)  # default, id 2
    assert (h_add.id, h_mul.id, h_boom.id, h_spare.id) == (1, 1, 2, 2)
    assert app.job(1) == h_add and app.job(1, database="eu") == h_mul and h_add != h_mul
    assert app.job(1, database="eu").database == "eu"
    assert app.handle(2, database="eu") == h_boom
    # Reads go to the job's own database: the same id is another job in each.
    assert app.job(1).job().task == "m.add"  # type: ignore[union-attr]
    assert app.job(1, database="eu").job().task == "m.mul"  # type: ignore[union-attr]
    assert app.get_job(2).task == "m.add"  # type: ignore[union-attr]
    assert app.get_job(2, database="eu").task == "m.boom"  # type: ignore[union-attr]
    assert app.get_job(3) is None and app.get_job(3, database="eu") is None

    # Cancel the default job 2 through the handle: eu's job 2 (boom) stays ready.
    assert h_spare.cancel() == JobStatus.CANCELED
    assert app.job(2, database="eu").status() == JobStatus.READY

    report = drain(app)
    assert (report.succeeded, report.failed) == (2, 1), report
    assert h_add.get(timeout=5) == 5
    assert app.job(1, database="eu").get(timeout=5) == 6
    assert app.job(1).wait(timeout=5).result == 5
    with pytest.raises(TaskFailedError):
        h_boom.get(timeout=5)
    assert [a.outcome for a in h_boom.attempts()] == ["failed"]
    assert [a.outcome for a in app.job(2, database="eu").attempts()] == ["failed"]
    assert app.get_attempts(2, database="eu") == h_boom.attempts()
    assert app.job(2).status() == JobStatus.CANCELED  # default's job 2, unchanged
    # Retry of eu's job 2 by id with the database named, and through the handle.
    assert app.retry([2]) == [2]  # default's job 2 (canceled) is the one retried
    assert app.job(2, database="eu").status() == JobStatus.FAILED
    assert app.retry([2], database="eu") == [2]
    assert app.job(2, database="eu").status() == JobStatus.READY
    assert app.cancel([2], database="eu") == [2]
    assert h_boom.retry() == JobStatus.READY
    assert jobs(world.default_url) == [(1, "m.add", "mail", "succeeded"),
                                       (2, "m.add", "mail", "ready")]
    assert jobs(world.eu_url) == [(1, "m.mul", "eu-mail", "succeeded"),
                                  (2, "m.boom", "eu-mail", "ready")]
    # An id of neither database, and a database the app does not have.
    assert app.job(99, database="eu").status() is None
    with pytest.raises(InvalidOptionsError, match="has no database 'us'"):
        app.job(1, database="us")


# ---- app.using ---------------------------------------------------------------------------------


def test_using_names_the_connections_database(world: World) -> None:
    app = world.app
    h_eu = world.mul.delay(1, 1)  # eu, id 1, committed
    before = world.states()
    with psycopg.connect(world.default_url) as conn:  # a transaction of the caller's
        with app.using(conn):
            with pytest.raises(InvalidOptionsError, match="using\\(\\) connection is database"):
                world.mul.delay(1, 2)
            with pytest.raises(InvalidOptionsError, match="a transaction belongs to one"):
                app.enqueue_many([world.mul.call((1, 2))])
            # Reads of the other database take a pooled connection.
            assert app.job(1, database="eu").job().task == "m.mul"  # type: ignore[union-attr]
            assert h_eu.status() == JobStatus.READY
            mine = world.add.delay(1, 2)  # on the caller's connection, in its transaction
            assert mine.database == "default"
            assert app.job(mine.id).status() == JobStatus.READY  # seen on the caller's
            assert jobs(world.default_url) == []  # and by no one else yet
        conn.rollback()
    assert world.states() == before  # the refused ones wrote nothing; the rest rolled back

    with psycopg.connect(world.eu_url) as conn:
        with conn.transaction(), app.using(conn, database="eu"):
            with pytest.raises(InvalidOptionsError, match="using\\(\\) connection is database"):
                world.add.delay(1, 2)
            with pytest.raises(InvalidOptionsError, match=r"using\(\) connection is database 'eu'"):
                chain(world.add.s(1, 2), world.add.s(3)).apply_async()
            handle = world.mul.delay(3, 4)
            # Not yet committed: only this connection sees it.
            assert app.job(handle.id, database="eu").job() is not None
            assert rows(world.eu_url, "SELECT count(*) FROM workhorse.jobs") == [(1,)]
        conn.commit()
    assert jobs(world.eu_url) == [(1, "m.mul", "eu-mail", "ready"),
                                  (2, "m.mul", "eu-mail", "ready")]
    assert jobs(world.default_url) == []
    # A database the app does not have: refused as the block opens.
    with psycopg.connect(world.eu_url) as conn, \
            pytest.raises(InvalidOptionsError, match="has no database 'us'"), \
            app.using(conn, database="us"):
        world.mul.delay(5, 6)
    assert len(jobs(world.eu_url)) == 2


# ---- sync ----------------------------------------------------------------------------------


def _policies(url: str) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT namespace, queue, max_active FROM workhorse.policies ORDER BY 2")


def test_sync_creates_each_databases_policies_there_and_prunes_a_moved_queue(
        world: World) -> None:
    app = world.app
    app.queue("moving", max_active=5)  # in default, for now
    app.budget("eu-api", max_active=4, database="eu")
    app.budget("default-api", max_active=6)
    app.schedule(world.mul, every="1h", args=[1, 1], name="eu-hourly")
    app.schedule(world.add, every="1h", args=[1, 1], name="default-hourly")
    report = app.sync()
    assert sorted(report.created) == ["eu-mail", "mail", "moving"]
    assert report.budgets is not None and sorted(report.budgets.created) == [
        "default-api", "eu-api"]
    assert report.schedules is not None and sorted(report.schedules.created) == [
        "default-hourly", "eu-hourly"]
    assert _policies(world.default_url) == [("multi", "mail", 2), ("multi", "moving", 5)]
    assert _policies(world.eu_url) == [("multi", "eu-mail", 3)]
    assert rows(world.default_url, "SELECT name, max_active FROM workhorse.budgets") == [
        ("default-api", 6)]
    assert rows(world.eu_url, "SELECT name, max_active FROM workhorse.budgets") == [
        ("eu-api", 4)]
    assert rows(world.default_url, "SELECT name FROM workhorse.schedules") == [
        ("default-hourly",)]
    assert rows(world.eu_url, "SELECT name FROM workhorse.schedules") == [("eu-hourly",)]
    again = app.sync()
    assert (again.created, again.pruned, sorted(again.unchanged)) == (
        [], [], ["eu-mail", "mail", "moving"])

    # The same app, re-declared with "moving" in eu (and the eu budget moved to default):
    # the new database gets it, the old one prunes it.
    moved = World(world.default_url, world.eu_url)
    try:
        moved.app.queue("moving", max_active=5, database="eu")
        moved.app.budget("eu-api", max_active=4, database="default")
        moved.app.budget("default-api", max_active=6)
        report = moved.app.sync()
        assert (report.created, report.pruned) == (["moving"], ["moving"])
        assert report.budgets is not None
        assert (report.budgets.created, report.budgets.pruned) == (["eu-api"], ["eu-api"])
        assert _policies(world.default_url) == [("multi", "mail", 2)]
        assert _policies(world.eu_url) == [("multi", "eu-mail", 3), ("multi", "moving", 5)]
        assert rows(world.default_url, "SELECT name FROM workhorse.budgets ORDER BY 1") == [
            ("default-api",), ("eu-api",)]
        assert rows(world.eu_url, "SELECT name FROM workhorse.budgets") == []
        # One database at a time.
        assert moved.app.sync_database("eu").unchanged == ["eu-mail", "moving"]
        with pytest.raises(InvalidOptionsError, match="has no database 'us'"):
            moved.app.sync_database("us")
    finally:
        moved.app.close()


# ---- drain -----------------------------------------------------------------------------------


def test_drain_runs_both_databases_jobs_and_their_crossings(world: World) -> None:
    world.add.delay(1, 2)
    world.mul.delay(3, 4)
    world.to_eu.delay(5)  # default job 2: enqueues mul(5, 10) in eu
    world.to_default.delay(6)  # eu job 2: enqueues add(6, 100) in default
    report = drain(world.app)
    assert (report.succeeded, report.failed, report.retried) == (6, 0, 0), report
    done = "SELECT id, task, status, result FROM workhorse.jobs ORDER BY id"
    assert rows(world.default_url, done) == [
        (1, "m.add", "succeeded", 3), (2, "m.to_eu", "succeeded", 3),
        (3, "m.add", "succeeded", 106)]
    assert rows(world.eu_url, done) == [
        (1, "m.mul", "succeeded", 12), (2, "m.to_default", "succeeded", 3),
        (3, "m.mul", "succeeded", 50)]
    assert drain(world.app).succeeded == 0  # nothing left in either


# ---- holds -----------------------------------------------------------------------------------


HOLDS = ("SELECT budget, units, lease_until > clock_timestamp() FROM workhorse.budget_holds "
         "ORDER BY budget")


def test_holds_go_to_their_budgets_database(world: World) -> None:
    app = world.app
    app.budget("eu-api", max_active=2, database="eu")
    app.budget("default-api", max_active=2)

    # Declared with no database: it lives where the queue of the task naming it lives.
    app.budget("eu-named", max_active=2)

    @app.task(name="h.eu", queue="eu-mail", budget="eu-named")
    def named() -> None: ...

    app.sync()
    assert rows(world.eu_url, "SELECT name FROM workhorse.budgets ORDER BY 1") == [
        ("eu-api",), ("eu-named",)]
    assert rows(world.default_url, "SELECT name FROM workhorse.budgets") == [("default-api",)]
    with app.budget("eu-api").hold(units=2):
        assert rows(world.eu_url, HOLDS) == [("eu-api", 2, True)]
        assert rows(world.default_url, HOLDS) == []
    with app.budget("default-api").hold():
        assert rows(world.default_url, HOLDS) == [("default-api", 1, True)]
        assert rows(world.eu_url, HOLDS) == []
    with app.budget("eu-named").hold():
        assert rows(world.eu_url, HOLDS) == [("eu-named", 1, True)]
        assert rows(world.default_url, HOLDS) == []
    assert rows(world.eu_url, HOLDS) == rows(world.default_url, HOLDS) == []


def test_holds_in_both_databases_at_once_are_both_renewed(world: World) -> None:
    """Two holds, one a database, held together past several leases: each database's row
    must stay unexpired (the renewal keeps both). Both databases' hold ids start at 1."""
    app = world.app
    app.budget("eu-api", max_active=2, database="eu")
    app.budget("default-api", max_active=2)
    app.sync()
    lease = 1.0
    with app.budget("default-api").hold(lease=lease) as on_default, \
            app.budget("eu-api").hold(lease=lease) as on_eu:
        assert (on_default.id, on_eu.id) == (1, 1)
        time.sleep(lease * 3)
        seen = {"default": rows(world.default_url, HOLDS), "eu": rows(world.eu_url, HOLDS)}
        lost = (on_default.lost, on_eu.lost)
    assert seen == {"default": [("default-api", 1, True)], "eu": [("eu-api", 1, True)]}, (
        f"a hold's lease ran out while its block ran ({lost=} as the app saw it): {seen}")


# ---- the bad-input sweep of the new options ------------------------------------------------------

BAD_NAMES: list[tuple[str, Any]] = [
    ("empty", ""),
    ("64 characters", "d" * 64),
    ("10k", "d" * 10_000),
    ("NUL", "e\x00u"),
    ("space", "e u"),
    ("leading space", " eu"),
    ("newline", "eu\n"),
    ("starts with a digit", "1eu"),
    ("int", 5),
    ("bytes", b"eu"),
    ("list", ["eu"]),
    ("dict", {"eu": 1}),
    ("float", 1.5),
    # None means "not placed" to a declaration and "the handle's, else default" to a signal:
    # only the surfaces where it names a database meet it.
    ("None", None),
]
# The surfaces that take None for a meaning of its own.
NONE_MEANS_SOMETHING = {"app.queue", "@app.task", "QueueSpec", "app.budget", "app.signal"}


def _name_cases(app: App, conn: psycopg.Connection[Any], bad: Any
                ) -> list[tuple[str, Callable[[], Any], type[WorkhorseError]]]:
    """(surface, call, the error it must raise) for one bad database name."""
    add = app.tasks["m.add"]
    cases: list[tuple[str, Callable[[], Any], type[WorkhorseError]]] = [
        ("app.queue", lambda: app.queue("sw-q", max_active=1, database=bad), InvalidPolicyError),
        ("@app.task", lambda: app.task(name="sw.t", database=bad)(lambda: None),
         InvalidPolicyError),
        ("QueueSpec", lambda: QueueSpec("sw-spec", database=bad), InvalidPolicyError),
        ("app.budget", lambda: app.budget("sw-b", max_active=1, database=bad),
         InvalidPolicyError),
        ("app.job", lambda: app.job(1, database=bad), InvalidOptionsError),
        ("app.handle", lambda: app.handle(1, database=bad), InvalidOptionsError),
        ("app.get_job", lambda: app.get_job(1, database=bad), InvalidOptionsError),
        ("app.get_attempts", lambda: app.get_attempts(1, database=bad), InvalidOptionsError),
        ("app.get_steps", lambda: app.get_steps(1, database=bad), InvalidOptionsError),
        ("app.cancel", lambda: app.cancel([1], database=bad), InvalidOptionsError),
        ("app.retry", lambda: app.retry([1], database=bad), InvalidOptionsError),
        ("app.signal", lambda: app.signal(1, "go", database=bad), InvalidOptionsError),
        ("app.wait_for", lambda: app.wait_for(1, 0.1, database=bad), InvalidOptionsError),
        ("app.workflow", lambda: app.workflow(1, database=bad), InvalidOptionsError),
        ("app.workflow_jobs", lambda: app.workflow_jobs(1, database=bad), InvalidOptionsError),
        ("app.connection", lambda: app.connection(bad).__enter__(), InvalidOptionsError),
        ("app.sync_database", lambda: app.sync_database(bad), InvalidOptionsError),
        ("app.using", lambda: _enqueue_using(app, conn, bad, add), InvalidOptionsError),
        ("served_databases (--databases)",
         lambda: served_databases(app, ["mail", "eu-mail"], [bad]), InvalidOptionsError),
    ]
    if bad is None:
        return [case for case in cases if case[0] not in NONE_MEANS_SOMETHING]
    try:
        hash(bad)
    except TypeError:
        return cases  # no dict can have it as a key
    return [*cases, ("App(databases=)", lambda: App("sw", databases={bad: "postgresql://x/y"}),
                     InvalidOptionsError)]


def _enqueue_using(app: App, conn: psycopg.Connection[Any], bad: Any, task: Any) -> Any:
    with app.using(conn, database=bad):
        return task.delay(1, 2)


@pytest.mark.parametrize(("label", "bad"), BAD_NAMES, ids=[n[0] for n in BAD_NAMES])
def test_bad_database_names_are_refused_typed_and_write_nothing(
        world: World, label: str, bad: Any) -> None:
    app = world.app
    world.add.delay(1, 1)
    world.mul.delay(1, 1)
    kept = (dict(app.placement), dict(app.queues), dict(app.tasks), dict(app.budgets),
            dict(app.budget_placement))
    before = world.states()
    wrong = []
    with psycopg.connect(world.default_url, autocommit=True) as conn:
        for surface, call, error in _name_cases(app, conn, bad):
            try:
                got = call()
            except error:
                continue
            except Exception as exc:  # any other type is the failure looked for
                wrong.append(f"{surface}: {type(exc).__module__}.{type(exc).__name__}: "
                             f"{exc!s:.100}")
            else:
                wrong.append(f"{surface}: no error, got {got!r:.100}")
    after = world.states()
    assert wrong == [], f"database={bad!r:.40}: {len(wrong)} wrong outcomes:\n" + "\n".join(wrong)
    assert after == before
    # A refused declaration leaves nothing behind: no queue, placement, task or budget.
    assert (app.placement, app.queues, app.tasks, app.budgets, app.budget_placement) == kept


BAD_MAPPINGS: list[tuple[str, Any]] = [
    ("a list", [("eu", "postgresql://x/y")]),
    ("a str", "eu=postgresql://x/y"),
    ("empty", {}),
    ("an int", 5),
    ("an empty URL", {"eu": ""}),
    ("a blank URL", {"eu": "   "}),
    ("a URL with NUL", {"eu": "postgresql://x/y\x00"}),
    ("a URL that is not a str", {"eu": 5}),
    ("a URL of None", {"eu": None}),
    ("a bad name", {"e u": "postgresql://x/y"}),
    ("an empty name", {"": "postgresql://x/y"}),
]


@pytest.mark.parametrize(("label", "mapping"), BAD_MAPPINGS, ids=[m[0] for m in BAD_MAPPINGS])
def test_bad_databases_mappings_are_refused_typed(label: str, mapping: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        App("sw-map", databases=mapping)


def test_database_url_and_databases_default_must_agree(world: World) -> None:
    with pytest.raises(InvalidOptionsError, match="two databases"):
        App("sw-two", world.default_url, databases={"default": world.eu_url})
    same = App("sw-same", world.default_url, databases={"default": world.default_url,
                                                        "eu": world.eu_url})
    assert same.database_names == ["default", "eu"]
    same.close()
