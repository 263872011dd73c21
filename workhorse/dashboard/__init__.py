"""The web dashboard (the optional extra `workhorse[dashboard]`): queues against their limits,
saturated and rate-limited keys, throughput over the last hour, jobs, workers and schedules, with
the operator's actions (pause, resume, override, retry, cancel).

Server-rendered pages (Starlette and Jinja2, every value escaped), refreshed in place by htmx
polling; every asset ships in the package. `workhorse dashboard` serves it with uvicorn:

    workhorse dashboard --host 127.0.0.1 --port 8642 [--read-only] [--redact]
                        [--tls-cert cert.pem --tls-key key.pem]

On a loopback address no token is needed. Any other address needs WORKHORSE_DASHBOARD_TOKEN
(at least 32 characters), which the dashboard then requires, on loopback too when it is set: a
login form that sets a signed, expiring session cookie, or `Authorization: Bearer`.

>>> from workhorse.dashboard import create_app          # doctest: +SKIP
>>> asgi_app = create_app("postgresql://...", read_only=True)
"""

from __future__ import annotations

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


def create_app(url: str, *, read_only: bool = False, token: str | None = None,
               local_only: bool = False, redact: bool = False) -> Starlette:
    """The dashboard as an ASGI application on the database at `url`. With `token` (at least
    32 characters), every page needs it (a login session or a bearer header); `read_only`
    hides and refuses every action; `redact` hides payloads and results, shown only to a
    request that carries the token itself; `local_only` answers only requests addressed to a
    loopback host name (what `serve` sets when no token guards it)."""
    from ._web import build

    return build(url, read_only=read_only, token=token, local_only=local_only, redact=redact)


def serve(url: str, *, host: str, port: int, read_only: bool, token: str | None,
          redact: bool = False, tls_cert: str | None = None, tls_key: str | None = None,
          **uvicorn_options: Any) -> None:
    """Serve the dashboard with uvicorn until interrupted (over https with `tls_cert` and
    `tls_key`, PEM files)."""
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
