"""`get_job` takes an int id: anything else is refused with a typed error before any statement
is sent (on a closed connection the error would otherwise be psycopg's)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from workhorse import AsyncQueue, InvalidOptionsError, Queue


@pytest.mark.parametrize("job_id", ["1", b"1", 1.0, True, None])
def test_get_job_refuses_an_id_that_is_not_an_int(database_url: str, job_id: Any) -> None:
    conn = psycopg.connect(database_url, autocommit=True)
    conn.close()  # nothing can be sent: the refusal must come first
    with pytest.raises(InvalidOptionsError, match="a job id is an int"):
        Queue(conn).get_job(job_id)


async def _async_get(database_url: str, job_id: Any) -> None:
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    await conn.close()
    await AsyncQueue(conn).get_job(job_id)


def test_async_get_job_refuses_a_string_id(database_url: str) -> None:
    import anyio

    with pytest.raises(InvalidOptionsError, match="a job id is an int"):
        anyio.run(_async_get, database_url, "1")


def test_get_job_takes_an_int(conn: psycopg.Connection[Any]) -> None:
    assert Queue(conn).get_job(987654321) is None
