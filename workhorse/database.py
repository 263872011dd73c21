"""Which database, by one rule in every process (docs/design.md, "Which database wins"):

  1. `--database-url` on the command line (the CLI sets it on the App, or passes it here);
  2. `App(database_url=...)` in code;
  3. a framework's own answer, when one is installed (`workhorse.contrib.django`: the Django
     setting `WORKHORSE_DATABASE_URL`, then Django's database);
  4. the environment's `WORKHORSE_DATABASE_URL`;
  5. the embedded server.

`resolve_url(explicit)` applies 3 to 5 below an explicit URL (1 or 2). A framework integration
installs itself with `install_framework`; it is asked at every resolution, so that an App made at
import reads the framework's database when it is first used (under `manage.py test`, the test
database).

Every connection workhorse opens names itself (`application_name = workhorse-<role>`), so that
`pg_stat_activity` tells the web pool, the CLI and the worker's parts apart.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import _ops
from .errors import DatabaseError, InvalidOptionsError, first_line
from .types import check_database_name

ENV_URL = "WORKHORSE_DATABASE_URL"
# docs/design.md "Several databases": `default=url,eu=url2`, below `App(databases=...)` in code.
ENV_DATABASES = "WORKHORSE_DATABASES"
# The database of every queue that names none, and the one `database_url` names.
DEFAULT_DATABASE = "default"
ENV_AUTO_MIGRATE = "WORKHORSE_AUTO_MIGRATE"

_migrated: set[str] = set()
_migrated_lock = threading.Lock()

# The installed framework's answer to "which database" (None: no framework, or it has none),
# and to "which transaction does an enqueue join" (given the App's own URL, None when it has
# none; returns a connection, or None for the App's pool).
_framework_url: Callable[[], str | None] | None = None
_framework_joined: Callable[[str | None], Any] | None = None


def install_framework(
    url: Callable[[], str | None] | None,
    joined: Callable[[str | None], Any] | None = None,
) -> None:
    """Install (or, with None, remove) a framework's steps of the rule: `url()` names the
    database below an explicit URL and above the environment, or returns None to pass;
    `joined(app_url)` gives the connection whose open transaction an App's enqueue joins (its
    `database_url` given in code, None when it has none), or None.

    >>> install_framework(lambda: None); resolve_url("dbname=billing")
    'dbname=billing'
    >>> install_framework(None)
    """
    global _framework_url, _framework_joined
    _framework_url = url
    _framework_joined = joined


def framework_connection(app_url: str | None) -> Any:
    """The framework's connection an enqueue of an App (with `app_url` in code, or None)
    joins now, or None: its pool.

    >>> install_framework(None); framework_connection(None) is None
    True
    """
    found = _framework_joined
    return found(app_url) if found is not None else None


def framework_url() -> str | None:
    """The installed framework's database, or None (no framework, or it names none).

    >>> install_framework(None); framework_url() is None
    True
    """
    found = _framework_url
    return found() if found is not None else None


def resolve_url(explicit: str | None = None) -> str:
    """The DSN to use: `explicit` (the flag, or the App's own), else the framework's, else
    WORKHORSE_DATABASE_URL, else the embedded server (started only when it is the answer).

    >>> resolve_url("postgresql://db.internal/billing")
    'postgresql://db.internal/billing'
    """
    if explicit:
        return explicit
    from_framework = framework_url()
    if from_framework:
        return from_framework
    from_env = os.environ.get(ENV_URL)
    if from_env:
        return from_env
    from . import embedded

    return embedded.ensure_running()


# One `name=` that starts an entry of WORKHORSE_DATABASES (a URL's own `=` follows a `?` or a
# space, never a comma and a bare name).
_ENTRY = re.compile(r"(?:^|,)\s*([^,=\s]+)\s*=")


def parse_databases(text: str, source: str = ENV_DATABASES) -> dict[str, str]:
    """`default=url,eu=url2` as a mapping (InvalidOptionsError naming `source` when it is not
    one: an entry without a name, a name twice, an empty URL).

    >>> parse_databases("default=postgresql://a/x,eu=postgresql://b/y?sslmode=require")
    {'default': 'postgresql://a/x', 'eu': 'postgresql://b/y?sslmode=require'}
    """
    starts = list(_ENTRY.finditer(text))
    if (not starts or starts[0].start() != 0 or not text.strip()
            or text.lstrip().startswith(",") or text.rstrip().endswith(",")):
        raise InvalidOptionsError(
            f"{source} must read name=url[,name=url...], got {text[:200]!r}")
    found: dict[str, str] = {}
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        name, url = match.group(1), text[match.end():end].strip()
        try:
            check_database_name(name)
        except InvalidOptionsError as exc:
            raise InvalidOptionsError(f"{source}: {exc}") from None
        if url.endswith(","):
            raise InvalidOptionsError(f"{source} has an empty entry after the database {name!r}")
        if name in found:
            raise InvalidOptionsError(f"{source} names the database {name!r} twice")
        if not url:
            raise InvalidOptionsError(f"{source} gives the database {name!r} no URL")
        found[name] = url
    return found


def check_databases(databases: object) -> dict[str, str]:
    """A copy of `App(databases=...)`: a mapping of database names to URLs, checked.

    >>> check_databases({"eu": "postgresql://eu.internal/app"})
    {'eu': 'postgresql://eu.internal/app'}
    """
    if not isinstance(databases, dict) or not databases:
        raise InvalidOptionsError(
            f"databases= is a dict of names to URLs, got {str(databases)[:200]!r}")
    checked: dict[str, str] = {}
    for name, url in databases.items():
        check_database_name(name)
        if not isinstance(url, str) or not url.strip() or "\x00" in url:
            raise InvalidOptionsError(f"the database {name!r} needs a URL (a non-empty str)")
        checked[name] = url
    return checked


def databases_from_environment() -> dict[str, str] | None:
    """WORKHORSE_DATABASES as a mapping, or None when it is unset or empty."""
    text = os.environ.get(ENV_DATABASES, "").strip()
    return parse_databases(text) if text else None


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


def application_name(role: str) -> str:
    """The `application_name` of a connection workhorse opens for `role`.

    >>> application_name("cli")
    'workhorse-cli'
    """
    return f"workhorse-{role}"


def with_application_name(url: str, role: str) -> str:
    """`url` with `application_name=workhorse-<role>`, for code that connects from a URL alone
    (a pool made elsewhere).

    >>> with_application_name("dbname=billing", "dashboard")
    'dbname=billing application_name=workhorse-dashboard'
    """
    return make_conninfo(url, application_name=application_name(role))


def connect(url: str, role: str = "cli", **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection named `workhorse-<role>`, or DatabaseError with one clear line. Never
    prepares statements by itself (`prepare_threshold=None`): a prepared statement lives in one
    server session, which PgBouncer in transaction mode does not keep for us."""
    kwargs.setdefault("prepare_threshold", None)
    kwargs.setdefault("application_name", application_name(role))
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"cannot connect to {mask(url)}: {first_line(exc)}") from None


def same_database(first: str, second: str) -> bool:
    """Whether two DSNs name the same database (server, port and database, libpq's PG*
    defaults filled in; a user, a password or an application name does not make another).

    >>> same_database("host=/tmp dbname=shop", "postgresql:///shop?host=/tmp")
    True
    """
    def key(url: str) -> tuple[str, ...]:
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError:
            return (url,)
        # Not the user: one database reached as two roles is still one database.
        user = str(params.get("user") or os.environ.get("PGUSER") or "")
        return (str(params.get("host") or os.environ.get("PGHOST") or ""),
                str(params.get("port") or os.environ.get("PGPORT") or "5432"),
                str(params.get("dbname") or os.environ.get("PGDATABASE") or user))

    return key(first) == key(second)


def ensure_schema(url: str) -> None:
    """Install or bring forward the schema once per process, unless WORKHORSE_AUTO_MIGRATE=0."""
    if not auto_migrate_enabled() or url in _migrated:
        return
    with _migrated_lock:
        if url in _migrated:
            return
        with connect(url, role="migrate", autocommit=True) as conn, conn.transaction():
            _ops.execute(conn, _ops.install_schema())
        _migrated.add(url)
