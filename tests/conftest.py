"""The database fixture: one template database with the schema, one fresh copy per test.

Uses WORKHORSE_TEST_DATABASE_URL when it is set, and the embedded server otherwise.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from ci_guard import skip_or_fail, under_ci
from pgbouncer_server import PgBouncer, binary
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import _sql
from workhorse.queue import Queue

_TEMPLATE_LOCK = 0x7465737474706C  # serializes template creation across xdist workers


def _import_skip(longrepr: Any) -> str | None:
    """The reason of a `pytest.importorskip` skip, or None for any other outcome."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        if "could not import" in reason:
            return reason
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """Under CI (which installs every extra), a module skipped by `importorskip` fails."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    reason = _import_skip(report.longrepr) if report.skipped and under_ci() else None
    if reason:
        report.outcome = "failed"
        report.longrepr = f"CI=1 and {reason}: .ci/run installs it, a skip would hide that"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """The same for an `importorskip` inside a test."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    reason = _import_skip(report.longrepr) if report.skipped and under_ci() else None
    if reason:
        report.outcome = "failed"
        report.longrepr = f"CI=1 and {reason}: .ci/run installs it, a skip would hide that"


def _with_dbname(url: str, dbname: str) -> str:
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def server_url() -> str:
    """The server the tests run against (its maintenance database)."""
    url = os.environ.get("WORKHORSE_TEST_DATABASE_URL")
    if not url:
        from workhorse import embedded

        url = embedded.ensure_running()
    return url


@pytest.fixture(scope="session")
def template_name(server_url: str) -> str:
    digest = hashlib.sha1(
        "".join(text for _, _, text in _sql.migrations()).encode()
    ).hexdigest()[:12]
    name = f"workhorse_tpl_{digest}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(%s)", (_TEMPLATE_LOCK,))
        try:
            exists = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if not exists:
                building = f"{name}_building_{os.getpid()}"
                admin.execute(f'DROP DATABASE IF EXISTS "{building}"')
                admin.execute(f'CREATE DATABASE "{building}"')
                with psycopg.connect(_with_dbname(server_url, building), autocommit=True) as c:
                    Queue(c).install_schema()
                admin.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        finally:
            admin.execute("SELECT pg_advisory_unlock(%s)", (_TEMPLATE_LOCK,))
    return name


# What a test may change in its database beside rows: relations, columns, functions, triggers,
# constraints, privileges, extensions, the database's settings and the schema's version rows. A
# database whose fingerprint is the template's is only rows apart from a fresh copy, and a reset
# makes it one.
_FINGERPRINT = """
SELECT md5(string_agg(x, ',' ORDER BY x)) FROM (
    SELECT format('r %s.%s %s %s %s', n.nspname, c.relname, c.relkind, c.relacl, c.reloptions)
        AS x
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
    UNION ALL
    SELECT format('a %s %s %s %s', a.attrelid::regclass, a.attname, a.atttypid::regtype,
                  pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
      AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT format('f %s %s %s %s', p.oid::regprocedure, md5(p.prosrc), p.proconfig, p.proacl)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
    UNION ALL
    SELECT format('t %s %s', t.tgrelid::regclass, t.tgname) FROM pg_trigger t
    WHERE NOT t.tgisinternal
    UNION ALL
    SELECT format('c %s %s', conrelid::regclass, pg_get_constraintdef(oid)) FROM pg_constraint
    WHERE connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
    UNION ALL
    SELECT format('e %s', extname) FROM pg_extension
    UNION ALL
    SELECT format('n %s %s', nspname, nspacl) FROM pg_namespace
    UNION ALL
    SELECT format('p %s %s', polrelid::regclass, polname) FROM pg_policy
    UNION ALL
    SELECT format('s %s', setconfig) FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL
    SELECT format('v %s', to_jsonb(v)) FROM workhorse.schema_version v
) AS parts
"""

# Rows back to the template's: every table but the schema's version, sequences restarted, the
# planner's statistics and the counters gone (a plan or a counter read by a test is a fresh one).
_RESET = """
DO $$
DECLARE
    r record;
    v_written text;
BEGIN
    -- Only the tables ever written (a table never written has no page), so that a test that
    -- touched three tables pays for three.
    SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') INTO v_written
    FROM pg_tables
    WHERE schemaname = 'workhorse' AND tablename <> 'schema_version'
      AND pg_relation_size(format('%I.%I', schemaname, tablename)) > 0;
    IF v_written IS NOT NULL THEN
        EXECUTE 'TRUNCATE ' || v_written || ' RESTART IDENTITY CASCADE';
    END IF;
    FOR r IN SELECT schemaname, sequencename FROM pg_sequences
             WHERE schemaname = 'workhorse' AND last_value IS NOT NULL LOOP
        EXECUTE format('ALTER SEQUENCE %I.%I RESTART', r.schemaname, r.sequencename);
    END LOOP;
    DELETE FROM pg_statistic WHERE starelid IN (
        SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'workhorse');
    PERFORM pg_stat_reset();
END
$$
"""


class _Databases:
    """The test databases of one pytest process: copies of the template, each reset and reused
    by the next test when the test changed only rows (its fingerprint is the template's), else
    dropped. A copy and a drop cost 0.2-0.5 s of the embedded PostgreSQL 18 (it writes the copy
    to WAL and syncs it), about half of a short test's time; a reset costs 0.05-0.1 s. A test
    still starts on a database equal to a fresh copy: the same schema, no rows, sequences at
    their start, no statistics."""

    def __init__(self, server_url: str, template: str) -> None:
        self.server_url = server_url
        self.template = template
        self.free: list[str] = []
        self.fingerprint: str | None = None
        self.shared: set[str] = set()  # reached through PgBouncer: its pooled links go with it

    def take(self) -> str:
        if self.free:
            return self.free.pop()
        name = f"wh_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.server_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        if self.fingerprint is None:
            with psycopg.connect(_with_dbname(self.server_url, name), autocommit=True) as c:
                self.fingerprint = _scalar(c, _FINGERPRINT)
        return name

    def give_back(self, name: str) -> None:
        if name not in self.shared:
            try:
                if self._reset(name):
                    self.free.append(name)
                    return
            except psycopg.Error:
                pass  # whatever failed, a drop ends it
        self.shared.discard(name)
        self._drop(name)

    def _reset(self, name: str) -> bool:
        with psycopg.connect(self.server_url, autocommit=True) as admin:
            # A process the test left running (a worker, a dashboard) would reconnect to a
            # reused database and take the next test's jobs: a database still in use once its
            # test's own connections are gone (their backends exit just after the client) is
            # dropped, which ends such a process for good.
            deadline = time.monotonic() + 0.5
            while _scalar(admin, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                 "AND backend_type = 'client backend'", (name,)):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
        with psycopg.connect(_with_dbname(self.server_url, name), autocommit=True) as c:
            if _scalar(c, _FINGERPRINT) != self.fingerprint:
                return False
            c.execute("SET lock_timeout = '5s'")
            c.execute(_RESET)
        return True

    def _drop(self, name: str) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        while self.free:
            self._drop(self.free.pop())


def _scalar(conn: psycopg.Connection[Any], statement: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(statement, params or None).fetchone()
    return None if row is None else row[0]


@pytest.fixture(scope="session")
def _databases(server_url: str, template_name: str) -> Iterator[_Databases]:
    databases = _Databases(server_url, template_name)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def database_url(server_url: str, _databases: _Databases) -> Iterator[str]:
    """A database equal to a fresh copy of the template (the workhorse schema, no rows), reset
    or dropped after the test."""
    name = _databases.take()
    try:
        yield _with_dbname(server_url, name)
    finally:
        _databases.give_back(name)


@pytest.fixture
def eu_url(server_url: str, _databases: _Databases) -> Iterator[str]:
    """A second database for tests of several databases (docs/design.md "Several databases"):
    another fresh copy of the template, reset or dropped after the test, as `database_url`."""
    name = _databases.take()
    try:
        yield _with_dbname(server_url, name)
    finally:
        _databases.give_back(name)


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test's database."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def queue(conn: psycopg.Connection[Any]) -> Queue:
    return Queue(conn)


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read the developer's own workhorse settings by accident."""
    for name in ("WORKHORSE_DATABASE_URL", "WORKHORSE_DATABASES",
                 "WORKHORSE_DEFAULT_CONCURRENCY_LIMIT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def pgbouncer(server_url: str) -> Iterator[PgBouncer]:
    """PgBouncer 1.18 in transaction mode in front of the test server, for this test session.
    Its directory is under /tmp (not pytest's 0700 one): as root it runs as another user."""
    if binary() is None:
        skip_or_fail("pgbouncer is not installed (apt-get install -y pgbouncer; .ci/run does)")
    workdir = tempfile.mkdtemp(prefix="workhorse-pgbouncer-")
    bouncer = PgBouncer(server_url, Path(workdir)).start()
    try:
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def pgbouncer_url(pgbouncer: PgBouncer, database_url: str, _databases: _Databases) -> str:
    """The test's fresh database, through PgBouncer in transaction mode (dropped after the
    test, not reused: PgBouncer keeps links to it)."""
    _databases.shared.add(conninfo_to_dict(database_url)["dbname"])
    return pgbouncer.url_for(database_url)
