"""The pytest plugin workhorse ships (entry point `workhorse` in `pytest11`): the fixture
`workhorse_database_url`, a fresh database with the workhorse schema for each test, made from a
template on the embedded server (or on the server `WORKHORSE_TEST_DATABASE_URL` names) and
dropped afterwards.

    def test_signup_sends_mail(workhorse_database_url):
        app.database_url = workhorse_database_url
        ...

Its other fixtures are prefixed `workhorse_` too, so that they do not meet a project's own.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ENV_TEST_URL = "WORKHORSE_TEST_DATABASE_URL"
# Serializes building the template across processes (pytest-xdist workers).
_TEMPLATE_LOCK = 0x77687470_6C7567  # "whtplug"


def _with_dbname(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo("", **params)


def _ddl(admin: Any, statement: str, **names: str) -> None:
    """A CREATE/DROP/ALTER DATABASE statement, its names composed as identifiers."""
    from psycopg import sql

    from . import _sql

    admin.execute(_sql.statement(statement).format(
        **{key: sql.Identifier(value) for key, value in names.items()}))


@pytest.fixture(scope="session")
def workhorse_test_server_url() -> str:
    """The server the test databases live on: WORKHORSE_TEST_DATABASE_URL, else the embedded
    server (started if it is not running)."""
    url = os.environ.get(ENV_TEST_URL)
    if not url:
        from . import embedded

        url = embedded.ensure_running()
    return url


@pytest.fixture(scope="session")
def workhorse_template_database(workhorse_test_server_url: str) -> str:
    """The name of a database with this version's schema, built once per server and schema."""
    from . import _sql, database
    from .queue import Queue

    digest = hashlib.sha1(
        "".join(text for _, _, text in _sql.migrations()).encode()
    ).hexdigest()[:12]
    name = f"workhorse_plugin_tpl_{digest}"
    with database.connect(workhorse_test_server_url, role="test-admin", autocommit=True) as admin:
        admin.execute(_sql.statement("testing_template_lock"), (_TEMPLATE_LOCK,))
        try:
            exists = admin.execute(_sql.statement("testing_database_exists"), (name,)).fetchone()
            if not exists:
                building = f"{name}_building_{os.getpid()}"
                _ddl(admin, "testing_drop_database", name=building)
                _ddl(admin, "testing_create_database", name=building, template="template1")
                url = _with_dbname(workhorse_test_server_url, building)
                with database.connect(url, role="migrate", autocommit=True) as conn:
                    Queue(conn).install_schema()
                _ddl(admin, "testing_rename_database", name=building, new_name=name)
        finally:
            admin.execute(_sql.statement("testing_template_unlock"), (_TEMPLATE_LOCK,))
    return name


@pytest.fixture
def workhorse_database_url(
    workhorse_test_server_url: str, workhorse_template_database: str
) -> Iterator[str]:
    """A fresh database with the workhorse schema, for this test only; dropped afterwards
    (connections still open to it are ended)."""
    from . import database

    name = f"workhorse_test_{uuid.uuid4().hex[:16]}"
    with database.connect(workhorse_test_server_url, role="test-admin", autocommit=True) as admin:
        _ddl(admin, "testing_create_database", name=name, template=workhorse_template_database)
    try:
        yield _with_dbname(workhorse_test_server_url, name)
    finally:
        with database.connect(workhorse_test_server_url, role="test-admin",
                              autocommit=True) as admin:
            _ddl(admin, "testing_drop_database", name=name)
