"""Which database: an explicit URL, then WORKHORSE_DATABASE_URL, then the embedded server."""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .errors import DatabaseError, first_line

ENV_URL = "WORKHORSE_DATABASE_URL"
ENV_AUTO_MIGRATE = "WORKHORSE_AUTO_MIGRATE"

_migrated: set[str] = set()
_migrated_lock = threading.Lock()


def resolve_url(explicit: str | None = None) -> str:
    """The DSN to use; starts the embedded server only when nothing else is configured."""
    if explicit:
        return explicit
    from_env = os.environ.get(ENV_URL)
    if from_env:
        return from_env
    from . import embedded

    return embedded.ensure_running()


def auto_migrate_enabled() -> bool:
    return os.environ.get(ENV_AUTO_MIGRATE, "1").strip().lower() not in ("0", "false", "no", "off")


def mask(url: str) -> str:
    """The URL with any password replaced, for banners and logs."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable database url>"
    if params.get("password"):
        params["password"] = "****"
        if "://" in url:
            user = str(params.get("user") or "")
            host = str(params.get("host") or "")
            port = f":{params['port']}" if params.get("port") else ""
            dbname = str(params.get("dbname") or "")
            if host.startswith("/"):
                return f"postgresql://{user}:****@/{dbname}?host={host}"
            return f"postgresql://{user}:****@{host}{port}/{dbname}"
        return make_conninfo("", **params)
    return url


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection, or DatabaseError with one clear line. Never prepares statements by itself
    (`prepare_threshold=None`): a prepared statement lives in one server session, which
    PgBouncer in transaction mode does not keep for us."""
    kwargs.setdefault("prepare_threshold", None)
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"cannot connect to {mask(url)}: {first_line(exc)}") from None


def ensure_schema(url: str) -> None:
    """Install or bring forward the schema once per process, unless WORKHORSE_AUTO_MIGRATE=0."""
    if not auto_migrate_enabled() or url in _migrated:
        return
    with _migrated_lock:
        if url in _migrated:
            return
        from .queue import Queue

        with connect(url, autocommit=True) as conn:
            Queue(conn).install_schema()
        _migrated.add(url)
