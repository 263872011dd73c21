"""install_schema: idempotent, safe to race, brings an older schema forward, refuses a newer one."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from _integration import collect, spawn, start
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import EnqueueOptions, Queue, SchemaVersionError, _sql

LATEST = _sql.latest_version()
ALL_VERSIONS = [version for version, _, _ in _sql.migrations()]


@pytest.fixture
def empty_database_url(server_url: str) -> Iterator[str]:
    """A brand-new database without the workhorse schema (not made from the template)."""
    name = f"wh_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _catalog(conn: Any) -> list[tuple[Any, ...]]:
    """Every object in the workhorse schema, and the recorded versions."""
    objects = conn.execute(
        "SELECT c.relname, c.relkind::text FROM pg_class c"
        " WHERE c.relnamespace = 'workhorse'::regnamespace"
        " UNION ALL"
        " SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', 'f'"
        " FROM pg_proc p WHERE p.pronamespace = 'workhorse'::regnamespace"
        " ORDER BY 1"
    ).fetchall()
    versions = conn.execute(
        "SELECT version, name FROM workhorse.schema_version ORDER BY 1"
    ).fetchall()
    return [*objects, *versions]


def _versions(conn: Any) -> list[int]:
    rows = conn.execute("SELECT version FROM workhorse.schema_version ORDER BY 1").fetchall()
    return [row[0] for row in rows]


def _round_trip(conn: Any) -> None:
    q = Queue(conn)
    job_id = q.enqueue("t", {"ok": True}, EnqueueOptions(queue="q", concurrency_key="k"))
    [claimed] = q.claim("q", 1, 30)
    q.complete(claimed.id, claimed.fence, 1)
    job = q.get_job(job_id)
    assert job is not None and job.result == 1


def test_install_is_idempotent(queue: Queue, conn: Any) -> None:
    before = _catalog(conn)
    assert _versions(conn) == ALL_VERSIONS
    queue.install_schema()
    queue.install_schema()
    assert _catalog(conn) == before
    _round_trip(conn)


def test_install_on_an_empty_database(empty_database_url: str) -> None:
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        Queue(conn).install_schema()
        assert _versions(conn) == ALL_VERSIONS
        _round_trip(conn)


def test_concurrent_install_from_4_processes(empty_database_url: str) -> None:
    installers = [spawn("install", empty_database_url) for _ in range(4)]
    start(installers)
    assert [report["ok"] for report in collect(installers)] == [True] * 4
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        assert _versions(conn) == ALL_VERSIONS
        _round_trip(conn)


def test_an_older_schema_is_brought_forward(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at today's last migration gets a later one applied, and recorded with its
    checksum (the later migration is made up here: 0.2.0 ships one)."""
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        Queue(conn).install_schema()
        later = (LATEST + 1, f"{LATEST + 1:04d}_later.sql",
                 "CREATE TABLE workhorse.later_table (id integer PRIMARY KEY);")
        monkeypatch.setattr(_sql, "migrations", lambda: (*_sql_migrations(), later))
        monkeypatch.setattr(_sql, "latest_version", lambda: LATEST + 1)
        Queue(conn).install_schema()
        assert _versions(conn) == [*ALL_VERSIONS, LATEST + 1]
        row = conn.execute("SELECT checksum FROM workhorse.schema_version WHERE version = %s",
                           (LATEST + 1,)).fetchone()
        assert row == (_sql.checksum(later[2]),)
        assert conn.execute("SELECT to_regclass('workhorse.later_table')").fetchone() != (None,)
        _round_trip(conn)


_sql_migrations = _sql.migrations


def test_a_newer_schema_is_refused(queue: Queue, conn: Any) -> None:
    conn.execute("INSERT INTO workhorse.schema_version (version, name, checksum)"
                 " VALUES (%s, 'future.sql', 'abc')", (LATEST + 1,))
    before = _catalog(conn)
    with pytest.raises(SchemaVersionError, match=str(LATEST + 1)):
        queue.install_schema()
    assert _catalog(conn) == before


def test_install_in_callers_transaction_rolls_back(empty_database_url: str) -> None:
    with psycopg.connect(empty_database_url) as caller:
        Queue(caller).install_schema()
        caller.rollback()
        row = caller.execute("SELECT to_regnamespace('workhorse')").fetchone()
        assert row == (None,)


def test_a_migration_recorded_under_another_name_is_refused(queue: Queue, conn: Any) -> None:
    conn.execute("UPDATE workhorse.schema_version SET name = '0001_jobs.sql' WHERE version = 1")
    before = _catalog(conn)
    with pytest.raises(SchemaVersionError, match=re.escape("migration 1 as '0001_jobs.sql'")):
        queue.install_schema()
    assert _catalog(conn) == before


def _install_with_body(conn: Any, text: str) -> None:
    """What a package whose baseline had `text` leaves: the migration applied and recorded with
    its own checksum."""
    version, name, _ = _sql.migrations()[0]
    conn.execute(_sql.statement("create_schema"))
    conn.execute(_sql.statement("create_schema_version"))
    conn.execute(text)
    conn.execute(_sql.statement("record_migration"), (version, name, _sql.checksum(text)))


@pytest.mark.parametrize("changed", [True, False], ids=["another-body", "same-body"])
def test_a_database_that_applied_another_body_of_a_migration_is_refused(
    empty_database_url: str, changed: bool
) -> None:
    """The migration this package ships, as another build had it (one function body differs,
    under the same file name): install_schema names the migration and changes nothing. The same
    body is accepted, so the check can fail both ways."""
    version, name, text = _sql.migrations()[0]
    # The claim this migration defines (a later migration's newer claim is not in its text).
    claim = re.search(r"CREATE FUNCTION workhorse\.(claim_v\d+)\(", text).group(1)  # type: ignore[union-attr]
    body = text.replace("v_room := p_limit;", "v_room := p_limit - 1;", 1) if changed else text
    assert (body != text) is changed
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        _install_with_body(conn, body)
        before = _catalog(conn)
        if changed:
            refused = re.escape(f"migration {version} as '{name}'")
            with pytest.raises(SchemaVersionError, match=refused):
                Queue(conn).install_schema()
            assert _catalog(conn) == before
            assert "p_limit - 1" in conn.execute(
                "SELECT prosrc FROM pg_proc WHERE proname = %s", (claim,)).fetchone()[0]
        else:
            Queue(conn).install_schema()
            _round_trip(conn)


def test_a_database_installed_by_workhorse_0_1_is_refused_with_how_to_reset_it(
    empty_database_url: str,
) -> None:
    """0.1 recorded its eleven migrations without checksums (and under other names): refused,
    saying how to reset it, and nothing changed. Resetting as told then installs."""
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA workhorse")
        conn.execute("CREATE TABLE workhorse.schema_version (version integer PRIMARY KEY,"
                     " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        conn.execute("CREATE TABLE workhorse.jobs (id bigint PRIMARY KEY)")
        names = ["0001_jobs.sql", "0002_admission_tables.sql", "0003_workers.sql",
                 "0004_functions_v1.sql", "0005_admission_v2.sql", "0006_results.sql",
                 "0007_throughput.sql", "0008_schedules.sql", "0009_dashboard.sql",
                 "0010_claim_v4.sql", "0011_claim_v5.sql"]
        for version, name in enumerate(names, 1):
            conn.execute("INSERT INTO workhorse.schema_version (version, name) VALUES (%s, %s)",
                         (version, name))
        before = _catalog(conn)
        with pytest.raises(SchemaVersionError, match=r"workhorse 0\.1") as refused:
            Queue(conn).install_schema()
        assert "DROP SCHEMA workhorse CASCADE" in str(refused.value)
        assert _catalog(conn) == before
        conn.execute("DROP SCHEMA workhorse CASCADE")
        Queue(conn).install_schema()
        assert _versions(conn) == ALL_VERSIONS
        _round_trip(conn)
