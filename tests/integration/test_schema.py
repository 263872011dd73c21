"""install_schema: idempotent, safe to race, brings an older schema forward, refuses a newer one."""

from __future__ import annotations

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


def test_an_older_schema_is_brought_forward(empty_database_url: str) -> None:
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        first_version, first_name, first_text = _sql.migrations()[0]
        conn.execute("CREATE SCHEMA workhorse")
        conn.execute(
            "CREATE TABLE workhorse.schema_version (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(first_text)
        conn.execute("INSERT INTO workhorse.schema_version (version, name) VALUES (%s, %s)",
                     (first_version, first_name))
        Queue(conn).install_schema()
        assert _versions(conn) == ALL_VERSIONS
        _round_trip(conn)


def test_a_newer_schema_is_refused(queue: Queue, conn: Any) -> None:
    conn.execute("INSERT INTO workhorse.schema_version (version, name) VALUES (%s, 'future.sql')",
                 (LATEST + 1,))
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


def test_a_schema_from_an_unreleased_layout_is_refused(queue: Queue, conn: Any) -> None:
    """A 0.1 database recorded `0002_policies.sql` where this code has another file: refused with
    what to do, and nothing changed."""
    conn.execute("UPDATE workhorse.schema_version SET name = '0002_policies.sql' WHERE version = 2")
    before = _catalog(conn)
    with pytest.raises(SchemaVersionError, match="DROP SCHEMA workhorse CASCADE"):
        queue.install_schema()
    assert _catalog(conn) == before
