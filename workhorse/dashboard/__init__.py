"""The web dashboard (the optional extra `workhorse[dashboard]`): queues against their limits,
saturated and rate-limited keys, throughput over the last hour, jobs, workers and schedules, with
the operator's actions (pause, resume, override, retry, cancel).

Server-rendered pages (Starlette and Jinja2, every value escaped), refreshed in place by htmx
polling; every asset ships in the package. `workhorse dashboard` serves it with uvicorn:

    workhorse dashboard --host 127.0.0.1 --port 8642 [--read-only]

On a loopback address no token is needed. Any other address needs WORKHORSE_DASHBOARD_TOKEN,
which the dashboard then requires (a login form that sets a cookie, or `Authorization: Bearer`).

>>> from workhorse.dashboard import create_app          # doctest: +SKIP
>>> asgi_app = create_app("postgresql://...", read_only=True)
"""

from __future__ import annotations

import ipaddress
import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.applications import Starlette

TOKEN_ENV = "WORKHORSE_DASHBOARD_TOKEN"
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


def is_loopback(host: str) -> bool:
    """Whether binding `host` only listens on this machine (so that no token is needed)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def configured_token() -> str | None:
    """WORKHORSE_DASHBOARD_TOKEN, or None when it is unset or empty."""
    return os.environ.get(TOKEN_ENV) or None


def create_app(url: str, *, read_only: bool = False, token: str | None = None,
               local_only: bool = False) -> Starlette:
    """The dashboard as an ASGI application on the database at `url`. With `token`, every page
    needs it (a login cookie or a bearer header); `read_only` hides and refuses every action;
    `local_only` answers only requests addressed to a loopback host name (what `serve` sets
    when no token guards it)."""
    from ._web import build

    return build(url, read_only=read_only, token=token, local_only=local_only)


def serve(url: str, *, host: str, port: int, read_only: bool, token: str | None,
          **uvicorn_options: Any) -> None:
    """Serve the dashboard with uvicorn until interrupted."""
    import uvicorn

    from ._web import Server

    app = create_app(url, read_only=read_only, token=token, local_only=token is None)
    config = uvicorn.Config(app, host=host,
                            port=port, access_log=False, log_level="warning", **uvicorn_options)
    Server(config).run()


__all__ = ["TOKEN_ENV", "configured_token", "create_app", "is_loopback", "missing_extra", "serve"]
