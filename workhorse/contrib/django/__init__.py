"""Django: the contrib app, and the functions that enqueue on Django's own psycopg 3 connection
so that a job commits with the model.

    # settings.py
    INSTALLED_APPS = [..., "workhorse.contrib.django"]
    WORKHORSE_APP = "shop.tasks:app"        # what `manage.py workhorse worker` runs

    # shop/tasks.py
    app = workhorse.App("shop")             # no database_url: Django's database, read at first use

    with transaction.atomic():
        order = Order.objects.create(total=total)
        send_receipt.delay(order.id)        # on Django's connection: commits or rolls back with it

    wh_django.on_commit(send_receipt, order.id)   # or: enqueue only once the commit happened

With the app installed (its app config is labelled `workhorse`):
  - `manage.py migrate` installs the workhorse schema (a migration of this app), so the test
    database of `manage.py test` has it too;
  - an App with no `database_url` of its own uses, at first use, the setting
    `WORKHORSE_DATABASE_URL` if the project has one, else Django's database (the alias
    `WORKHORSE_DATABASE_ALIAS`, default "default"); the command line's `--database-url` wins
    over both, the environment's `WORKHORSE_DATABASE_URL` comes after them;
  - inside `transaction.atomic()` on that alias, `.delay()` and `.apply_async()` enqueue on
    Django's connection, in its transaction (an explicit `app.using(conn)` wins; an App whose
    own database_url names another database never joins, and warns once);
  - the `tasks.py` module of every installed app is imported at setup (autodiscovery);
  - `manage.py workhorse [global options] VERB ...` is the `workhorse` command with Django set
    up (APP from `WORKHORSE_APP` when omitted);
  - a worker closes Django's connections before it forks its slots, and unusable or expired
    ones before and after each job, as Celery does;
  - the App's pools are closed before `manage.py test` drops its test databases.

`connection()` is the raw psycopg 3 connection under Django's; `atomic(app)` is
`transaction.atomic()` with `app.using(connection())`, kept from before the contrib app joined
on its own. `on_commit` enqueues on the App's own pool after Django commits: the job cannot
exist without the model, but a crash between the two commits loses the job (the joined form
cannot). psycopg 2 is refused with a clear error: workhorse speaks psycopg 3.

`TasksBackend` is a backend for Django's own tasks framework (`django.tasks`, Django >= 6.0):
see `workhorse.contrib.django.tasks_backend`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from ...errors import InvalidOptionsError

SETTING_APP = "WORKHORSE_APP"
SETTING_DATABASE_URL = "WORKHORSE_DATABASE_URL"
SETTING_ALIAS = "WORKHORSE_DATABASE_ALIAS"


def database_alias() -> str:
    """The Django database alias workhorse follows: the setting `WORKHORSE_DATABASE_ALIAS`, by
    default "default".

    >>> database_alias()                                              # doctest: +SKIP
    'default'
    """
    from django.conf import settings

    return str(getattr(settings, SETTING_ALIAS, None) or "default")


def connection(using: str | None = None) -> psycopg.Connection[Any]:
    """The psycopg 3 connection under Django's connection `using` (default: the alias workhorse
    follows), opened if need be.

    >>> with app.using(wh_django.connection()):                      # doctest: +SKIP
    ...     send_receipt.delay(order.id)
    """
    from django.db import connections

    wrapper = connections[using or database_alias()]
    engine = str(wrapper.settings_dict.get("ENGINE") or "")
    if "postgresql" not in engine and "postgis" not in engine:
        raise InvalidOptionsError(
            f"Django database {wrapper.alias!r} is not PostgreSQL (engine {engine!r}); "
            "workhorse enqueues on a PostgreSQL connection"
        )
    check_psycopg3()
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise InvalidOptionsError(
            f"Django database {wrapper.alias!r} is not on psycopg 3 (driver "
            f"{type(raw).__module__}); workhorse enqueues on a psycopg 3 connection"
        )
    return raw


def check_psycopg3() -> None:
    """InvalidOptionsError, with what to do, when Django's PostgreSQL backend runs on psycopg 2
    (Django < 4.2, or psycopg 2 preferred): workhorse enqueues on psycopg 3 connections only.

    >>> check_psycopg3()                                              # doctest: +SKIP
    """
    try:
        from django.db.backends.postgresql.psycopg_any import is_psycopg3
    except ImportError:
        is_psycopg3 = False
    if not is_psycopg3:
        import django

        raise InvalidOptionsError(
            f"Django {django.get_version()} runs PostgreSQL on psycopg 2; workhorse needs "
            "psycopg 3 (Django >= 4.2 picks it when it is installed: pip install "
            "'psycopg[binary]>=3.2', and uninstall psycopg2 if Django still prefers it)"
        )


@contextmanager
def atomic(app: Any, using: str | None = None) -> Iterator[psycopg.Connection[Any]]:
    """`transaction.atomic(using)` with `app.using(...)` its connection: every enqueue in the
    block commits or rolls back with the block's model writes.

    >>> with wh_django.atomic(app):                                   # doctest: +SKIP
    ...     order = Order.objects.create(total=30)
    ...     send_receipt.delay(order.id)
    """
    from django.db import transaction

    alias = using or database_alias()
    with transaction.atomic(using=alias), app.using(connection(alias)) as conn:
        yield conn


def on_commit(task: Any, *args: Any, using: str | None = None, **kwargs: Any) -> None:
    """Enqueue `task(*args, **kwargs)` once Django's current transaction commits (at once
    outside one); nothing is enqueued if it rolls back.

    >>> wh_django.on_commit(send_receipt, order.id)                   # doctest: +SKIP
    """
    from django.db import transaction

    transaction.on_commit(lambda: task.delay(*args, **kwargs), using=using or database_alias())


# OPTIONS that Django or psycopg consume in Python: they are not libpq connection parameters.
_NOT_CONNINFO = frozenset({
    "assume_role", "isolation_level", "pool", "server_side_binding", "cursor_factory",
    "context", "prepare_threshold", "autocommit", "row_factory",
})


def database_url(using: str | None = None) -> str:
    """The `WORKHORSE_DATABASE_URL` setting if the project has one, else a DSN for
    `DATABASES[using]` (default: the alias workhorse follows): its NAME, then its `OPTIONS`
    (libpq parameters such as `sslmode`, `sslrootcert`, `options`, `service`), then USER,
    PASSWORD, HOST and PORT, merged in the order Django's own backend merges them, so workhorse
    connects exactly as Django does. Under `manage.py test` the entry names the test database.

    >>> wh_django.database_url()                                      # doctest: +SKIP
    'dbname=test_shop host=/run/postgresql'
    """
    from django.conf import settings

    explicit = getattr(settings, SETTING_DATABASE_URL, None)
    if explicit:
        return str(explicit)
    return alias_url(using or database_alias())


def alias_url(using: str) -> str:
    """A libpq DSN for `DATABASES[using]` alone (no setting consulted), as Django connects.

    >>> wh_django.alias_url("default")                                # doctest: +SKIP
    'dbname=shop'
    """
    from django.conf import settings

    entry = settings.DATABASES[using]
    options = dict(entry.get("OPTIONS") or {})
    name = entry.get("NAME")
    params: dict[str, Any] = {}
    if name:
        params["dbname"] = name
    elif name is None and "NAME" in entry:
        options.pop("service", None)
        params["dbname"] = "postgres"
    known = {d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()}
    for key, value in options.items():
        if key in _NOT_CONNINFO:
            continue
        if key not in known:
            raise InvalidOptionsError(
                f"DATABASES[{using!r}]['OPTIONS'] has {key!r}, which is not a libpq connection "
                "parameter; workhorse cannot pass it on"
            )
        params[key] = value
    for key, setting in (("user", "USER"), ("password", "PASSWORD"), ("host", "HOST"),
                         ("port", "PORT")):
        if entry.get(setting):
            params[key] = entry[setting]
    return make_conninfo(**{
        k: ("1" if v is True else "0" if v is False else str(v))
        for k, v in params.items() if v is not None and v != ""
    })


def __getattr__(name: str) -> Any:
    # `TasksBackend` imports django.tasks (Django >= 6.0): only when it is asked for, so that
    # the rest works on older Django.
    if name == "TasksBackend":
        from .tasks_backend import TasksBackend

        return TasksBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "TasksBackend",
    "alias_url",
    "atomic",
    "check_psycopg3",
    "connection",
    "database_alias",
    "database_url",
    "on_commit",
]
