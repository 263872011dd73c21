"""`workhorse/sql/schema.sql` is the whole current schema: a fresh install of the migrations
leaves exactly it (procrastinate's migration test, on the catalogs rather than pg_dump)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from _schema_dump import dump, fresh_install_dump
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import _sql

REGENERATE = "regenerate it: .venv/bin/python tests/integration/_schema_dump.py"


def _body(text: str) -> str:
    """The dump without its header comment (which names the recorded version)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("-- "))


@pytest.fixture
def empty_database(server_url: str) -> Iterator[psycopg.Connection[Any]]:
    name = f"wh_schema_{uuid.uuid4().hex[:12]}"
    params = conninfo_to_dict(server_url)
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    params["dbname"] = name
    try:
        with psycopg.connect(make_conninfo(**params), autocommit=True) as conn:
            yield conn
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_fresh_install_matches_schema_sql(server_url: str) -> None:
    installed = fresh_install_dump(server_url)
    assert installed == _sql.schema(), f"the migrations and schema.sql differ; {REGENERATE}"


def test_schema_sql_is_the_whole_schema_and_runs(empty_database: psycopg.Connection[Any]) -> None:
    """Applied on its own to an empty database, schema.sql gives back itself."""
    empty_database.execute("SET check_function_bodies = off")  # functions come in name order
    empty_database.execute(_sql.schema())
    assert _body(dump(empty_database)) == _body(_sql.schema())


def test_the_comparison_sees_a_one_line_difference(conn: psycopg.Connection[Any]) -> None:
    """The checker can fail: a database one index, one option or one function body away from
    schema.sql does not compare equal."""
    expected = _sql.schema()
    assert dump(conn) == expected  # the fixture's database is a fresh install too
    changes = [
        "CREATE INDEX jobs_extra_idx ON workhorse.jobs (task)",
        "ALTER TABLE workhorse.key_hints SET (autovacuum_vacuum_threshold = 999)",
        f"CREATE OR REPLACE FUNCTION workhorse.{_sql.function_name('_admission_lock_id')}"
        "(p_queue text) RETURNS bigint"
        " LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT hashtextextended(p_queue, 1) $$",
    ]
    for change in changes:
        with conn.transaction():
            conn.execute(change)
            assert dump(conn) != expected, change
            raise psycopg.Rollback()


def test_every_function_file_is_applied_by_exactly_one_migration() -> None:
    files = _sql.function_files()
    applied: list[str] = []
    for _, _, text in _sql.migrations():
        applied += re.findall(r"CREATE FUNCTION workhorse\.(\w+)\(", text)
    assert sorted(applied) == sorted(files)
