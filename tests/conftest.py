"""The database fixture: one template database with the schema, one fresh copy per test.

Uses WORKHORSE_TEST_DATABASE_URL when it is set, and the embedded server otherwise.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
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


@pytest.fixture
def database_url(server_url: str, template_name: str) -> Iterator[str]:
    """A fresh database with the workhorse schema, dropped after the test."""
    name = f"wh_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')
    try:
        yield _with_dbname(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
    for name in ("WORKHORSE_DATABASE_URL", "WORKHORSE_DEFAULT_CONCURRENCY_LIMIT"):
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
def pgbouncer_url(pgbouncer: PgBouncer, database_url: str) -> str:
    """The test's fresh database, through PgBouncer in transaction mode."""
    return pgbouncer.url_for(database_url)
