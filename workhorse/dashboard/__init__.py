"""The web dashboard (the optional extra `workhorse[dashboard]`): queues against their limits,
saturated and rate-limited keys, throughput over the last hour, jobs, workers and schedules, with
the operator's actions (pause, resume, override, retry, cancel).

Server-rendered pages (Starlette and Jinja2, every value escaped), refreshed in place by htmx
polling; every asset ships in the package. `workhorse dashboard` serves it with uvicorn:

    workhorse dashboard --host 127.0.0.1 --port 8642 [--read-only] [--redact]
                        [--tls-cert cert.pem --tls-key key.pem]

Several databases (docs/design.md "Several databases"): `workhorse dashboard` serves every
database WORKHORSE_DATABASES names (`--database NAME` one of them), `create_app` takes a mapping of
name to URL. With more than one, every table has a database column, and a `database` query
parameter (or form field) says which database a page or an action is about:

    /?database=eu, /jobs?database=eu, /workers?database=eu, /budgets?..., /schedules?...
                               the list of one database (without it: every database's rows)
    /jobs/<id>?database=eu     a job (without it: `default`'s, as app.get_job(id) reads it);
                               likewise /workflows/<id>
    /queue?name=Q&database=eu  a queue (without it: the one database that knows Q; a 409 with
                               links when several do)
    POST /queue/pause etc.     the form field `database`, with the same rules; the jobs
                               page's picks send `id=eu:42` (a bare id is the form's
                               `database`'s, else `default`'s); an action on every match of a
                               filter needs `database`

A database that cannot be reached is said so, in a banner (and a row of the queues table), while
the others' rows show; it is tried again every few seconds. With one database nothing changes:
no column, and no parameter is needed.

On a loopback address no token is needed. Any other address needs WORKHORSE_DASHBOARD_TOKEN
(at least 32 characters), which the dashboard then requires, on loopback too when it is set: a
login form that sets a signed, expiring session cookie, or `Authorization: Bearer`.

>>> from workhorse.dashboard import create_app          # doctest: +SKIP
>>> asgi_app = create_app("postgresql://...", read_only=True)
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.applications import Starlette

from ._access import (
    MIN_TOKEN_LENGTH,
    TOKEN_ENV,
    check_token,
    configured_token,
    is_loopback,
)

EXTRA_MODULES = ("starlette", "jinja2", "uvicorn", "multipart")
INSTALL_HINT = "pip install 'workhorse[dashboard]'"


def missing_extra() -> list[str]:
    """The modules of the `dashboard` extra that cannot be imported (empty: all can)."""
    missing = []
    for name in EXTRA_MODULES:
        try:
            import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def create_app(url: str | Mapping[str, str], *, read_only: bool = False,
               token: str | None = None, local_only: bool = False,
               redact: bool = False) -> Starlette:
    """The dashboard as an ASGI application on the database at `url`, or on several (a
    mapping of name to URL, `default` first; see above). With `token` (at least 32
    characters), every page needs it (a login session or a bearer header); `read_only` hides
    and refuses every action; `redact` hides payloads and results, shown only to a request
    that carries the token itself; `local_only` answers only requests addressed to a loopback
    host name (what `serve` sets when no token guards it)."""
    from ._web import build

    return build(url, read_only=read_only, token=token, local_only=local_only, redact=redact)


def serve(url: str | Mapping[str, str], *, host: str, port: int, read_only: bool,
          token: str | None, redact: bool = False, tls_cert: str | None = None,
          tls_key: str | None = None, **uvicorn_options: Any) -> None:
    """Serve the dashboard with uvicorn until interrupted (over https with `tls_cert` and
    `tls_key`, PEM files), on one database (a URL) or several (name -> URL)."""
    import uvicorn

    from ._web import Server

    if tls_cert is not None:
        uvicorn_options.update(ssl_certfile=tls_cert, ssl_keyfile=tls_key)
    app = create_app(url, read_only=read_only, token=token, local_only=token is None,
                     redact=redact)
    config = uvicorn.Config(app, host=host,
                            port=port, access_log=False, log_level="warning", **uvicorn_options)
    Server(config).run()


__all__ = ["MIN_TOKEN_LENGTH", "TOKEN_ENV", "check_token", "configured_token", "create_app",
           "is_loopback", "missing_extra", "serve"]
