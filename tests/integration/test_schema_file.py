"""`workhorse/sql/schema.sql` is the whole current schema: a fresh install of the migrations
leaves exactly it (procrastinate's migration test, on the catalogs rather than pg_dump)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _schema_dump import dump, fresh_install_dump
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import _sql

RELEASED = Path(__file__).resolve().parents[1] / "fixtures" / "released" / "0.2.0" / "statements"
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


def test_a_0_2_0_database_upgrades_to_schema_sql(
    empty_database: psycopg.Connection[Any], server_url: str
) -> None:
    """A database 0.2.0 installed (its one migration, recorded with the checksum 0.2.0 recorded:
    tests/unit/test_released_files.py checks the text is the one it shipped), holding a job its
    enqueue wrote, is brought to this release by install_schema alone: it then matches
    schema.sql, and the job is claimed and completed by today's functions."""
    from workhorse import Queue

    version, name, text = _sql.migrations()[0]
    assert (version, name) == (1, "0001_baseline.sql")
    conn = empty_database
    conn.execute(_sql.statement("create_schema"))
    conn.execute(_sql.statement("create_schema_version"))
    conn.execute(text)
    conn.execute(_sql.statement("record_migration"), (version, name, _sql.checksum(text)))
    enqueue_0_2_0 = (RELEASED / "enqueue.sql").read_text("utf-8").strip().rstrip(";")
    [(job_id,)] = conn.execute(
        enqueue_0_2_0,  # type: ignore[call-overload]
        (["t"], ["q"], ["k"], [0], ['{"args": [], "kwargs": {}}'], [None], [None], [3],
         ["hold"], [None], [None])).fetchall()

    queue = Queue(conn)
    queue.install_schema()
    rows = conn.execute("SELECT version, name FROM workhorse.schema_version ORDER BY 1")
    assert rows.fetchall() == [(v, n) for v, n, _ in _sql.migrations()]
    assert _body(dump(conn)) == _body(_sql.schema())
    [claimed] = queue.claim("q", 1, 30)
    assert claimed.id == job_id
    queue.complete(claimed.id, claimed.fence, "done")
    job = queue.get_job(job_id)
    assert job is not None and job.result == "done"


def test_a_database_of_the_development_migrations_is_refused(
    empty_database: psycopg.Connection[Any],
) -> None:
    """0.3.0's development migrations 0002 to 0009 were squashed into one: a database that
    applied them records another migration 2 (and versions this package does not have), and is
    refused with nothing changed."""
    from workhorse import Queue, SchemaVersionError

    conn = empty_database
    Queue(conn).install_schema()
    conn.execute("UPDATE workhorse.schema_version SET name = '0002_job_keys.sql',"
                 " checksum = 'b9028ab47511fe8667c3d6f79d9a9533deaef0c9052331bfa077b47f3b25254c'"
                 " WHERE version = 2")
    for version, name in enumerate(["0003_fair_share_and_cost.sql", "0004_progress.sql",
                                    "0005_attempt_history.sql", "0006_workflows.sql",
                                    "0007_on_key_full.sql", "0008_dashboard_task_index.sql",
                                    "0009_budgets.sql"], 3):
        conn.execute("INSERT INTO workhorse.schema_version (version, name, checksum)"
                     " VALUES (%s, %s, 'development')", (version, name))
    before = dump(conn)
    with pytest.raises(SchemaVersionError):
        Queue(conn).install_schema()
    assert dump(conn) == before
