"""A database that cannot be reached, through the public API: every entry point raises
`DatabaseError` (a `WorkhorseError`) in one line that names the server without its password,
and nothing is left behind."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import workhorse
from workhorse import DatabaseError, WorkhorseError

SECRET = "s3cret-pw"
REFUSED = f"postgresql://someone:{SECRET}@127.0.0.1:1/nowhere"  # nothing listens on port 1


@pytest.fixture
def missing_database(server_url: str) -> str:
    """The test server, a database on it that does not exist."""
    params: dict[str, Any] = {**conninfo_to_dict(server_url),
                              "dbname": f"absent_{uuid.uuid4().hex[:8]}"}
    return make_conninfo("", **params)


@pytest.fixture(params=["refused", "no such database"])
def bad_url(request: pytest.FixtureRequest, missing_database: str) -> str:
    return REFUSED if request.param == "refused" else missing_database


@pytest.fixture
def app(bad_url: str) -> Iterator[workhorse.App]:
    app = workhorse.App("unreachable", database_url=bad_url)
    try:
        yield app
    finally:
        app.close()


def _entry_points(app: workhorse.App) -> dict[str, Callable[[], Any]]:
    @app.task(queue="q", max_active=2)
    def add(a: int, b: int) -> int:
        return a + b

    return {
        "delay": lambda: add.delay(1, 2),
        "apply_async": lambda: add.apply_async(args=(1, 2), priority=3),
        "map": lambda: add.map([(1, 2), (3, 4)]),
        "send_task": lambda: app.send_task(add.name, args=[1, 2]),
        "sync": app.sync,
        "handle": lambda: app.handle(1).status(),
        "cancel": lambda: app.cancel([1]),
        "delay_async": lambda: asyncio.run(add.delay_async(1, 2)),
        "sync_async": lambda: asyncio.run(app.sync_async()),
    }


def test_every_entry_point_raises_database_error_in_one_line(
    app: workhorse.App, bad_url: str
) -> None:
    for name, call in _entry_points(app).items():
        with pytest.raises(DatabaseError) as caught:
            call()
        message = str(caught.value)
        assert isinstance(caught.value, WorkhorseError)
        assert "\n" not in message.strip(), (name, message)
        assert message.startswith("cannot connect to "), (name, message)
        assert SECRET not in message, (name, message)
        if bad_url == REFUSED:
            assert "127.0.0.1" in message and "****" in message, (name, message)


def test_the_server_behind_a_bad_database_name_is_untouched(
    missing_database: str, server_url: str
) -> None:
    name = conninfo_to_dict(missing_database)["dbname"]
    app = workhorse.App("unreachable", database_url=missing_database)
    try:
        with pytest.raises(DatabaseError, match="does not exist"):
            _entry_points(app)["delay"]()
    finally:
        app.close()
    with psycopg.connect(server_url, autocommit=True) as admin:
        assert admin.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                             (name,)).fetchone() is None
