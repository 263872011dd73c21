"""Django: enqueue on Django's own psycopg 3 connection, so that a job commits with the model.

    from django.db import transaction
    from workhorse.contrib import django as wh_django

    with transaction.atomic():
        order = Order.objects.create(total=total)
        with app.using(wh_django.connection()):   # or: with wh_django.atomic(app):
            send_receipt.delay(order.id)          # commits, or rolls back, with the order

    wh_django.on_commit(send_receipt, order.id)   # or: enqueue only once the commit happened

`connection()` is the raw psycopg 3 connection under Django's (Django ≥ 4.2 with the
`django.db.backends.postgresql` engine and psycopg 3 installed); inside `transaction.atomic()` it
is in Django's transaction, and the enqueue is a savepoint in it. `on_commit` uses the App's
own pool after Django commits: the job cannot exist without the model, but a crash between the
two commits loses the job (the transactional form cannot).

`database_url()` is a libpq DSN for a `DATABASES` entry, or the `WORKHORSE_DATABASE_URL`
setting when the project sets it: `App("shop", database_url=wh_django.database_url())`.
The worker is the plain CLI on a module that sets Django up first (see examples/django):
`workhorse worker shop.worker:app`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from ..errors import InvalidOptionsError


def connection(using: str = "default") -> psycopg.Connection[Any]:
    """The psycopg 3 connection under Django's connection `using` (opened if need be)."""
    from django.db import connections

    wrapper = connections[using]
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise InvalidOptionsError(
            f"Django database {using!r} is not PostgreSQL on psycopg 3 (engine "
            f"{wrapper.settings_dict.get('ENGINE')!r}, driver {type(raw).__module__}); "
            "workhorse enqueues on a psycopg 3 connection"
        )
    return raw


@contextmanager
def atomic(app: Any, using: str = "default") -> Iterator[psycopg.Connection[Any]]:
    """`transaction.atomic(using)` with `app.using(...)` its connection: every enqueue in the
    block commits or rolls back with the block's model writes."""
    from django.db import transaction

    with transaction.atomic(using=using), app.using(connection(using)) as conn:
        yield conn


def on_commit(task: Any, *args: Any, using: str = "default", **kwargs: Any) -> None:
    """Enqueue `task(*args, **kwargs)` once Django's current transaction commits (at once
    outside one); nothing is enqueued if it rolls back."""
    from django.db import transaction

    transaction.on_commit(lambda: task.delay(*args, **kwargs), using=using)


# OPTIONS that Django or psycopg consume in Python: they are not libpq connection parameters.
_NOT_CONNINFO = frozenset({
    "assume_role", "isolation_level", "pool", "server_side_binding", "cursor_factory",
    "context", "prepare_threshold", "autocommit", "row_factory",
})


def database_url(using: str = "default") -> str:
    """The `WORKHORSE_DATABASE_URL` setting if the project has one, else a DSN for
    `DATABASES[using]`: its NAME, then its `OPTIONS` (libpq parameters such as `sslmode`,
    `sslrootcert`, `options`, `service`), then USER, PASSWORD, HOST and PORT, merged in the
    order Django's own backend merges them, so workhorse connects exactly as Django does."""
    from django.conf import settings

    explicit = getattr(settings, "WORKHORSE_DATABASE_URL", None)
    if explicit:
        return str(explicit)
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
