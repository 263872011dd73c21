"""The driver of the operations: an operation is a generator that yields `(statement, params)`
and receives the rows; `execute(conn, op)` drives it on a `psycopg.Connection`,
`execute_async(aconn, op)` on a `psycopg.AsyncConnection`, and translates the driver's errors.
With it, the JSON every statement sends and reads (one encoder, the 1 MiB limit) and a failure's
stored document. Nothing here knows a statement but the opening of a transaction."""

from __future__ import annotations

import json
import re
import traceback as traceback_module
from collections.abc import Generator
from typing import Any, TypeVar

import psycopg
from psycopg.pq import ExecStatus
from psycopg.types.json import set_json_loads

from . import _sql
from .errors import PayloadError, translate

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
Step = tuple[Any, Any]
Operation = Generator[Step, Rows, T]

PAYLOAD_LIMIT = 1024 * 1024
# jsonb cannot store NUL in a string; catch "\u0000" (not an escaped backslash followed by it).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")

# ---- JSON ---------------------------------------------------------------------------------------


# One encoder for every value: json.dumps with options builds a new one per call, which costs as
# much as encoding a small payload.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def encode_json(value: Any, what: str = "payload") -> str:
    """JSON text for `value`, or PayloadError: not JSON, NaN/infinity, NUL, or over 1 MiB."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise PayloadError(f"{what} is nested too deeply to be JSON") from None
    if text.isascii():  # the usual case: its size is its length, and it has no surrogate
        size = len(text)
    else:
        try:
            # Also the check for lone surrogates, which are not Unicode text (nor valid in jsonb).
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise PayloadError(f"{what} contains a lone surrogate, not valid Unicode") from None
    if size > PAYLOAD_LIMIT:
        raise PayloadError(f"{what} is {size} bytes encoded; the limit is 1 MiB")
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise PayloadError(f"{what} contains a NUL character, which PostgreSQL cannot store")
    return text


def load_json(data: str | bytes) -> Any:
    """psycopg's json/jsonb loader for the worker's connections: every claimed job has a meta,
    usually `{}`, which needs no parser; and text, not bytes, spares json its encoding detection
    (the two were a tenth of a no-op job's worker time)."""
    if data == b"{}":
        return {}
    return json.loads(data if isinstance(data, str) else str(data, "utf-8"))


def use_fast_json(conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> None:
    set_json_loads(load_json, conn)


# A failure's message and traceback are cut to these many characters (the end of a traceback,
# where the error is, is kept), so that the stored document stays far below the 1 MiB limit.
ERROR_MESSAGE_LIMIT = 16 * 1024
ERROR_TRACEBACK_LIMIT = 64 * 1024


def _clipped(text: str, limit: int, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep_end:
        return f"[{cut} characters cut]...{text[-limit:]}"
    return f"{text[:limit]}...[{cut} characters cut]"


def error_document(exc: BaseException) -> dict[str, Any]:
    """The stored shape of a failure: type, message and traceback, bounded in size. An exception
    whose own `__str__` fails still gives a document."""
    try:
        message = str(exc)
    except Exception as broken:
        message = f"<unprintable {type(exc).__name__}: its __str__ raised {broken!r}>"
    try:
        trace = "".join(traceback_module.format_exception(exc))
    except Exception:
        trace = "".join(traceback_module.format_tb(exc.__traceback__)) + type(exc).__name__
    return {
        "type": type(exc).__name__,
        "message": _clipped(message, ERROR_MESSAGE_LIMIT),
        "traceback": _clipped(trace, ERROR_TRACEBACK_LIMIT, keep_end=True),
    }


# ---- drivers ------------------------------------------------------------------------------------


# `prepare=False` on every statement: psycopg would otherwise prepare a statement on its fifth
# execution, and a server-side prepared statement belongs to one server session, which PgBouncer
# in transaction mode does not give us (the next transaction may run on another server
# connection: "prepared statement ... does not exist", or DuplicatePreparedStatement). Our
# statements are short calls of plpgsql functions, which cache their own plans per session, so
# preparing the outer call saves little (benchmarks: within noise on a direct connection).
#
# Whether a statement returned rows is read from its result's status, not from
# `cursor.description`, which builds a Column object per column at every call (14 µs for a
# claim's 17 columns, against 0.1 µs; a claim's client CPU is about 370 µs, issue #40).


def _has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    result = cur.pgresult
    return result is not None and result.status == ExecStatus.TUPLES_OK


def drive(conn: psycopg.Connection[Any], operation: Operation[T]) -> T:
    """Run `operation` on `conn`, statement by statement; psycopg errors pass through."""
    try:
        statement, params = next(operation)
        while True:
            with conn.cursor() as cur:
                cur.execute(statement, params, prepare=False)
                rows = cur.fetchall() if _has_rows(cur) else []
            statement, params = operation.send(rows)
    except StopIteration as stop:
        return stop.value


async def drive_async(conn: psycopg.AsyncConnection[Any], operation: Operation[T]) -> T:
    try:
        statement, params = next(operation)
        while True:
            async with conn.cursor() as cur:
                await cur.execute(statement, params, prepare=False)
                rows = await cur.fetchall() if _has_rows(cur) else []
            statement, params = operation.send(rows)
    except StopIteration as stop:
        return stop.value


def raise_translated(exc: psycopg.Error) -> None:
    """Raise the workhorse error our own SQL meant (by its SQLSTATE), if it is one."""
    translated = translate(exc)
    if translated is not None:
        raise translated from None


def execute(conn: psycopg.Connection[Any], operation: Operation[T]) -> T:
    """`drive`, with our SQL's own errors raised as workhorse errors."""
    try:
        return drive(conn, operation)
    except psycopg.Error as exc:
        raise_translated(exc)
        raise


async def execute_async(conn: psycopg.AsyncConnection[Any], operation: Operation[T]) -> T:
    try:
        return await drive_async(conn, operation)
    except psycopg.Error as exc:
        raise_translated(exc)
        raise


def open_transaction() -> Operation[None]:
    yield _sql.statement("open_transaction"), ()

