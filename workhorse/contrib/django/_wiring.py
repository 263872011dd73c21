"""What the contrib app's `ready()` wires into workhorse, each piece installed once per process:

  - the framework's step of "which database" (database.install_framework): the setting
    `WORKHORSE_DATABASE_URL`, else Django's database; and the transaction an enqueue joins
    (Django's connection while it is in an atomic block, for an App on that database);
  - the worker's hooks: Django's connections closed before a slot is forked, and the unusable or
    expired ones before and after each job (`close_old_connections`, as Celery does);
  - the App's pools closed before Django drops a test database (it cannot drop one that a
    session still uses);
  - autodiscovery: the `tasks` module of every installed app imported.
"""

from __future__ import annotations

import functools
import threading
import warnings
from typing import Any

import psycopg
from psycopg.pq import Format

from ... import _enqueue, _results, database
from . import SETTING_DATABASE_URL, alias_url, connection, database_alias

_installed = False
_lock = threading.Lock()
_warned: set[str] = set()

# Django loads these as text on its connections (jsonb is decoded by its JSONField; timestamps
# in its own time zone): our statements read them with psycopg's own loaders, as on any other
# connection of ours.
_OUR_LOADERS = ("json", "jsonb", "timestamptz", "timestamp", "inet", "cidr")


class BorrowedConnection:
    """Django's psycopg connection as workhorse's statements want it: cursors of psycopg's own
    class (server-side binding, not Django's client-side cursor factory) with psycopg's own
    loaders. Everything else (the transaction, `info`) is Django's connection itself."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def cursor(self) -> psycopg.Cursor[Any]:
        cur: psycopg.Cursor[Any] = psycopg.Cursor(self.raw)
        for name in _OUR_LOADERS:
            info = psycopg.adapters.types.get(name)
            if info is None:
                continue
            for fmt in (Format.TEXT, Format.BINARY):
                loader = psycopg.adapters.get_loader(info.oid, fmt)
                if loader is not None:
                    cur.adapters.register_loader(info.oid, loader)
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _is_postgresql(alias: str) -> bool:
    # From the settings, not the connection: that would import the backend (and its driver).
    from django.conf import settings

    engine = str(settings.DATABASES[alias].get("ENGINE") or "")
    return "postgresql" in engine or "postgis" in engine


def framework_url() -> str | None:
    """The setting WORKHORSE_DATABASE_URL, else Django's database when it is PostgreSQL."""
    from django.conf import settings

    explicit = getattr(settings, SETTING_DATABASE_URL, None)
    if explicit:
        return str(explicit)
    alias = database_alias()
    return alias_url(alias) if _is_postgresql(alias) else None


def joined(app_url: str | None) -> Any:
    """Django's connection when it is in an atomic block and the App's database is Django's
    (the App names none of its own, or names the same one); else None."""
    from django.db import connections

    alias = database_alias()
    wrapper = connections[alias]
    if not wrapper.in_atomic_block:
        return None
    target = app_url or framework_url()
    if target is None or not _is_postgresql(alias) or not database.same_database(
            target, alias_url(alias)):
        if target is not None and target not in _warned:
            _warned.add(target)
            warnings.warn(
                f"workhorse: an enqueue inside transaction.atomic() on {alias!r} goes to another "
                f"database ({database.mask(target)}), so it commits at once, not with the "
                "block; use wh_django.on_commit(...) to enqueue after the commit, or give the "
                "App no database_url of its own to enqueue in Django's transaction",
                RuntimeWarning, stacklevel=6)
        return None
    return BorrowedConnection(connection(alias))


def install_schema(django_connection: Any) -> None:
    """The migration's step: the workhorse schema on the App's database. On Django's own
    connection, in the migration's transaction, when that is the App's database (always under
    `manage.py test`); on a connection of its own to the setting's database otherwise."""
    from ...queue import Queue

    alias = database_alias()
    if django_connection.alias != alias:
        return
    target = framework_url()
    if target is not None and _is_postgresql(alias) and database.same_database(
            target, alias_url(alias)):
        Queue(BorrowedConnection(connection(alias))).install_schema()  # type: ignore[arg-type]
        return
    with database.connect(database.resolve_url(None), role="migrate", autocommit=True) as conn:
        Queue(conn).install_schema()


def _close_before_fork() -> None:
    from django.db import connections

    connections.close_all()


def _close_old_connections() -> None:
    from django.db import close_old_connections

    close_old_connections()


def _close_apps_before_test_databases_drop() -> None:
    """Wrap Django's `destroy_test_db`: every App's pools close first, so that no workhorse
    session keeps Django from dropping the test database."""
    from django.db.backends.base.creation import BaseDatabaseCreation

    original = BaseDatabaseCreation.destroy_test_db
    if getattr(original, "workhorse_closes_apps", False):
        return

    @functools.wraps(original)
    def destroy_test_db(self: Any, *args: Any, **kwargs: Any) -> Any:
        _enqueue.close_every_app()
        # A results waiter (JobHandle.get on a job not yet resting) keeps its connection until
        # it has been idle for IDLE_EXIT seconds: nobody waits any more, so it ends by then.
        for thread in threading.enumerate():
            if thread.name == "workhorse-results":
                thread.join(timeout=_results.IDLE_EXIT + _results.POLL_INTERVAL + 1.0)
        return original(self, *args, **kwargs)

    destroy_test_db.workhorse_closes_apps = True  # type: ignore[attr-defined]
    BaseDatabaseCreation.destroy_test_db = destroy_test_db


def autodiscover() -> None:
    """Import the `tasks` module of every installed app that has one (as Celery does)."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("tasks")


def install() -> None:
    """Everything above, once per process (the contrib app's `ready()`)."""
    global _installed
    from django.conf import settings

    from ...worker import hooks
    from . import check_psycopg3

    alias = database_alias()
    if alias not in settings.DATABASES:
        from ...errors import InvalidOptionsError

        raise InvalidOptionsError(
            f"WORKHORSE_DATABASE_ALIAS is {alias!r}, which DATABASES does not define")
    if _is_postgresql(alias):
        check_psycopg3()
    with _lock:
        if not _installed:
            database.install_framework(framework_url, joined)
            hooks.add_before_fork(_close_before_fork)
            hooks.add_between_jobs(_close_old_connections)
            _close_apps_before_test_databases_drop()
            _installed = True
    autodiscover()
    _prepare_tasks_backends()


def _prepare_tasks_backends() -> None:
    """Django tasks decorated while the App's module was importing get registered now."""
    from django.conf import settings

    for alias, params in (getattr(settings, "TASKS", None) or {}).items():
        if str(params.get("BACKEND", "")).startswith("workhorse.contrib.django"):
            from django.tasks import task_backends

            task_backends[alias].prepare()
